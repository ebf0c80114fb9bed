"""The snippet runner itself, with the interpreter that runs pytest: results
come back through the result file, failures carry the snippet's output, and a
failing snippet ends the ones started with it."""

from __future__ import annotations

import signal
import sys

import pytest

from tests.runtime.harness import SnippetError, SnippetRunner

pytestmark = pytest.mark.runtime


@pytest.fixture
def runner(tmp_path):
    runner = SnippetRunner(tmp_path)
    yield runner
    runner.close()


def test_a_snippet_returns_what_it_emits_despite_noise_on_stdout(runner):
    code = """
        import os, sys
        from runtime_guest import attempt, emit
        print("log noise")
        emit({"args": sys.argv[1:], "interpret": os.environ["TRITON_INTERPRET"],
              "devices": os.environ["CUDA_VISIBLE_DEVICES"],
              "failure": attempt(lambda: 1 / 0)["error"]})
    """
    assert runner.run(sys.executable, code, args=["a"]) == {
        "args": ["a"], "interpret": "1", "devices": "",
        "failure": "ZeroDivisionError: division by zero",
    }


def test_a_failing_snippet_reports_its_output(runner):
    with pytest.raises(SnippetError, match=r"(?s)exited 1.*boom"):
        runner.run(sys.executable, "print('boom'); raise SystemExit(1)")


def test_a_failing_snippet_ends_the_ones_started_with_it(runner):
    sleeper = runner.start(sys.executable, "import time; time.sleep(60)")
    failing = runner.start(sys.executable, "raise SystemExit(3)")
    with pytest.raises(SnippetError, match="exited 3"):
        runner.gather([sleeper, failing])
    # Killed, not waited for: a sleeper that finished its minute exits 0.
    assert sleeper.process.returncode == -signal.SIGKILL


def test_a_snippet_past_its_deadline_is_killed(runner):
    with pytest.raises(SnippetError, match="timed out"):
        runner.run(sys.executable, "import time; time.sleep(60)", timeout=1)
