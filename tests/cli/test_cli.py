"""The command line on real 0.27.1 trees: exit codes, output and bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash2_backport.cli.main import app
from dflash2_backport.transforms import EDITS
from tests.vllm_tree.test_interpreter import TOOL, bare_venv
from tests.trees import INSTALLED, make_site, snapshot
from tests.wheels import vllm_source

pytestmark = pytest.mark.wheels

runner = CliRunner()
REGISTRY = "vllm/model_executor/models/registry.py"


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


def test_human_output_is_one_line_per_edit_and_module_then_a_summary(site: Path) -> None:
    result = invoke("check", "--site-packages", str(site))
    lines = result.output.splitlines()
    assert lines[0] == f"vLLM 0.27.1 at {site}"
    # The target, an edit a line (speculator-selection and draft-max-position
    # span two files), the three new files, RECORD and the summary.
    assert len(lines) == 1 + len(EDITS) + 3 + 1 + 1
    assert all(line.split()[0] == "pending" for line in lines[1:-1])
    assert lines[-2].split() == ["pending", "record", "vllm-0.27.1.dist-info/RECORD"]
    assert lines[-1].startswith("pending:")


def test_drift_lines_name_the_edit_file_expectation_and_finding(site: Path) -> None:
    path = site / REGISTRY
    path.write_text(
        path.read_text().replace(
            '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n',
            '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n'
            '    "DFlash2DraftModel": ("elsewhere", "Other"),\n',
        )
    )
    result = invoke("check", "--site-packages", str(site))
    assert result.exit_code == 2
    (line,) = [x for x in result.output.splitlines() if x.lstrip().startswith("drift")]
    assert "registry" in line and REGISTRY in line
    assert "expected" in line and "found" in line and "elsewhere" in line


def test_every_drifted_edit_is_reported_not_only_the_first(site: Path) -> None:
    for relative, old, new in [
        (REGISTRY, '"DFlashDraftModel": (', '"DFlashDraftModelX": ('),
        ("vllm/v1/worker/gpu/sample/gumbel.py", "def gumbel_block_argmax(", "def other("),
    ]:
        path = site / relative
        path.write_text(path.read_text().replace(old, new))
    before = snapshot(site)
    result = invoke("apply", "--site-packages", str(site), "--json")
    document = json.loads(result.output)
    assert result.exit_code == 2
    assert document["action"] == "refused"
    # The draft-noise fix rewrites gumbel_block_argmax too.
    assert {e["edit"] for e in document["edits"] if e["state"] == "drift"} == {
        "registry", "gumbel", "draft-noise-salt",
    }
    assert snapshot(site) == before


def _bad(site: Path, case: str) -> None:
    if case == "no vllm package":
        shutil.rmtree(site / "vllm")
    elif case == "target does not parse":
        (site / REGISTRY).write_text("def broken(:\n")
    elif case == "target missing":
        (site / REGISTRY).unlink()
    elif case == "directory where a module goes":
        (site / INSTALLED[0]).mkdir(parents=True)
    elif case == "file where the dflash2 package goes":
        (site / INSTALLED[1]).parent.parent.mkdir(parents=True, exist_ok=True)
        (site / INSTALLED[1]).parent.write_text("")
    elif case == "not a supported release":
        metadata = next(site.glob("vllm-*.dist-info")) / "METADATA"
        metadata.write_text(metadata.read_text().replace("Version: 0.27.1", "Version: 0.25.1"))
    elif case == "no dist-info":
        shutil.rmtree(next(site.glob("vllm-*.dist-info")))
    elif case == "target not valid UTF-8":
        path = site / REGISTRY
        path.write_bytes(path.read_bytes().replace(b"# SPDX", b"# \xff SPDX", 1))
    elif case == "RECORD not valid UTF-8":
        record = site / "vllm-0.27.1.dist-info/RECORD"
        record.write_bytes(b"caf\xe9.py,,\n" + record.read_bytes())
    elif case == "METADATA not valid UTF-8":
        metadata = site / "vllm-0.27.1.dist-info/METADATA"
        metadata.write_bytes(metadata.read_bytes().replace(b"Name: vllm", b"Name: vllm\xff", 1))
    elif case == "RECORD is a directory":
        record = site / "vllm-0.27.1.dist-info/RECORD"
        record.unlink()
        record.mkdir()
    elif case == "vllm/__init__.py missing":
        (site / "vllm/__init__.py").unlink()
    elif case == "two dist-infos":
        shutil.copytree(site / "vllm-0.27.1.dist-info", site / "vllm-0.28.0.dist-info")


BAD_INPUT = [
    "no vllm package",
    "target does not parse",
    "target missing",
    "directory where a module goes",
    "file where the dflash2 package goes",
    "not a supported release",
    "no dist-info",
    "target not valid UTF-8",
    "RECORD not valid UTF-8",
    "METADATA not valid UTF-8",
    "RECORD is a directory",
    "vllm/__init__.py missing",
    "two dist-infos",
]


@pytest.mark.parametrize("case", BAD_INPUT)
@pytest.mark.parametrize("command", ["check", "apply"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    site: Path, case: str, command: str
) -> None:
    _bad(site, case)
    before = snapshot(site)
    result = invoke(command, "--site-packages", str(site))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    problem = [
        x for x in result.output.splitlines() if "error" in x or x.lstrip().startswith("drift")
    ]
    assert problem, result.output
    assert snapshot(site) == before


@pytest.mark.parametrize("case", BAD_INPUT)
@pytest.mark.parametrize("command", ["check", "apply"])
def test_bad_input_under_json_is_one_valid_object_naming_the_error(
    site: Path, case: str, command: str
) -> None:
    _bad(site, case)
    before = snapshot(site)
    result = subprocess.run(
        [sys.executable, "-m", "dflash2_backport", command, "--site-packages", str(site), "--json"],
        capture_output=True, text=True,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == ""
    document = json.loads(result.stdout)
    assert document["action"] in ("error", "refused")
    assert document.get("error") or any(e["state"] == "drift" for e in document["edits"]) or any(
        m["state"] == "drift" for m in document["modules"]
    )
    assert snapshot(site) == before


@pytest.mark.parametrize(
    "case, expected",
    [
        ("target not valid UTF-8", f"{REGISTRY}: not valid utf-8"),
        ("RECORD not valid UTF-8", "RECORD: not valid UTF-8"),
        ("METADATA not valid UTF-8", "METADATA: not valid UTF-8"),
        ("RECORD is a directory", "RECORD: is a directory"),
        ("vllm/__init__.py missing", "vllm/__init__.py: missing"),
        ("two dist-infos", "vllm-0.27.1.dist-info and vllm-0.28.0.dist-info"),
    ],
)
def test_bad_input_messages_name_the_file_and_the_problem(
    site: Path, case: str, expected: str
) -> None:
    _bad(site, case)
    result = invoke("check", "--site-packages", str(site))
    (line,) = result.output.splitlines()
    assert expected in line, line


@pytest.mark.parametrize("naming", ["--site-packages", "--python"])
@pytest.mark.parametrize("command", ["check", "apply"])
def test_a_fifo_as_vllms_metadata_is_refused_at_once(
    tmp_path: Path, command: str, naming: str
) -> None:
    python, site = bare_venv(tmp_path / "venv")
    make_site("0.27.1", site)
    metadata = site / "vllm-0.27.1.dist-info/METADATA"
    metadata.unlink()
    os.mkfifo(metadata)
    before = snapshot(site)
    # A read of the FIFO blocks: the run and the interpreter it asks are
    # then killed, as a group, after a timeout far beyond a refusal's.
    run = subprocess.Popen(
        [TOOL, command, naming, python if naming == "--python" else site],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, start_new_session=True,
    )
    try:
        stdout, stderr = run.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
        pytest.fail(f"{command} {naming} blocked on the FIFO")
    assert run.returncode == 2, stdout + stderr
    (line,) = stderr.splitlines()
    assert f"{metadata}: is a FIFO" in line, line
    assert snapshot(site) == before


def _named(how: str, tmp_path: Path) -> tuple[list, Path]:
    """Arguments naming a vLLM 0.27.1 in a directory whose path has a space,
    and the directory that holds its vllm/."""
    if how == "--python":
        python, site = bare_venv(tmp_path / "a venv")
        make_site("0.27.1", site)
        return ["--python", python], site
    tree = make_site("0.27.1", tmp_path / "my vllm")
    if how == "--root":
        shutil.rmtree(next(tree.glob("vllm-*.dist-info")))
    return [how, tree], tree


@pytest.mark.parametrize("how", ["--python", "--site-packages", "--root"])
def test_the_hint_after_check_runs_as_printed_on_the_same_vllm(tmp_path: Path, how: str) -> None:
    arguments, holder = _named(how, tmp_path)
    check = subprocess.run([TOOL, "check", *arguments], capture_output=True, text=True)
    assert check.returncode == 1, check.stdout + check.stderr
    hint = check.stdout.splitlines()[-1].split("; run `")[1].rstrip("`")
    assert hint.split()[:2] == ["dflash2-backport", "apply"], hint
    # Pasted into a shell that finds the tool on PATH; the tool's own
    # interpreter has no vLLM, so a hint without the target fails.
    shell = {**os.environ, "PATH": f"{TOOL.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-c", hint], capture_output=True, text=True, env=shell)
    assert done.returncode == 0, hint + "\n" + done.stdout + done.stderr
    assert (holder / INSTALLED[0]).is_file()
    again = subprocess.run([TOOL, "check", *arguments], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_symlink_loop_as_the_path_is_an_error_not_a_crash(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    result = invoke("check", "--site-packages", str(loop))
    assert result.exit_code == 2
    assert "loop" in result.output and "Traceback" not in result.output


def test_an_unreadable_vllm_is_an_error_not_a_crash(site: Path, tmp_path: Path) -> None:
    (site / "vllm").chmod(0)
    try:
        if os.geteuid() == 0:
            # Root reads anything; without these two capabilities it cannot.
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                pytest.skip("running as root without setpriv to drop DAC capabilities")
            result = subprocess.run(
                [setpriv, "--bounding-set=-dac_override,-dac_read_search", sys.executable,
                 "-m", "dflash2_backport", "check", "--site-packages", str(site)],
                capture_output=True, text=True,
            )
            code, output = result.returncode, result.stdout + result.stderr
        else:
            outcome = invoke("check", "--site-packages", str(site))
            code, output = outcome.exit_code, outcome.output
    finally:
        (site / "vllm").chmod(0o755)
    assert code == 2, output
    assert "Permission denied" in output and "Traceback" not in output
    assert output.count("\n") == 1


def test_diff_reads_a_file_in_the_encoding_its_coding_line_declares(site: Path) -> None:
    path = site / REGISTRY
    text = path.read_text()
    path.write_bytes(
        ("# -*- coding: latin-1 -*-\n# Gr\u00fc\u00dfe\n" + text).encode("latin-1")
    )
    result = invoke("check", "--site-packages", str(site), "--diff")
    assert result.exit_code == 1, result.output
    assert f"+++ b/{REGISTRY}" in result.output
    assert '+    "DFlash2DraftModel": ("qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),' in result.output


@pytest.mark.parametrize("case", ["not a supported release", "no dist-info"])
def test_force_patches_an_unknown_version_on_structure_alone(site: Path, case: str) -> None:
    _bad(site, case)
    assert invoke("apply", "--site-packages", str(site)).exit_code == 2
    result = invoke("apply", "--site-packages", str(site), "--force")
    assert result.exit_code == 0, result.output
    assert invoke("check", "--site-packages", str(site), "--force").exit_code == 0


def test_root_mode_patches_a_source_tree_without_dist_info(tmp_path: Path) -> None:
    tree = make_site("0.27.1", tmp_path / "fork")
    shutil.rmtree(next(tree.glob("vllm-*.dist-info")))
    assert invoke("check", "--root", str(tree)).exit_code == 1
    assert invoke("apply", "--root", str(tree)).exit_code == 0
    assert invoke("check", "--root", str(tree)).exit_code == 0


VERSION_FILES = {
    # vcs-versioning, as in the 0.27.1 wheel: annotations, then the values.
    "the wheel's own": ("0.27.1 wheel", "0.27.1"),
    "setuptools-scm on a fork": (
        "version = '0.27.1.dev12+g1a2b3c4'\n__version__ = version\n", "0.27.1.dev12+g1a2b3c4"
    ),
    "annotated, double quotes": ('__version__: str = "0.27.0"\n', "0.27.0"),
    "computed, not stated": ("__version__ = get_version()\n", None),
    "none": (None, None),
}


@pytest.mark.parametrize(("text", "version"), VERSION_FILES.values(), ids=VERSION_FILES.keys())
def test_root_reports_the_version_that_vllm_version_py_states(
    tmp_path: Path, text: str | None, version: str | None
) -> None:
    tree = make_site("0.27.1", tmp_path / "fork")
    shutil.rmtree(next(tree.glob("vllm-*.dist-info")))
    if text == "0.27.1 wheel":
        shutil.copy(vllm_source("0.27.1") / "vllm/_version.py", tree / "vllm/_version.py")
    elif text is not None:
        (tree / "vllm/_version.py").write_text(text)
    result = invoke("check", "--root", str(tree), "--json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.output)["vllm_version"] == version
    first = invoke("check", "--root", str(tree)).output.splitlines()[0]
    assert first == f"vLLM {version or '(version unknown)'} at {tree}"


def test_site_packages_and_root_together_are_refused(site: Path) -> None:
    result = invoke("check", "--site-packages", str(site), "--root", str(site))
    assert result.exit_code == 2
    assert "not both" in result.output


def test_read_only_target_is_refused_before_anything_is_written(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests may run as root, for whom permission bits do not bind.
    real_access = os.access
    read_only = str(site / "vllm/config/vllm.py")
    monkeypatch.setattr(
        os, "access", lambda p, m, **k: False if str(p) == read_only else real_access(p, m, **k)
    )
    before = snapshot(site)
    result = invoke("apply", "--site-packages", str(site))
    assert result.exit_code == 2
    assert "read-only" in result.output and "vllm/config/vllm.py" in result.output
    assert snapshot(site) == before


@pytest.mark.parametrize("failing", ["write", "replace"])
def test_a_write_failing_part_way_restores_every_file(
    site: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A full disk while staging, or a rename failing half-way through the
    commit: either way every file is as it was, and no staged file is left."""
    from dflash2_backport.transaction import commit

    real = getattr(os, failing)
    calls = []

    def fail_on_the_fourth(*args, **kwargs):
        destination = str(args[1]) if failing == "replace" else ""
        if kwargs.get("dst_dir_fd") is not None:
            # The commit renames within a directory it holds open.
            destination = os.path.join(os.readlink(f"/proc/self/fd/{kwargs['dst_dir_fd']}"),
                                       destination)
        if failing == "replace" and not destination.startswith(str(site)):
            return real(*args, **kwargs)  # the verdict cache, not the tree
        calls.append(args)
        if len(calls) == 4:
            raise OSError(28, "No space left on device", str(args[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(commit.os, failing, fail_on_the_fourth)
    before = snapshot(site)
    result = invoke("apply", "--site-packages", str(site))
    assert result.exit_code == 2
    assert "No space left on device" in result.output
    assert snapshot(site) == before
    assert not (site / INSTALLED[1]).parent.exists()
    assert not list(site.rglob(".*dflash2-backport*"))


def test_permissions_and_crlf_line_endings_are_kept(site: Path) -> None:
    path = site / REGISTRY
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    path.chmod(0o640)
    assert invoke("apply", "--site-packages", str(site)).exit_code == 0
    data = path.read_bytes()
    assert b"DFlash2DraftModel" in data
    assert data.count(b"\n") == data.count(b"\r\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_cached_check_answers_without_the_parser_and_notices_changes(site: Path) -> None:
    script = Path(sys.executable).with_name("dflash2-backport")
    env = dict(os.environ)
    # Counts the files Python's parser reads for the judges.
    probe = (
        "import sys, runpy; sys.argv = ['dflash2-backport', 'check', '--site-packages', sys.argv[1]];\n"
        "from dflash2_backport.transforms.framework import source; parses = []; read = source.Source.__init__\n"
        "source.Source.__init__ = lambda self, text: parses.append(1) or read(self, text)\n"
        "try:\n    runpy.run_module('dflash2_backport', run_name='__main__')\n"
        "except SystemExit as e:\n    print('exit', e.code, 'libcst' in sys.modules, bool(parses))\n"
    )
    def run() -> str:
        return subprocess.run(
            [sys.executable, "-c", probe, str(site)], capture_output=True, text=True, env=env
        ).stdout.splitlines()[-1]

    assert run() == "exit 1 False True"  # first look parses, with Python's parser
    assert run() == "exit 1 False False"  # same files: answered from the cache
    path = site / REGISTRY
    path.write_text(path.read_text().replace('"DFlashDraftModel": (', '"DFlashDraftModelX": ('))
    assert run() == "exit 2 False True"  # a changed file is judged again, drift too
    assert script.exists()


@pytest.mark.parametrize(
    "variable", ["DFLASH2_BACKPORT_VERDICT_CACHE", "DFLASH2_BACKPORT_CACHE_DIR"],
    ids=["its name", "its earlier name"],
)
def test_the_verdict_cache_goes_where_its_variable_says(
    site: Path, tmp_path: Path, variable: str
) -> None:
    environ = {
        k: v for k, v in os.environ.items()
        if k not in ("DFLASH2_BACKPORT_VERDICT_CACHE", "DFLASH2_BACKPORT_CACHE_DIR")
    }
    environ.update({variable: str(tmp_path / "verdicts"), "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    result = subprocess.run([TOOL, "check", "--site-packages", site], capture_output=True,
                            text=True, env=environ)
    assert result.returncode == 1, result.stdout + result.stderr
    assert list((tmp_path / "verdicts").rglob("*.json"))
    assert not (tmp_path / "xdg").exists()


def test_installed_console_script_runs_as_a_user_would(site: Path) -> None:
    script = Path(sys.executable).with_name("dflash2-backport")
    check = subprocess.run([script, "check", "--site-packages", site], capture_output=True, text=True)
    assert check.returncode == 1, check.stderr
    apply = subprocess.run([script, "apply", "--site-packages", site], capture_output=True, text=True)
    assert apply.returncode == 0, apply.stderr
    again = subprocess.run([script, "check", "--site-packages", site, "--json"], capture_output=True, text=True)
    assert again.returncode == 0
    assert json.loads(again.stdout)["action"] == "nothing-to-do"


def test_console_script_prints_no_traceback_for_a_missing_target(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("dflash2-backport")
    result = subprocess.run(
        [script, "check", "--site-packages", tmp_path / "nowhere"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def _on_a_terminal(args: list, environment: dict) -> str:
    """What the tool prints when its stdout is a terminal."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "dflash2_backport", *map(str, args)],
        stdout=follower, stderr=subprocess.DEVNULL, env=environment,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode()


@pytest.mark.parametrize("no_color, coloured", [("", True), ("1", False)])
def test_state_words_are_coloured_on_a_terminal_unless_no_color(
    site: Path, no_color: str, coloured: bool
) -> None:
    environment = {**os.environ, "NO_COLOR": no_color, "TERM": "xterm"}
    shown = _on_a_terminal(["check", "--site-packages", site], environment)
    assert "vllm/model_executor/models/registry.py" in shown
    assert ("\033[33mpending\033[0m" in shown) is coloured
    assert ("\033[" in shown) is coloured
    piped = subprocess.run(
        [sys.executable, "-m", "dflash2_backport", "check", "--site-packages", str(site)],
        capture_output=True, text=True, env=environment,
    )
    assert "\033[" not in piped.stdout


@pytest.mark.parametrize("flag", ["--diff", "--diff-modules"])
def test_the_diff_holds_each_new_file_whole_as_git_writes_a_new_file(
    site: Path, flag: str
) -> None:
    result = invoke("check", "--site-packages", str(site), flag)
    assert result.exit_code == 1
    for relative in INSTALLED:
        header = (f"diff --git a/{relative} b/{relative}\nnew file mode 100644\n"
                  f"--- /dev/null\n+++ b/{relative}\n")
        assert header in result.output, relative
    assert "+++ b/vllm/model_executor/models/registry.py" in result.output
