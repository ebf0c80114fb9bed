"""Every test writes only under pytest's temp dirs and the project's cache.

The tools the tests start (pip, uv, pre-commit and the virtualenv it uses,
git hooks, vLLM, torch) default to the home directory's caches and the system
temp dir; here their locations point into this run's temp dir, and what is
large is removed when the run ends.

`make test` runs the suite on several worker processes (pytest-xdist), a
test file's tests all on one worker, so that a module-scoped fixture (a probe
of the runtime venvs, a patched reference tree) is built once, as in a run
without workers.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# Variable -> directory under this run's base temp dir.
SANDBOXED = {
    "TMPDIR": "tmp",
    "XDG_CACHE_HOME": "xdg-cache",
    "PRE_COMMIT_HOME": "pre-commit",
    "VIRTUALENV_OVERRIDE_APP_DATA": "virtualenv",
    "UV_CACHE_DIR": "uv-cache",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
}


def pytest_configure(config):
    # Here, not in pyproject.toml: the runtime venvs are keyed on that file.
    config.addinivalue_line(
        "markers",
        "faults: kills, signals and concurrent runs of real subprocesses at every write"
        " (make test-quick leaves them out)",
    )
    config.addinivalue_line(
        "markers",
        "installs: builds venvs and installs into them with pip, uv or pre-commit, as users"
        " do (make test-quick leaves them out)",
    )
    config.addinivalue_line(
        "markers",
        "variants: every reformatted, commented, reordered or changed 0.27.1 tree, judged,"
        " applied and rewritten whole (make test-quick leaves them out)",
    )


@pytest.fixture(scope="session", autouse=True)
def _sandbox(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.getbasetemp()
    previous = {name: os.environ.get(name) for name in SANDBOXED}
    for name, directory in SANDBOXED.items():
        (base / directory).mkdir(exist_ok=True)
        os.environ[name] = str(base / directory)
    tempfile.tempdir = None  # read TMPDIR again
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    tempfile.tempdir = None
    for directory in SANDBOXED.values():
        shutil.rmtree(base / directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def _private_verdict_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the user's verdict cache."""
    monkeypatch.delenv("DFLASH2_BACKPORT_CACHE_DIR", raising=False)
    monkeypatch.setenv(
        "DFLASH2_BACKPORT_VERDICT_CACHE", str(tmp_path_factory.mktemp("verdicts"))
    )
