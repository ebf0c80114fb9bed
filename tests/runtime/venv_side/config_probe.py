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

from runtime_guest import attempt, describe, emit, probes

# The observations `dflash2-backport verify` makes, shared with it.
DFLASH1_MODULE = probes.DFLASH1_MODULE
engine_config = probes.engine_config
inspect_in_process = probes.inspect_in_process
observe_registry = probes.observe_registry
observe_resolution = probes.observe_resolution
observe_runner = probes.observe_runner
observe_causality = probes.observe_causality
observe_dispatch = probes.observe_dispatch
speculator_classes = probes.speculator_classes


def register_dflash2_alias_if_missing() -> bool:
    from vllm.model_executor.models.registry import ModelRegistry

    if "DFlash2DraftModel" in ModelRegistry.get_supported_archs():
        return False
    ModelRegistry.register_model(
        "DFlash2DraftModel", f"{DFLASH1_MODULE}:DFlashQwen3ForCausalLM"
    )
    return True


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
