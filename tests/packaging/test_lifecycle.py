"""A patched install's life: revert, pip's view of it, upgrades, and pre-commit hooks."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dflash2_backport.cli.main import app
from tests.checkout import copy_of_the_project
from tests.trees import INSTALLED, TARGETS, make_site, snapshot
from tests.wheels import CACHE, vllm_source, vllm_wheel

pytestmark = pytest.mark.wheels

runner = CliRunner()
REPOSITORY = Path(__file__).resolve().parents[2]
TOOL = [sys.executable, "-m", "dflash2_backport"]


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


# -- revert -----------------------------------------------------------------


def test_revert_after_apply_restores_every_file_and_the_record_byte_for_byte(site: Path) -> None:
    pristine = snapshot(site)
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    assert snapshot(site) != pristine
    result = invoke("revert", "--site-packages", str(site))
    assert result.exit_code == 0, result.output
    assert snapshot(site) == pristine
    assert not (site / INSTALLED[1]).parent.exists()


def test_revert_is_idempotent(site: Path) -> None:
    invoke("apply", "--site-packages", str(site))
    invoke("revert", "--site-packages", str(site))
    reverted = snapshot(site)
    result = invoke("revert", "--site-packages", str(site))
    assert result.exit_code == 0
    assert "nothing to do" in result.output
    assert snapshot(site) == reverted


def test_revert_undoes_the_spec_patchers_result_too(site: Path, tmp_path: Path) -> None:
    from tests.oracle import seed_patched

    pristine = snapshot(site)
    seeded = seed_patched(site, tmp_path)
    result = invoke("revert", "--site-packages", str(seeded))
    assert result.exit_code == 0, result.output
    assert snapshot(seeded) == pristine


UNSAFE = {
    "layers built with another class after apply": (
        "vllm/model_executor/models/qwen3_dflash.py",
        "self.decoder_layer_cls(",
        "Qwen3DecoderLayer(",
    ),
    "the DFlash2 entry pointed elsewhere after apply": (
        "vllm/model_executor/models/registry.py",
        '("qwen3_dflash2", "DFlash2Qwen3ForCausalLM")',
        '("my_dflash2", "Mine")',
    ),
    "an installed module edited after apply": (
        INSTALLED[2],
        "# Backported to vLLM 0.27.1 by dflash2-backport.\n",
        "# Backported to vLLM 0.27.1 by dflash2-backport.\n# local tweak\n",
    ),
}


@pytest.mark.parametrize("case", UNSAFE.values(), ids=UNSAFE.keys())
def test_revert_refuses_a_file_changed_unsafely_after_apply_and_writes_nothing(
    site: Path, case: tuple[str, str, str]
) -> None:
    invoke("apply", "--site-packages", str(site))
    relative, old, new = case
    path = site / relative
    text = path.read_text()
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    before = snapshot(site)
    result = invoke("revert", "--site-packages", str(site))
    assert result.exit_code == 2, result.output
    assert any(
        line.lstrip().startswith("drift") and relative in line
        for line in result.output.splitlines()
    ), result.output
    assert snapshot(site) == before


def test_apply_fail_if_changed_exits_1_then_0(site: Path) -> None:
    assert invoke("apply", "--site-packages", str(site), "--fail-if-changed").exit_code == 1
    assert invoke("apply", "--site-packages", str(site), "--fail-if-changed").exit_code == 0


def test_a_source_tree_gets_no_record(tmp_path: Path) -> None:
    tree = make_site("0.27.1", tmp_path / "fork")
    shutil.rmtree(next(tree.glob("vllm-*.dist-info")))
    assert invoke("apply", "--root", str(tree)).exit_code == 0
    assert not list(tree.glob("*.dist-info"))


# -- pip's view of a patched install ------------------------------------------


def _venv_with_vllm(directory: Path, version: str = "0.27.1") -> tuple[Path, Path]:
    subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True)
    python = directory / "bin" / "python"
    _pip(python, "install", "--no-deps", str(vllm_wheel(version)))
    return python, _purelib(python)


def _purelib(python: Path) -> Path:
    return Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [python, "-m", "pip", "--quiet", "--disable-pip-version-check", *args],
        check=True,
    )


def _vllm_files_left(site: Path) -> list[str]:
    return sorted(
        str(p.relative_to(site)) for p in (site / "vllm").rglob("*") if p.is_file()
    ) if (site / "vllm").exists() else []


@pytest.fixture(scope="module")
def _pip_made_venv(tmp_path_factory: pytest.TempPathFactory):
    """A venv with vLLM 0.27.1 installed by pip, made once: pip's install
    (unpacking and byte-compiling about 300 MB) costs several times a copy."""
    directory = tmp_path_factory.mktemp("pip-made") / "venv"
    _venv_with_vllm(directory)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def vllm_venv(tmp_path: Path, _pip_made_venv: Path):
    """The pip-made venv, copied whole for this test, byte for byte and
    without links into the original (a copy is a venv of its own: its
    interpreter finds its prefix from where it stands), with its
    interpreter and site-packages; removed afterwards (800 MB)."""
    shutil.copytree(_pip_made_venv, tmp_path / "venv", symlinks=True)
    python = tmp_path / "venv" / "bin" / "python"
    yield python, _purelib(python)
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)


@pytest.mark.installs
@pytest.mark.parametrize("steps", [["apply"], ["apply", "revert"]], ids=" then ".join)
def test_pip_uninstall_leaves_nothing_of_vllm_behind(vllm_venv, steps: list[str]) -> None:
    python, site = vllm_venv
    for step in steps:
        subprocess.run([*TOOL, step, "--site-packages", str(site)], check=True, capture_output=True)
    assert (site / INSTALLED[0]).exists() == (steps == ["apply"])
    _pip(python, "uninstall", "--yes", "vllm")
    assert _vllm_files_left(site) == []


@pytest.mark.installs
def test_check_after_upgrading_a_patched_install_says_upstream_ships_it(vllm_venv) -> None:
    python, site = vllm_venv
    subprocess.run([*TOOL, "apply", "--site-packages", str(site)], check=True, capture_output=True)
    _pip(python, "install", "--no-deps", "--upgrade", str(vllm_wheel("0.28.0")))
    result = subprocess.run(
        [*TOOL, "check", "--site-packages", str(site)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vLLM 0.28.0" in result.stdout and "ships DFlash2" in result.stdout
    for relative in INSTALLED:
        assert (site / relative).read_bytes() == (vllm_source("0.28.0") / relative).read_bytes()


# -- pre-commit ----------------------------------------------------------------


def test_hook_files_pattern_covers_exactly_the_backport_files() -> None:
    hooks = yaml.safe_load((REPOSITORY / ".pre-commit-hooks.yaml").read_text())
    assert {hook["id"] for hook in hooks} == {"dflash2-backport-check", "dflash2-backport-apply"}
    for hook in hooks:
        pattern = re.compile(hook["files"])
        assert hook["pass_filenames"] is False and hook["require_serial"] is True
        for relative in (*TARGETS, *INSTALLED):
            assert pattern.search(relative), relative
        for other in ("vllm/model_executor/models/qwen3.py", "vllm/config/model.py",
                      "vllm/v1/worker/gpu/spec_decode/eagle/speculator.py"):
            assert not pattern.search(other), other


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    environment = dict(
        os.environ,
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
    )
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=check, env=environment
    )


@pytest.fixture(scope="module")
def hook_repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This project's working tree as a git repository pre-commit can clone."""
    clone = copy_of_the_project(tmp_path_factory.mktemp("hook-repo"))
    _git(clone, "init", "--quiet")
    _git(clone, "add", "--all")
    _git(clone, "commit", "--quiet", "--message", "snapshot")
    return clone, _git(clone, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture
def fork(tmp_path: Path, hook_repository: tuple[Path, str], tmp_path_factory) -> Path:
    """A vLLM 0.27.1 source tree in git, with both hooks configured."""
    repo = make_site("0.27.1", tmp_path / "fork")
    shutil.rmtree(next(repo.glob("vllm-*.dist-info")))
    clone, revision = hook_repository
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {clone}\n  rev: {revision}\n  hooks:\n"
        "  - id: dflash2-backport-check\n"
        "  - id: dflash2-backport-apply\n    stages: [manual]\n"
    )
    _git(repo, "init", "--quiet")
    _git(repo, "add", "--all")
    _git(repo, "commit", "--quiet", "--no-verify", "--message", "vLLM 0.27.1")
    return repo


def _pre_commit(repo: Path, *args: str) -> subprocess.CompletedProcess:
    environment = dict(
        os.environ,
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
        GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
    )
    executable = Path(sys.executable).with_name("pre-commit")
    return subprocess.run(
        [str(executable), *args], cwd=repo, capture_output=True, text=True, env=environment
    )


@pytest.fixture(autouse=True, scope="module")
def _shared_pre_commit_home(tmp_path_factory: pytest.TempPathFactory):
    """One hook environment for all the tests here (building it is the slow
    part), used by `pre-commit run` and by the git hook `pre-commit install`
    writes alike; removed afterwards (about 60 MB)."""
    home = tmp_path_factory.mktemp("pre-commit-home")
    previous = os.environ.get("PRE_COMMIT_HOME")
    os.environ["PRE_COMMIT_HOME"] = str(home)
    yield
    if previous is None:
        os.environ.pop("PRE_COMMIT_HOME", None)
    else:
        os.environ["PRE_COMMIT_HOME"] = previous
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.installs
def test_pre_commit_check_fails_on_a_pristine_tree_and_its_hint_fixes_it(fork: Path) -> None:
    check = _pre_commit(fork, "run", "--all-files", "dflash2-backport-check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "pending" in check.stdout and "registry" in check.stdout
    # The hint, run as printed: the apply hook, through pre-commit.
    (hint,) = re.findall(r"; run `([^`]+)`", check.stdout)
    words = shlex.split(hint)
    assert words[:2] == ["pre-commit", "run"], hint

    first = _pre_commit(fork, *words[1:])
    assert first.returncode == 1, first.stdout + first.stderr
    assert "files were modified by this hook" in first.stdout or "Failed" in first.stdout
    second = _pre_commit(fork, "run", "--all-files", "--hook-stage", "manual", "dflash2-backport-apply")
    assert second.returncode == 0, second.stdout + second.stderr
    assert _pre_commit(fork, "run", "--all-files", "dflash2-backport-check").returncode == 0


@pytest.mark.installs
def test_pre_commit_blocks_a_commit_that_drops_an_edit_and_passes_a_reformat(fork: Path) -> None:
    subprocess.run([*TOOL, "apply", "--root", str(fork)], check=True, capture_output=True)
    _git(fork, "add", "--all")
    assert _pre_commit(fork, "install").returncode == 0
    committed = _git(fork, "commit", "--quiet", "--message", "backport", check=False)
    assert committed.returncode == 0, committed.stdout + committed.stderr

    registry = fork / "vllm/model_executor/models/registry.py"
    patched = registry.read_text()
    dropped = patched.replace(
        '    "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),\n', ""
    )
    assert dropped != patched
    registry.write_text(dropped)
    _git(fork, "add", "--all")
    blocked = _git(fork, "commit", "--message", "merge that lost an edit", check=False)
    assert blocked.returncode != 0
    assert "registry" in blocked.stdout + blocked.stderr

    registry.write_text(patched)
    subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--isolated", "--line-length", "79", str(registry)],
        check=True, capture_output=True,
    )
    assert registry.read_text() != patched
    _git(fork, "add", "--all")
    reformatted = _git(fork, "commit", "--message", "reformat", check=False)
    assert reformatted.returncode == 0, reformatted.stdout + reformatted.stderr


@pytest.mark.installs
def test_pre_commit_autoupdate_pins_a_commit_while_no_release_is_tagged(fork: Path) -> None:
    """The README's advice: a rev must exist, and with no tags `autoupdate`
    pins the newest commit, here the hook repository's HEAD."""
    config = fork / ".pre-commit-config.yaml"
    text = config.read_text()
    head = re.search(r"rev: (\S+)", text).group(1)
    config.write_text(text.replace(f"rev: {head}", "rev: v0.1.0"))
    missing = _pre_commit(fork, "run", "--all-files", "dflash2-backport-check")
    assert missing.returncode != 0
    assert "v0.1.0" in missing.stdout + missing.stderr

    updated = _pre_commit(fork, "autoupdate")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert f"rev: {head}" in config.read_text()


# -- make demo -------------------------------------------------------------------


def _files(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.installs
def test_make_demo_leaves_nothing_outside_its_temporary_directory(tmp_path: Path) -> None:
    """The demo is throwaway: with HOME, the XDG cache and TMPDIR all empty
    directories, they are empty again afterwards (no verdicts, no pip cache,
    no temporary directory), and the checkout has no new file (no build/)."""
    places = {name: tmp_path / name for name in ("home", "xdg-cache", "tmp")}
    for place in places.values():
        place.mkdir()
    environ = {
        k: v for k, v in os.environ.items()
        if not k.startswith("DFLASH2_BACKPORT_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    environ.update(
        HOME=str(places["home"]), XDG_CACHE_HOME=str(places["xdg-cache"]),
        TMPDIR=str(places["tmp"]), DFLASH2_BACKPORT_TEST_CACHE=str(CACHE),
    )
    # pip runs `rustc --version` for its user agent; where that is rustup's
    # proxy, it writes its settings under HOME unless told where they are.
    rustup = Path.home() / ".rustup"
    if "RUSTUP_HOME" not in environ and rustup.is_dir():
        environ["RUSTUP_HOME"] = str(rustup)
    # A checkout of its own: the suite's other workers write bytecode into
    # this one while the demo runs.
    checkout = copy_of_the_project(tmp_path / "checkout")
    before = _files(checkout)
    demo = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), "demo"],
                          capture_output=True, text=True, env=environ)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "== demo passed" in demo.stdout
    assert {name: sorted(p.name for p in place.iterdir()) for name, place in places.items()} == {
        name: [] for name in places
    }
    assert _files(checkout) == before
