"""Running the module probes in the patched 0.27.1 interpreter.

Each probe file checks many cases in one interpreter (a fresh one costs tens
of seconds on a small machine); a test module asks for its cases once and its
tests read their own case back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# Every file whose first lines say so was written by this project for 0.27.1.
MARKER = "# Backported to vLLM 0.27.1 by dflash2-backport."


@pytest.fixture(scope="session")
def upstream_root() -> Path:
    """Upstream 0.28.0's Python files: the reference the modules are held to."""
    from tests.wheels import vllm_source

    return vllm_source("0.28.0")


@pytest.fixture(scope="session")
def run_probe(snippets, patched_python, upstream_root, tmp_path_factory):
    """run_probe(file, cases, timeout) -> {case id: result} from one interpreter."""

    def run(probe: str, cases, timeout: float = 600) -> dict:
        workdir = tmp_path_factory.mktemp(probe.removesuffix(".py"))
        payload = {
            "upstream": str(upstream_root),
            "workdir": str(workdir),
            "checks": [case.as_json() for case in cases],
        }
        code = (
            "import runpy, sys\n"
            f"sys.argv = [{str(HERE / probe)!r}, sys.argv[1]]\n"
            f"runpy.run_path({str(HERE / probe)!r}, run_name='__main__')\n"
        )
        results = snippets.run(patched_python, code, args=[json.dumps(payload)],
                               timeout=timeout)
        for module, marker in results.pop("_installed").items():
            assert marker == MARKER, (
                f"the patched venv's {module} is not this project's module "
                f"(third line: {marker!r})"
            )
        return results

    return run
