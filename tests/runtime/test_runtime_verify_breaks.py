"""Each `verify` check fails on its own when its property breaks.

The patched 0.27.1 venv is broken in one place at a time, by a
`sitecustomize` on the PYTHONPATH verify runs with: once vLLM has imported
the module that holds the property, the hook changes it. Only the check that
claims that property may fail, the five others must pass; otherwise a check
proves nothing of its own, or a break in one place would be blamed on
another.

A last case breaks nothing but puts a second CPU platform plugin on the
path, as a machine with another platform plugin installed has: verify still
chooses its own and passes.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.runtime import env as runtime_env
from tests.runtime.harness import write_cpu_platform_plugin
from tests.runtime.test_runtime_verify import CHECKS, TOOL, check_lines, run_verify

pytestmark = pytest.mark.runtime

# Runs in every interpreter that starts with the directory on its path: the
# tool's own too, which never imports vLLM, so the hook waits for the module.
HOOK = '''
import importlib.abc, importlib.util, sys

MODULE = {module!r}


def break_it(module):
{body}


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            break_it(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterImport())
'''

# check -> (module, body of break_it(module), words the failing line must hold)
BREAKS = {
    # The DFlash2 architecture registered, but to the DFlash1 model.
    "registry": (
        "vllm.model_executor.models.registry",
        "module.ModelRegistry.register_model('DFlash2DraftModel', "
        "'vllm.model_executor.models.qwen3_dflash:DFlashQwen3ForCausalLM')",
        ["DFlash2DraftModel resolves to",
         "vllm.model_executor.models.qwen3_dflash.DFlashQwen3ForCausalLM"],
    ),
    # 0.27.1's fallback: a sliding-window layer is causal, whatever the
    # checkpoint says.
    "causality": (
        "vllm.model_executor.models.qwen3_dflash",
        "original = module._dflash_layer_causal\n"
        "module._dflash_layer_causal = lambda config, i: (\n"
        "    True if getattr(config, 'is_causal', None) is False\n"
        "    else original(config, i))",
        ["DFlash2 draft layers causal per layer", "want all False"],
    ),
    # A DFlash2 draft no longer requires the V2 model runner.
    "v2-runner": (
        "vllm.config.vllm",
        "module.VllmConfig._is_dflash2_draft = lambda self: False",
        ["stays on the V1 model runner"],
    ),
    # A DFlash2 draft gets the DFlash1 speculator.
    "speculator": (
        "vllm.v1.worker.gpu.spec_decode",
        "original = module.init_speculator\n"
        "def init_speculator(vllm_config, device):\n"
        "    built = original(vllm_config, device)\n"
        "    if type(built).__name__ == 'DFlash2Speculator':\n"
        "        from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (\n"
        "            DFlashSpeculator)\n"
        "        return DFlashSpeculator(vllm_config, device)\n"
        "    return built\n"
        "module.init_speculator = init_speculator",
        ["init_speculator gives a dflash2 draft DFlashSpeculator"],
    ),
    # Top-k values that are not the logits' (a scale applied twice, say).
    "top-k": (
        "vllm.model_executor.layers.logits_processor",
        "original = module.LogitsProcessor.get_top_k_tokens\n"
        "def get_top_k_tokens(self, *args, **kwargs):\n"
        "    ids, values = original(self, *args, **kwargs)\n"
        "    return ids, values * 1.01\n"
        "module.LogitsProcessor.get_top_k_tokens = get_top_k_tokens",
        ["get_top_k_tokens values off by"],
    ),
    # The kernels as vLLM's Triton placeholder leaves them: plain functions.
    "kernels": (
        "vllm.v1.worker.gpu.spec_decode.dflash2.speculator",
        "for name, value in list(vars(module).items()):\n"
        "    if type(value).__name__ == 'JITFunction':\n"
        "        setattr(module, name, value.fn)",
        ["the DFlash2 speculator module defines no Triton kernel"],
    ),
}


@pytest.fixture(scope="module")
def patched(versioned_venvs) -> Path:
    return runtime_env.venv_python(versioned_venvs("0.27.1")["patched"])


@pytest.mark.parametrize("broken", list(BREAKS))
def test_a_broken_property_fails_its_check_alone(patched, broken, tmp_path):
    module, body, needles = BREAKS[broken]
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        HOOK.format(module=module, body=textwrap.indent(body, "    "))
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done, wall = run_verify([TOOL, "verify", "--python", patched], scratch,
                            PYTHONPATH=str(hooks))
    print(f"\n$ PYTHONPATH=<{broken} broken> dflash2-backport verify --python <patched>"
          f"  ({wall:.1f} s)\n{done.stdout}{done.stderr}")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = check_lines(done.stdout)
    assert list(lines) == CHECKS
    assert {name for name, (state, _) in lines.items() if state == "FAIL"} == {broken}
    for needle in needles:
        assert needle in lines[broken][1]
    assert done.stdout.splitlines()[-1].startswith(f"failed: 1 of 6 checks ({broken})")


def test_another_platform_plugin_in_the_environment_changes_nothing(patched, tmp_path):
    plugins = write_cpu_platform_plugin(tmp_path / "plugins")
    venv_side = Path(__file__).resolve().parent / "venv_side"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done, _ = run_verify([TOOL, "verify", "--python", patched], scratch,
                         PYTHONPATH=f"{plugins}:{venv_side}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(check_lines(done.stdout)) == set(CHECKS)


def test_a_platform_other_than_the_cpu_one_is_one_line_and_exit_2(patched, tmp_path):
    """If vLLM still settles on another platform (here: every plugin turned
    off once the interpreter starts), verify says so instead of judging."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os\nos.environ['VLLM_PLUGINS'] = 'none'\n"
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done, _ = run_verify([TOOL, "verify", "--python", patched], scratch,
                         PYTHONPATH=str(hooks))
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"dflash2-backport: error: {patched}: vLLM chose ")
    assert "UnspecifiedPlatform, not its CPU platform" in line
