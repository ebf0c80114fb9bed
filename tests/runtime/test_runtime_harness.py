"""The snippet runner itself: results come back through the result file,
failures carry the snippet's output, and a failing snippet ends the ones
started with it; each both for a snippet forked from a venv's fork server
and for one in a fresh interpreter (pytest's own, which cannot import torch,
so its server fails and the runner starts the snippet fresh). A forked
snippet starts as a fresh interpreter would and shares nothing with the
snippets forked before it. Each venv build keeps its own model-info cache
across runs."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from tests.runtime.harness import MODELINFOS, SnippetError, SnippetRunner

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def forking(tmp_path_factory):
    runner = SnippetRunner(tmp_path_factory.mktemp("forking"))
    yield runner
    runner.close()


@pytest.fixture(params=["forked", "fresh"])
def runner_and_python(request, tmp_path, forking, pristine_python):
    """(runner, interpreter): the pristine venv through a module-wide runner,
    so that its server is started once, or pytest's own interpreter."""
    if request.param == "forked":
        yield forking, pristine_python
        return
    runner = SnippetRunner(tmp_path)
    yield runner, sys.executable
    runner.close()


def test_a_snippet_returns_what_it_emits_despite_noise_on_stdout(runner_and_python):
    runner, python = runner_and_python
    code = """
        import os, sys
        from runtime_guest import attempt, emit
        print("log noise")
        emit({"args": sys.argv[1:], "interpret": os.environ["TRITON_INTERPRET"],
              "devices": os.environ["CUDA_VISIBLE_DEVICES"],
              "failure": attempt(lambda: 1 / 0)["error"]})
    """
    assert runner.run(python, code, args=["a"]) == {
        "args": ["a"], "interpret": "1", "devices": "",
        "failure": "ZeroDivisionError: division by zero",
    }


def test_a_failing_snippet_reports_its_output(runner_and_python):
    runner, python = runner_and_python
    with pytest.raises(SnippetError, match=r"(?s)exited 1.*boom"):
        runner.run(python, "print('boom'); raise SystemExit(1)")
    with pytest.raises(SnippetError, match=r"(?s)exited 1.*Traceback.*ValueError: bad"):
        runner.run(python, "raise ValueError('bad')")


def test_a_failing_snippet_ends_the_ones_started_with_it(runner_and_python):
    runner, python = runner_and_python
    sleeper = runner.start(python, "import time; time.sleep(60)")
    failing = runner.start(python, "raise SystemExit(3)")
    with pytest.raises(SnippetError, match="exited 3"):
        runner.gather([sleeper, failing])
    # Killed, not waited for: a sleeper that finished its minute exits 0.
    assert sleeper.process.returncode == -signal.SIGKILL


def test_a_snippet_past_its_deadline_is_killed(runner_and_python):
    runner, python = runner_and_python
    with pytest.raises(SnippetError, match="timed out"):
        runner.run(python, "import time; time.sleep(60)", timeout=1)


def test_a_snippet_exits_as_an_interpreter_does(runner_and_python):
    # Non-daemon threads are waited for and atexit handlers run, in order.
    runner, python = runner_and_python
    code = """
        import atexit, threading, time
        from runtime_guest import emit
        seen = []
        atexit.register(lambda: emit(seen + ["atexit"]))
        threading.Thread(target=lambda: (time.sleep(0.5), seen.append("thread"))).start()
    """
    assert runner.run(python, code) == ["thread", "atexit"]


STARTING_STATE = """
    import os, sys
    from runtime_guest import emit
    stdin = sys.stdin.read()
    emit({
        "name": __name__, "file": __file__, "argv": sys.argv,
        "path": [p.replace(os.path.dirname(__file__), "<scratch>") for p in sys.path],
        "cwd": os.getcwd() == os.path.dirname(__file__),
        "result_file": os.environ["RUNTIME_RESULT"].startswith(os.path.dirname(__file__)),
        "environment": sorted(os.environ), "stdin": stdin,
    })
"""


def test_a_forked_snippet_starts_as_a_fresh_interpreter_would(forking, pristine_python):
    forked = forking.run(pristine_python, STARTING_STATE, args=["x"])
    fresh = forking.run(pristine_python, STARTING_STATE, args=["x"], fresh=True)
    assert forked["name"] == "__main__"
    assert forked["argv"] == [forked["file"], "x"]
    assert forked["path"][0] == "<scratch>"
    assert forked["cwd"] and forked["result_file"] and forked["stdin"] == ""
    for what in ("path", "environment", "cwd", "result_file", "stdin", "name"):
        assert forked[what] == fresh[what], what


LEAVE_A_MARK = """
    import json, os, sys
    import numpy, torch, vllm
    from runtime_guest import emit
    emit({
        "before": [os.environ.get("LEFT_BY_SNIPPET"), getattr(vllm, "left_by_snippet", None),
                   "left_by_snippet" in sys.modules],
        "pid": os.getpid(), "torch": torch.rand(4).tolist(), "numpy": numpy.random.rand(4).tolist(),
    })
    os.environ["LEFT_BY_SNIPPET"] = "1"
    vllm.left_by_snippet = True
    sys.modules["left_by_snippet"] = vllm
"""


def test_forked_snippets_share_no_state_and_no_random_seeds(forking, pristine_python):
    first, second = (forking.run(pristine_python, LEAVE_A_MARK) for _ in range(2))
    assert first["before"] == second["before"] == [None, None, False]
    assert first["pid"] != second["pid"]
    # Each process seeds its default generators, as a fresh interpreter does.
    assert first["torch"] != second["torch"]
    assert first["numpy"] != second["numpy"]


def test_a_snippet_asking_for_a_fresh_interpreter_finds_nothing_imported(
        forking, pristine_python):
    code = "import sys; from runtime_guest import emit; emit('vllm.config' in sys.modules)"
    assert forking.run(pristine_python, code, fresh=True) is False
    assert forking.run(pristine_python, code) is True


def test_the_fork_server_is_started_once_per_venv(forking, pristine_python):
    code = "import os; from runtime_guest import emit; emit(os.getppid())"
    parents = {json.dumps(forking.run(pristine_python, code)) for _ in range(3)}
    assert len(parents) == 1


def test_each_venv_build_keeps_its_own_model_info_cache(forking, pristine_python,
                                                        patched_python):
    code = "import os; from runtime_guest import emit; emit(os.environ['VLLM_CACHE_ROOT'])"
    roots = {}
    for python in (pristine_python, patched_python):
        roots[python] = Path(forking.run(python, code))
        build = python.parent.parent.resolve().name
        assert (roots[python] / "modelinfos").resolve() == (MODELINFOS / build).resolve()
    assert len(set(roots.values())) == 2
    # An interpreter of no venv the tests build shares nothing across runs.
    assert forking.cache_root_for(Path(sys.executable)) == forking.cache_root
