"""What vLLM's config layer does with DFlash drafts, observed in one interpreter.

Run by test_runtime_config.py's `probe` fixture in each venv; the tests assert on parts of
the result. Observations are taken in an order that keeps each one honest:
the registry and the first DFlash2 engine config are observed before anything
is registered by hand. Where the venv has no `DFlash2DraftModel` (pristine
0.27.1), the architecture is then registered as an alias of the DFlash1 class,
which is what a checkpoint would get from a registry edit alone; the later
observations then show what the other edits (runner choice, causality,
speculator selection, draft-logit cache) contribute on their own.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from unittest import mock

from runtime_guest import attempt, describe, emit

DFLASH1_MODULE = "vllm.model_executor.models.qwen3_dflash"
ARCHITECTURES = ("DFlash2DraftModel", "DFlashDraftModel")


def inspect_in_process() -> None:
    """vLLM inspects each architecture in a child interpreter to keep CUDA out
    of the parent; with no GPU that only costs a second vLLM import per
    architecture, so do it here."""
    import vllm.model_executor.models.registry as registry

    registry._run_in_subprocess = lambda fn: fn()


_CONFIGS: dict = {}


def engine_config(models: dict, target: str, draft: str, **speculative):
    """The VllmConfig for a target and draft, built once: several
    observations read the same one, and nothing here changes it."""
    key = (target, draft, tuple(sorted(speculative.items())))
    if key not in _CONFIGS:
        _CONFIGS[key] = _build_engine_config(models, target, draft, **speculative)
    return _CONFIGS[key]


def _build_engine_config(models: dict, target: str, draft: str, **speculative):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=models[target],
        skip_tokenizer_init=True,
        # Small, so that speculator buffers allocate quickly.
        max_num_seqs=8,
        max_model_len=256,
        speculative_config={
            "method": "dflash",
            "model": models[draft],
            "num_speculative_tokens": 3,
            **speculative,
        },
    ).create_engine_config()


def observe_registry() -> dict:
    from vllm.model_executor.models.registry import ModelRegistry

    seen = {}
    for arch in ARCHITECTURES:
        if arch not in ModelRegistry.get_supported_archs():
            seen[arch] = None
            continue
        cls = ModelRegistry._try_load_model_cls(arch)
        seen[arch] = {
            "module": cls.__module__,
            "class": cls.__qualname__,
            "mro": [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__],
        }
    return seen


def observe_resolution(models: dict, drafts: list) -> dict:
    """The model class vLLM builds for each draft, through the public lookup
    the model loader uses."""
    from vllm.model_executor.models.registry import ModelRegistry

    resolved = {}
    for draft in drafts:
        draft_config = engine_config(
            models, "target", draft
        ).speculative_config.draft_model_config
        cls, _ = ModelRegistry.resolve_model_cls(draft_config.architectures, draft_config)
        resolved[draft] = f"{cls.__module__}.{cls.__qualname__}"
    return resolved


def register_dflash2_alias_if_missing() -> bool:
    from vllm.model_executor.models.registry import ModelRegistry

    if "DFlash2DraftModel" in ModelRegistry.get_supported_archs():
        return False
    ModelRegistry.register_model(
        "DFlash2DraftModel", f"{DFLASH1_MODULE}:DFlashQwen3ForCausalLM"
    )
    return True


def observe_runner(models: dict, targets: list, drafts: list) -> dict:
    choices = {}
    for target in targets:
        for draft in drafts:
            outcome = attempt(
                lambda: engine_config(models, target, draft).use_v2_model_runner
            )
            choices[f"{target}/{draft}"] = outcome
    return choices


def observe_causality(models: dict, drafts: list) -> dict:
    from vllm.model_executor.models.qwen3_dflash import _dflash_layer_causal

    answers = {}
    for draft in drafts:
        hf_config = engine_config(
            models, "target", draft
        ).speculative_config.draft_model_config.hf_config
        answers[draft] = [
            _dflash_layer_causal(hf_config, i)
            for i in range(hf_config.num_hidden_layers)
        ]
    return answers


def speculator_classes() -> dict:
    """Every DFlash speculator class this venv has, by name."""
    import importlib

    found = {}
    for module, name in (
        ("vllm.v1.worker.gpu.spec_decode.dflash.speculator", "DFlashSpeculator"),
        ("vllm.v1.worker.gpu.spec_decode.dflash2.speculator", "DFlash2Speculator"),
    ):
        try:
            found[name] = getattr(importlib.import_module(module), name)
        except ImportError:
            pass
    return found


def observe_dispatch(models: dict, drafts: list) -> dict:
    """Which class `init_speculator` constructs, with constructors that only
    record: a speculator needs a loaded model for anything more."""
    import torch

    from vllm.v1.worker.gpu.spec_decode import init_speculator

    def recording_init(self, vllm_config, device):
        self.recorded_args = (vllm_config, device)

    chosen = {}
    for draft in drafts:
        config = engine_config(models, "target", draft)
        with ExitStack() as stack:
            for cls in speculator_classes().values():
                stack.enter_context(mock.patch.object(cls, "__init__", recording_init))
            outcome = attempt(
                lambda: type(init_speculator(config, torch.device("cpu"))).__qualname__
            )
        chosen[draft] = outcome
    return chosen


def observe_draft_logits(models: dict) -> dict:
    """The `draft_logits` buffer each speculator allocates in its constructor."""
    import torch

    from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator

    classes = speculator_classes()
    dflash = classes["DFlashSpeculator"]

    class MinimalDraftModelSpeculator(DraftModelSpeculator):
        """The base allocation, as every speculator that does not override
        the spec gets it (EAGLE, MTP, draft models)."""

        def load_draft_model(self, target_model, target_attn_layer_names):
            raise NotImplementedError

        def init_cudagraph_manager(self, cudagraph_mode):
            pass

        def capture(self):
            pass

        def propose(self, *args, **kwargs):
            raise NotImplementedError

    class NegInfDFlashSpeculator(dflash):
        """A speculator that writes a subset of columns and asks for -inf."""

        def draft_logits_spec(self, vllm_config):
            return torch.float32, float("-inf")

    cases = {
        "base": (MinimalDraftModelSpeculator, "dflash1-full"),
        "dflash1": (dflash, "dflash1-full"),
        "neg-inf-subclass": (NegInfDFlashSpeculator, "dflash1-full"),
    }
    if "DFlash2Speculator" in classes:
        cases["dflash2"] = (classes["DFlash2Speculator"], "dflash2")

    seen = {}
    for name, (cls, draft) in cases.items():
        for method in ("probabilistic", "greedy"):
            def build():
                config = engine_config(
                    models, "target", draft, draft_sample_method=method
                )
                buffer = cls(config, torch.device("cpu")).draft_logits
                if buffer is None:
                    return None
                values = buffer.unique()
                return {
                    "dtype": str(buffer.dtype).removeprefix("torch."),
                    "shape": list(buffer.shape),
                    "values": [str(v) for v in values.tolist()],
                }

            seen[f"{name}/{method}"] = attempt(build)
    return seen


def main(models: dict) -> None:
    inspect_in_process()
    drafts = [name for name in models if name.startswith("dflash")]
    result = {"registry": observe_registry()}
    result["dflash2_config_before_alias"] = attempt(
        lambda: engine_config(models, "moe-target", "dflash2").use_v2_model_runner
    )
    result["registered_alias"] = register_dflash2_alias_if_missing()
    result["runner"] = observe_runner(models, ["moe-target", "target"], drafts)
    result["resolved"] = observe_resolution(models, ["dflash2", "dflash1-full"])
    result["causal"] = observe_causality(models, drafts)
    result["dispatch"] = observe_dispatch(models, ["dflash2", "dflash1-full"])
    result["draft_logits"] = observe_draft_logits(models)
    emit(result)


if __name__ == "__main__":
    import json

    try:
        main(json.loads(sys.argv[1]))
    except Exception as error:
        print(describe(error), file=sys.stderr)
        raise
