"""The judge: encodings, the per-file verdict cache, where the edits are
found, the check of every rewrite, and what loads libcst."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dflash2_backport
from dflash2_backport.cli.main import app
from dflash2_backport.transforms.framework.vocabulary import Direction, State
from dflash2_backport.engine import judge as judge_module
from dflash2_backport.engine.judge import judge
from dflash2_backport.utils.errors import BackportError
from tests.trees import TARGETS, make_site, snapshot

pytestmark = pytest.mark.wheels

SELECTOR = "vllm/v1/worker/gpu/spec_decode/__init__.py"
REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


# -- encodings ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "body", "named"),
    [
        (b"", b"# caf\xe9\n", "not valid utf-8 (line 2"),
        (b"# -*- coding: ascii -*-\n", b"# caf\xc3\xa9\n", "not valid ascii (line 3"),
        (b"# -*- coding: no-such-codec -*-\n", b"", "unknown encoding"),
    ],
    ids=["no cookie, latin-1 byte", "ascii cookie, utf-8 bytes", "unknown cookie"],
)
def test_a_file_invalid_in_its_declared_encoding_is_refused_in_one_line(
    site: Path, header: bytes, body: bytes, named: str
) -> None:
    path = site / SELECTOR
    path.write_bytes(header + b"# SPDX\n" + body + path.read_bytes())
    with pytest.raises(BackportError) as refused:
        judge(site, False, Direction.APPLY)
    message = str(refused.value)
    assert message.startswith(f"{path}: ")
    assert named in message and "; fix the file" in message

    result = CliRunner().invoke(app, ["check", "--site-packages", str(site)])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert str(path) in line and named in line


def test_a_latin_1_file_is_judged_and_patched_in_latin_1(site: Path) -> None:
    path = site / SELECTOR
    original = b"# -*- coding: latin-1 -*-\n# r\xe9sum\xe9 of the speculators\n"
    original += path.read_bytes()
    path.write_bytes(original)

    (selector,) = [f for f in judge(site, True, Direction.APPLY) if f.path == SELECTOR]
    assert [h.state for e in selector.edits for h in e.hunks] == [State.PENDING]
    assert selector.patched is not None
    assert selector.patched.startswith(original[:60])
    text = selector.patched.decode("latin-1")
    assert "r\xe9sum\xe9" in text and "DFlash2Speculator(vllm_config, device)" in text

    assert CliRunner().invoke(app, ["apply", "--site-packages", str(site)]).exit_code == 0
    assert path.read_bytes().startswith(original[:60])
    assert CliRunner().invoke(app, ["check", "--site-packages", str(site)]).exit_code == 0


# -- the verdict cache ----------------------------------------------------------


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """("judge", file) for each file the judges parse, ("write", file) for
    each file the writers rewrite."""
    files: list[tuple[str, str]] = []
    judge_one, rewrite = judge_module._judged, judge_module._rewritten

    def judged_file(root, path, text, direction):  # type: ignore[no-untyped-def]
        files.append(("judge", path))
        return judge_one(root, path, text, direction)

    def rewritten(root, to_write, direction):  # type: ignore[no-untyped-def]
        files.extend(("write", path) for path in to_write)
        return rewrite(root, to_write, direction)

    monkeypatch.setattr(judge_module, "_judged", judged_file)
    monkeypatch.setattr(judge_module, "_rewritten", rewritten)
    return files


def test_a_check_after_a_commit_judges_only_the_changed_file(
    site: Path, judged: list[tuple[str, str]]
) -> None:
    first = judge(site, False, Direction.APPLY)
    assert sorted(judged) == sorted(("judge", path) for path in TARGETS)
    judged.clear()

    assert judge(site, False, Direction.APPLY) == first
    assert judged == []

    changed = site / "vllm/config/vllm.py"
    changed.write_text(changed.read_text() + "\n\ndef committed():\n    return 1\n")
    again = judge(site, False, Direction.APPLY)
    assert judged == [("judge", "vllm/config/vllm.py")]
    assert [f.edits for f in again] == [f.edits for f in first]


def test_cached_verdicts_still_rewrite_when_bytes_are_wanted(
    site: Path, judged: list[tuple[str, str]]
) -> None:
    judge(site, False, Direction.APPLY)
    judged.clear()
    files = judge(site, True, Direction.APPLY)
    assert all(f.patched is not None for f in files)
    assert sorted(p for j, p in judged if j == "write") == sorted(TARGETS)


def _installed_copy(destination: Path) -> Path:
    """The package as the wheel lays it out, in a directory of its own."""
    package = destination / "dflash2_backport"
    shutil.copytree(
        Path(dflash2_backport.__file__).parent,
        package,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for name in ("transforms", "modules"):
        shutil.copytree(
            REPOSITORY / name, package / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    return destination


def test_a_changed_codemod_judges_the_files_again(site: Path, tmp_path: Path) -> None:
    copy = _installed_copy(tmp_path / "copy")
    cache = tmp_path / "verdicts"
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import dflash2_backport\n"
        "assert dflash2_backport.__file__.startswith(sys.argv[1]), dflash2_backport.__file__\n"
        "from dflash2_backport.cli.main import app\n"
        "app(['check', '--site-packages', sys.argv[2]], prog_name='dflash2-backport')\n"
    )

    def check() -> int:
        env = {"DFLASH2_BACKPORT_VERDICT_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
        return subprocess.run(
            [sys.executable, "-c", probe, str(copy), str(site)],
            capture_output=True,
            env=env,
        ).returncode

    assert check() == 1  # pending, and now remembered
    assert check() == 1
    # The causality edit now expects another 0.27.1 fallback: the pristine
    # function is no longer one it knows, so a fresh judgement is drift.
    shipped = copy / "dflash2_backport/transforms/edits/causality/hunks/is_causal_first/0.27.1.py"
    source = shipped.read_text()
    fallback = "layer_types[layer_idx] == _SLIDING_ATTENTION\n"
    assert source.count(fallback) == 1
    shipped.write_text(
        source.replace(fallback, fallback.replace("_SLIDING_ATTENTION", "_FULL_ATTENTION"))
    )
    assert check() == 2


def test_a_source_checkout_reaches_the_codemods_without_installing(
    site: Path, tmp_path: Path
) -> None:
    checkout = tmp_path / "checkout"
    for name in ("dflash2_backport", "transforms"):
        shutil.copytree(
            REPOSITORY / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from dflash2_backport.engine.judge import judge\n"
        "from dflash2_backport.transforms.framework.vocabulary import Direction\n"
        "files = judge(__import__('pathlib').Path(sys.argv[2]), False, Direction.APPLY)\n"
        "print(sorted({e.state.value for f in files for e in f.edits}))\n"
    )
    # -S: no site-packages, so no editable install maps the package for it.
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe, str(checkout), str(site)],
        capture_output=True,
        text=True,
        env={"DFLASH2_BACKPORT_VERDICT_CACHE": str(tmp_path / "verdicts")},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['pending']"




# -- every rewrite is judged as it will be written -------------------------------


def test_a_rewrite_that_does_not_read_as_applied_stops_the_command(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dflash2_backport.transforms.edits.registry.writer import RegistryEntry

    monkeypatch.setattr(RegistryEntry, "forward", lambda self, tree, hunk, site: tree)
    before = snapshot(site)
    result = CliRunner().invoke(app, ["apply", "--site-packages", str(site)])
    assert result.exit_code == 2
    assert "registry/DFlash2DraftModel entry reads pending once rewritten, not applied" in (
        result.output
    )
    assert result.output.rstrip().endswith("please report this")
    assert snapshot(site) == before


# -- what reads the same in every command -----------------------------------------


def test_a_nul_byte_in_a_comment_is_refused_alike_by_check_and_apply(site: Path) -> None:
    path = site / SELECTOR
    path.write_bytes(b"# a stray \x00 in a comment\n" + path.read_bytes())
    before = snapshot(site)
    for command in ("check", "apply"):
        result = CliRunner().invoke(app, [command, "--site-packages", str(site)])
        assert result.exit_code == 2, (command, result.output)
        assert f"{path}: does not parse" in result.output and "null bytes" in result.output
    assert snapshot(site) == before


def _call_gumbel_noised_argmax_elsewhere(site: Path) -> None:
    gumbel = site / "vllm/v1/worker/gpu/sample/gumbel.py"
    gumbel.write_text(gumbel.read_text() + "\n\nnoised_argmax = gumbel_noised_argmax\n")


def test_check_never_answers_from_a_refused_reverts_verdicts(site: Path) -> None:
    assert CliRunner().invoke(app, ["apply", "--site-packages", str(site)]).exit_code == 0
    _call_gumbel_noised_argmax_elsewhere(site)
    reverted = CliRunner().invoke(app, ["revert", "--site-packages", str(site)])
    assert reverted.exit_code == 2
    assert "noised_argmax = gumbel_noised_argmax" in reverted.output
    # Reverting asks whether other code reads what it removes; checking does
    # not. (RECORD is stale now, so check exits 1 for it.)
    checked = CliRunner().invoke(app, ["check", "--site-packages", str(site), "--json"])
    edits = json.loads(checked.output)["edits"]
    assert {e["state"] for e in edits} == {"applied"}, checked.output


def test_a_dflash2_entry_in_another_table_is_refused_both_ways(site: Path) -> None:
    registry = site / "vllm/model_executor/models/registry.py"
    entry = '_OTHER_MODELS = {"DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM")}\n'
    registry.write_text(registry.read_text() + "\n" + entry)
    before = snapshot(site)
    for command in ("apply", "revert"):
        result = CliRunner().invoke(app, [command, "--site-packages", str(site)])
        assert result.exit_code == 2, (command, result.output)
        assert "found it in another table" in result.output
        assert "internal error" not in result.output
    assert snapshot(site) == before


# -- libcst loads only to rewrite -------------------------------------------------

PROBE = (
    "import sys\n"
    "from dflash2_backport.cli.main import app\n"
    "try:\n"
    "    app(['check', '--site-packages', sys.argv[1]], prog_name='dflash2-backport')\n"
    "except SystemExit as exit:\n"
    "    print(exit.code, 'libcst' in sys.modules)\n"
)


@pytest.mark.parametrize("tree, code", [("pristine", 1), ("drifted", 2), ("applied", 0)])
def test_a_check_that_rewrites_nothing_never_imports_libcst(
    site: Path, tmp_path: Path, tree: str, code: int
) -> None:
    if tree == "applied":
        assert CliRunner().invoke(app, ["apply", "--site-packages", str(site)]).exit_code == 0
    if tree == "drifted":
        registry = site / "vllm/model_executor/models/registry.py"
        registry.write_text(registry.read_text().replace('"DFlashDraftModel": (', '"X": ('))
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(site)],
        capture_output=True,
        text=True,
        env={"DFLASH2_BACKPORT_VERDICT_CACHE": str(tmp_path / "verdicts"), "PATH": "/usr/bin:/bin"},
    )
    assert result.stdout.splitlines()[-1].split() == [str(code), "False"], result.stderr
