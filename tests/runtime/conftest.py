"""Fixtures for tests that run real vLLM 0.27.1 in interpreters of its venvs.

Venvs (env.py; the first use builds them, about two minutes, later pytest runs
reuse them): `pristine_python` / `patched_python` are the 0.27.1 interpreters,
`pristine_venv` / `patched_venv` their directories, `venvs` both interpreters
by name, parametrized over every supported release (0.27.1, 0.27.0, 0.26.0).

Snippets: `run_snippet(python, code, args=[...], timeout=...)` runs `code` in a
process of its own of that venv's interpreter and returns what the code
passed to `runtime_guest.emit(...)`; `snippets.start(...)` starts one without
waiting (`.result()` waits), `snippets.run_many([(python, code), ...])` runs
several side by side. The process is forked from one that has imported torch
and vllm.config already (harness.py, fork_server.py); `fresh=True` starts a
new interpreter instead. The interpreter sees venv_side/ on its path (runtime_guest:
emit, attempt, use_triton_interpreter, stub_silu_and_mul, distributed), has
CUDA_VISIBLE_DEVICES="" and TRITON_INTERPRET=1, the CPU platform plugin
active (on its path too: the venvs do not hold it), and VLLM_CACHE_ROOT in the
pytest run's temp dir, one per venv, whose model-info cache is that venv
build's, kept across runs (harness.MODELINFOS).

`tiny_models`: config-only model directories (tiny_configs.py).

`edit_set_pythons`: 0.27.1 pristine, patched by `apply --only-pr` and by
`apply`, as the interpreters of testkit venvs over them (pytest and
compressed-tensors added), and the same of 0.26.0 (`edit_set_release` says
which).

`versioned_venvs(version, torch="cpu")`: {"pristine": venv, "patched": venv}
for any vLLM release in env.VLLM_VERSIONS (0.27.1, 0.27.0, 0.26.0), on torch's CPU
build (0.26.0 on the CUDA build, the only one of its torch on PyPI); with
torch="cuda", on its CUDA build (env.CUDA_VLLM_VERSIONS).

Every test under this directory is marked `runtime`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime import env as runtime_env
from tests.runtime.harness import SnippetRunner
from tests.runtime.tiny_configs import write_models


def pytest_collection_modifyitems(config, items):
    # Collection hooks see every collected item, not just this tree's.
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.runtime)


@pytest.fixture(scope="session")
def base_venv() -> Path:
    return runtime_env.base_env()


@pytest.fixture(scope="session")
def pristine_venv(base_venv) -> Path:
    return runtime_env.pristine_env()


@pytest.fixture(scope="session")
def patched_venv(base_venv) -> Path:
    return runtime_env.patched_env()


@pytest.fixture(scope="session")
def versioned_venvs(base_venv):
    built: dict[tuple[str, str], dict[str, Path]] = {}

    def venvs_of(version: str, torch: str = "cpu") -> dict[str, Path]:
        if (version, torch) not in built:
            built[version, torch] = {
                "pristine": runtime_env.pristine_env(version, torch),
                "patched": runtime_env.patched_env(version, torch),
            }
        return built[version, torch]

    return venvs_of


@pytest.fixture(scope="session", params=runtime_env.EDIT_SET_VERSIONS)
def edit_set_release(request) -> str:
    """Each release whose edits take a form of their own (0.27.0's targets
    are 0.27.1's bytes), for the tests of `edit_set_pythons`."""
    return request.param


@pytest.fixture(scope="session")
def edit_set_pythons(base_venv, edit_set_release) -> dict[str, Path]:
    """That release three ways, by name: "pristine", "only-pr" (patched by
    `apply --only-pr`) and "patched" (by `apply`); each the interpreter of
    its testkit venv, which adds pytest and compressed-tensors
    (env.testkit_env)."""
    venvs = {
        "pristine": runtime_env.pristine_env(edit_set_release),
        "only-pr": runtime_env.patched_env(edit_set_release, only_pr=True),
        "patched": runtime_env.patched_env(edit_set_release),
    }
    return {
        name: runtime_env.venv_python(runtime_env.testkit_env(venv))
        for name, venv in venvs.items()
    }


@pytest.fixture(scope="session")
def pristine_python(pristine_venv) -> Path:
    return runtime_env.venv_python(pristine_venv)


@pytest.fixture(scope="session")
def patched_python(patched_venv) -> Path:
    return runtime_env.venv_python(patched_venv)


@pytest.fixture(scope="session", params=runtime_env.VLLM_VERSIONS)
def venvs(request, versioned_venvs) -> dict[str, Path]:
    """Both interpreters by name, for tests that probe each; once per vLLM
    release the tool supports, so every probe shows 0.27.0 as well."""
    return {
        name: runtime_env.venv_python(venv)
        for name, venv in versioned_venvs(request.param).items()
    }


@pytest.fixture(scope="session")
def snippets(tmp_path_factory):
    runner = SnippetRunner(tmp_path_factory.mktemp("runtime"))
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def run_snippet(snippets):
    """run_snippet(python, code, **options) -> the JSON the snippet emitted."""
    return snippets.run


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Config-only model directories (tiny_configs.py): a dense and a MoE
    Qwen3 target, a DFlash2 draft and DFlash1 drafts; name -> directory."""
    return write_models(tmp_path_factory.mktemp("models"))
