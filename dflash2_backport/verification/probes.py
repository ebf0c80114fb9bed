"""Runtime checks of DFlash2 in a vLLM, run inside the interpreter that has it.

`dflash2-backport verify` runs this file, by path, in a fresh process of the
target interpreter, which need not have dflash2-backport installed: so it
imports nothing of this package, only the standard library, vLLM and torch.
The runtime tests load the same functions into their venvs, so what `verify`
checks is what the test suite proves on real vLLM.

Everything runs on the CPU with config-only models: no weights, no network,
no GPU. vLLM's CPU platform is chosen whatever the machine has (verify.py
provides the platform plugin that chooses it), so the answers are the same
on a build host and on a GPU server.

    python probes.py RESULT_JSON      # writes {"vllm": ..., "checks": [...]}
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

DFLASH1_MODULE = "vllm.model_executor.models.qwen3_dflash"
DFLASH2_MODULE = "vllm.model_executor.models.qwen3_dflash2"
DFLASH1_CLASS = "DFlashQwen3ForCausalLM"
DFLASH2_CLASS = "DFlash2Qwen3ForCausalLM"
ARCHITECTURES = ("DFlash2DraftModel", "DFlashDraftModel")
SPECULATOR_MODULES = {
    "DFlashSpeculator": "vllm.v1.worker.gpu.spec_decode.dflash.speculator",
    "DFlash2Speculator": "vllm.v1.worker.gpu.spec_decode.dflash2.speculator",
}

# -- tiny models: config.json only ------------------------------------------
#
# Sizes are the smallest that vLLM's config validation accepts.

VOCAB_SIZE = 1000
HIDDEN_SIZE = 64

TARGET = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": HIDDEN_SIZE,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# A mixture-of-experts target: vLLM 0.27.1 runs dense targets on its V2 model
# runner by default but MoE ones on V1, so only behind this target does the
# runner choice show what a draft forces.
MOE_TARGET = {
    **TARGET,
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
}

_DRAFT_COMMON = {
    "model_type": "qwen3",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": HIDDEN_SIZE,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "sliding_window": 256,
    "block_size": 4,
}

# A DFlash2 checkpoint as upstream describes it: causality stated at the top
# level, and every layer sliding-window, which 0.27.1's fallback would call
# causal.
DFLASH2_DRAFT = {
    **_DRAFT_COMMON,
    "architectures": ["DFlash2DraftModel"],
    "is_causal": False,
    "layer_types": ["sliding_attention"] * 3,
    "dflash_config": {
        "mask_token_id": 999,
        "target_layer_ids": [0, 2],
        "conv_kernel_size": 3,
        "conv_group_size": 16,
        "selector_rank": 8,
        "selector_top_k": 4,
    },
}

# DFlash1 drafts covering each rule of 0.27.1's `_dflash_layer_causal`, which
# the patched resolver must still answer the same way.
DFLASH1_DRAFTS = {
    "dflash1-full": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["full_attention"] * 3,
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2]},
    },
    "dflash1-mixed": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2]},
    },
    "dflash1-causal-override": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["full_attention"] * 3,
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2],
                          "causal": True},
    },
    "dflash1-noncausal-override": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "layer_types": ["sliding_attention"] * 3,
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2],
                          "causal": False},
    },
    "dflash1-no-layer-types": {
        **_DRAFT_COMMON,
        "architectures": ["DFlashDraftModel"],
        "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 2]},
    },
}

# 0.27.1's `_dflash_layer_causal` answers, per layer, for each DFlash1 draft:
# read from its source, not from a run of it.
DFLASH1_CAUSAL = {
    "dflash1-full": [False, False, False],
    "dflash1-mixed": [True, False, True],
    "dflash1-causal-override": [True, True, True],
    "dflash1-noncausal-override": [False, False, False],
    "dflash1-no-layer-types": [False, False, False],
}


def model_configs() -> dict:
    return {"target": TARGET, "moe-target": MOE_TARGET, "dflash2": DFLASH2_DRAFT,
            **DFLASH1_DRAFTS}


def write_models(root: Path) -> dict:
    """Write every tiny model directory under `root`; name -> directory."""
    paths = {}
    for name, config in model_configs().items():
        directory = Path(root) / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(copy.deepcopy(config), indent=2))
        paths[name] = directory
    return paths


# -- set-up in the probing interpreter ----------------------------------------


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def attempt(fn) -> dict:
    """{"ok": True, "value": ...} or {"ok": False, "error": "Type: message"}:
    a failure on an unpatched vLLM is an observation, not a crash."""
    try:
        return {"ok": True, "value": fn()}
    except Exception as error:  # noqa: BLE001 -- the failure is the observation
        return {
            "ok": False,
            "error": describe(error),
            "traceback": traceback.format_exc(limit=-4),
        }


def platform_problem() -> str | None:
    """Why vLLM's platform is not its CPU platform, or None.

    On any other the answers would depend on the machine: no platform at all
    without a GPU (not even an empty VllmConfig builds), the card's with one.
    """
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return None
    name = f"{type(current_platform).__module__}.{type(current_platform).__qualname__}"
    return (
        f"vLLM chose {name}, not its CPU platform, despite the platform plugin "
        "verify provides (see that nothing replaces vllm.platforms)"
    )


def inspect_in_process() -> None:
    """vLLM inspects each architecture in a child interpreter to keep CUDA out
    of the parent; on the CPU that only costs a second vLLM import per
    architecture, so do it here."""
    import vllm.model_executor.models.registry as registry

    registry._run_in_subprocess = lambda fn: fn()


@contextmanager
def distributed(vllm_config, world_size: int = 1, rank: int = 0,
                init_file: str | None = None):
    """vLLM's model-parallel groups over gloo, as vLLM's own CPU tests set them up.

    For world_size > 1 every rank runs this with the same `init_file`.
    """
    from vllm.config import set_current_vllm_config
    from vllm.distributed import (
        cleanup_dist_env_and_memory,
        ensure_model_parallel_initialized,
        init_distributed_environment,
    )

    scratch = None
    if init_file is None:
        scratch = tempfile.mkdtemp(prefix="vllm-dist-")
        init_file = os.path.join(scratch, "rendezvous")
    try:
        with set_current_vllm_config(vllm_config):
            init_distributed_environment(
                world_size, rank, f"file://{init_file}", rank, "gloo"
            )
            ensure_model_parallel_initialized(world_size, 1)
            try:
                yield
            finally:
                cleanup_dist_env_and_memory()
    finally:
        if scratch is not None:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)


# -- observations ---------------------------------------------------------------

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
        model=str(models[target]),
        skip_tokenizer_init=True,
        # Small, so that speculator buffers allocate quickly.
        max_num_seqs=8,
        max_model_len=256,
        speculative_config={
            "method": "dflash",
            "model": str(models[draft]),
            "num_speculative_tokens": 3,
            **speculative,
        },
    ).create_engine_config()


def observe_registry() -> dict:
    """Each DFlash architecture's class, module, MRO and source file."""
    from vllm.model_executor.models.registry import ModelRegistry

    seen = {}
    for arch in ARCHITECTURES:
        if arch not in ModelRegistry.get_supported_archs():
            seen[arch] = None
            continue
        cls = ModelRegistry._try_load_model_cls(arch)
        if cls is None:
            raise RuntimeError(_why_not_loaded(ModelRegistry, arch))
        seen[arch] = {
            "module": cls.__module__,
            "class": cls.__qualname__,
            "mro": [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__],
            "file": getattr(sys.modules.get(cls.__module__), "__file__", None),
        }
    return seen


def _why_not_loaded(registry, arch: str) -> str:
    """vLLM's registry logs why an architecture's class did not load and
    returns None; the load, made again, says which module failed and how."""
    entry = getattr(registry, "models", {}).get(arch)
    where = ".".join(
        filter(None, (getattr(entry, "module_name", None), getattr(entry, "class_name", None)))
    ) or "its class"
    load = getattr(entry, "load_model_cls", None)
    try:
        if load is not None:
            load()
    except Exception as error:  # noqa: BLE001 -- the failure is the observation
        return f"{arch} is registered, but loading {where} failed: {describe(error)}"
    return f"{arch} is registered, but vLLM could not load {where}"


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


def observe_runner(models: dict, targets: list, drafts: list) -> dict:
    """Whether each target and draft pair runs on the V2 model runner."""
    choices = {}
    for target in targets:
        for draft in drafts:
            choices[f"{target}/{draft}"] = attempt(
                lambda: engine_config(models, target, draft).use_v2_model_runner
            )
    return choices


def observe_causality(models: dict, drafts: list) -> dict:
    """`_dflash_layer_causal` per layer of each draft."""
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
    """Every DFlash speculator class this vLLM has, by name."""
    import importlib

    found = {}
    for name, module in SPECULATOR_MODULES.items():
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
        with ExitStack() as stack:
            for cls in speculator_classes().values():
                stack.enter_context(mock.patch.object(cls, "__init__", recording_init))
            chosen[draft] = attempt(
                lambda: type(init_speculator(
                    engine_config(models, "target", draft), torch.device("cpu")
                )).__qualname__
            )
    return chosen


# The top-k case: a vocabulary that is not a multiple of the head's 64-row
# padding, so the padded rows must be masked out.
TOP_K_VOCAB = 1000
TOP_K_HIDDEN = 32
TOP_K_TOKENS = 16
TOP_K = 6


def top_k_weight(torch):
    generator = torch.Generator().manual_seed(1234)
    return torch.randn(TOP_K_VOCAB, TOP_K_HIDDEN, generator=generator)


def top_k_hidden_states(torch):
    generator = torch.Generator().manual_seed(99)
    return torch.randn(TOP_K_TOKENS, TOP_K_HIDDEN, generator=generator)


def build_lm_head(torch):
    """A ParallelLMHead holding this rank's shard of `top_k_weight`, with
    padding rows that would win every token's top-k unless masked."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    head = ParallelLMHead(TOP_K_VOCAB, TOP_K_HIDDEN, params_dtype=torch.float32)
    with torch.no_grad():
        head.weight.fill_(0.0)
        head.weight_loader(head.weight, top_k_weight(torch))
        num_pad = head.shard_indices.num_org_vocab_padding
        if num_pad:
            rows = top_k_hidden_states(torch).repeat(num_pad // TOP_K_TOKENS + 1, 1)
            head.weight[-num_pad:] = 10.0 * rows[:num_pad]
    # The CPU platform's linear method sets itself up here.
    head.quant_method.process_weights_after_loading(head)
    return head


def observe_top_k() -> dict:
    """`get_top_k_tokens` at tensor-parallel size 1 against torch.topk over
    the full logits."""
    import torch

    from vllm.config import VllmConfig
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    with distributed(VllmConfig()):
        head = build_lm_head(torch)
        ids, values = LogitsProcessor(TOP_K_VOCAB).get_top_k_tokens(
            head, top_k_hidden_states(torch), TOP_K
        )
    full = top_k_hidden_states(torch) @ top_k_weight(torch).T
    want_values, want_ids = torch.topk(full, TOP_K)
    return {
        "ids_equal": bool(torch.equal(ids.to(torch.int64), want_ids)),
        "value_error": float((values.float() - want_values).abs().max()),
        "padding_rows": int(head.shard_indices.num_org_vocab_padding),
    }


def observe_kernels() -> dict:
    """The Triton kernels DFlash2 needs, imported (not launched: that needs a
    GPU or Triton's interpreter): name -> attempt()."""
    import importlib

    def gumbel():
        from vllm.v1.worker.gpu.sample.gumbel import gumbel_noised_argmax

        return type(gumbel_noised_argmax).__name__

    def kernels(module):
        loaded = importlib.import_module(module)
        return sorted(
            name for name, value in vars(loaded).items()
            if type(value).__name__ in ("JITFunction", "Autotuner", "Heuristics")
        )

    found = {"gumbel_noised_argmax": attempt(gumbel)}
    for module in (DFLASH2_MODULE, SPECULATOR_MODULES["DFlash2Speculator"]):
        found[module] = attempt(lambda: kernels(module))
    return found


# -- verify: the observations judged ---------------------------------------------

TOLERANCE = 1e-5


def _error(outcome: dict) -> str:
    """One line of an observed failure; pydantic puts the reason on a later
    line and appends every supported architecture to it."""
    lines = outcome["error"].splitlines()
    reason = next(
        (line.split("Value error, ", 1)[1] for line in lines if "Value error, " in line),
        lines[0] if lines else "",
    )
    for cut in (". Supported architectures", " [type=", " (/"):
        reason = reason.split(cut, 1)[0]
    return reason if len(reason) <= 200 else reason[:197] + "..."


def check_registry(seen: dict) -> str | None:
    dflash2 = seen.get("DFlash2DraftModel")
    if dflash2 is None:
        return "DFlash2DraftModel is not registered in vLLM's model registry"
    if (dflash2["module"], dflash2["class"]) != (DFLASH2_MODULE, DFLASH2_CLASS):
        return f"DFlash2DraftModel resolves to {dflash2['module']}.{dflash2['class']}"
    if f"{DFLASH1_MODULE}.{DFLASH1_CLASS}" not in dflash2["mro"]:
        return f"{DFLASH2_CLASS} does not build on the DFlash1 model"
    dflash1 = seen.get("DFlashDraftModel")
    if dflash1 is None or (dflash1["module"], dflash1["class"]) != (
        DFLASH1_MODULE, DFLASH1_CLASS
    ):
        return f"DFlashDraftModel resolves to {dflash1}"
    return None


def verify(models: dict) -> list:
    """[(check, passed, detail)], one per property `verify` promises."""
    import vllm

    checks = []

    def run(name: str, observe, judge, passed_detail) -> None:
        outcome = attempt(observe)
        if not outcome["ok"]:
            checks.append((name, False, _error(outcome)))
            return
        problem = judge(outcome["value"])
        checks.append((name, problem is None, problem or passed_detail(outcome["value"])))

    vllm_root = os.path.dirname(os.path.abspath(vllm.__file__))

    def registry_problem(seen):
        problem = check_registry(seen)
        if problem is None:
            where = seen["DFlash2DraftModel"]["file"] or ""
            if not os.path.abspath(where).startswith(vllm_root + os.sep):
                problem = f"DFlash2DraftModel's module is not this vLLM's: {where}"
        return problem

    run(
        "registry",
        observe_registry,
        registry_problem,
        lambda seen: f"DFlash2DraftModel -> {DFLASH2_MODULE}.{DFLASH2_CLASS}; "
        f"DFlashDraftModel -> {DFLASH1_MODULE}.{DFLASH1_CLASS}",
    )

    def causal_problem(answers):
        if answers["dflash2"] != [False] * len(answers["dflash2"]):
            return f"DFlash2 draft layers causal per layer: {answers['dflash2']}, want all False"
        for draft, want in DFLASH1_CAUSAL.items():
            if answers[draft] != want:
                return f"DFlash1 draft {draft} causal per layer: {answers[draft]}, want {want}"
        return None

    run(
        "causality",
        lambda: observe_causality(models, ["dflash2", *DFLASH1_CAUSAL]),
        causal_problem,
        lambda answers: f"DFlash2 draft (is_causal: false) layers non-causal; "
        f"{len(DFLASH1_CAUSAL)} DFlash1 drafts as before",
    )

    def runner_problem(choices):
        # Behind a MoE target 0.27.1 stays on V1 unless the draft forces V2;
        # the DFlash1 draft shows the target alone does not.
        dflash2, dflash1 = choices["moe-target/dflash2"], choices["moe-target/dflash1-full"]
        if not dflash2["ok"]:
            return f"DFlash2 draft: {_error(dflash2)}"
        if dflash2["value"] is not True:
            return "a DFlash2 draft behind a MoE target stays on the V1 model runner"
        if dflash1 != {"ok": True, "value": False}:
            return f"a DFlash1 draft behind a MoE target: {dflash1.get('value', dflash1.get('error'))}"
        return None

    run(
        "v2-runner",
        lambda: observe_runner(models, ["moe-target"], ["dflash2", "dflash1-full"]),
        runner_problem,
        lambda _: "a DFlash2 draft selects the V2 model runner (behind a MoE target, "
        "where a DFlash1 draft stays on V1)",
    )

    expected_speculators = {"dflash2": "DFlash2Speculator", "dflash1-full": "DFlashSpeculator"}

    def dispatch_problem(chosen):
        for draft, want in expected_speculators.items():
            outcome = chosen[draft]
            if not outcome["ok"]:
                return f"{draft} draft: {_error(outcome)}"
            if outcome["value"] != want:
                return f"init_speculator gives a {draft} draft {outcome['value']}, want {want}"
        return None

    run(
        "speculator",
        lambda: observe_dispatch(models, list(expected_speculators)),
        dispatch_problem,
        lambda _: "init_speculator: DFlash2 draft -> DFlash2Speculator, "
        "DFlash1 draft -> DFlashSpeculator",
    )

    def top_k_problem(seen):
        if not seen["ids_equal"]:
            return "get_top_k_tokens ids differ from torch.topk over the full logits"
        if seen["value_error"] > TOLERANCE:
            return f"get_top_k_tokens values off by {seen['value_error']:.3g}"
        return None

    run(
        "top-k",
        observe_top_k,
        top_k_problem,
        lambda seen: f"LogitsProcessor.get_top_k_tokens equals torch.topk "
        f"(k={TOP_K}, vocabulary {TOP_K_VOCAB} with {seen['padding_rows']} padding rows)",
    )

    def kernels_problem(found):
        problems = [f"{name}: {_error(outcome)}" for name, outcome in found.items()
                    if not outcome["ok"]]
        speculator = found[SPECULATOR_MODULES["DFlash2Speculator"]]
        if speculator["ok"] and not speculator["value"]:
            problems.append("the DFlash2 speculator module defines no Triton kernel")
        return "; ".join(problems) or None

    run(
        "kernels",
        observe_kernels,
        kernels_problem,
        lambda found: "gumbel_noised_argmax and the DFlash2 modules import, with "
        f"{len(found[SPECULATOR_MODULES['DFlash2Speculator']]['value'])} Triton kernels in "
        "dflash2/speculator.py",
    )
    return checks


def main(result_file: str) -> None:
    started = time.monotonic()
    import vllm

    problem = platform_problem()
    if problem is not None:
        with open(result_file, "w") as out:
            json.dump({"error": problem}, out)
        return
    inspect_in_process()
    with tempfile.TemporaryDirectory(prefix="dflash2-verify-") as scratch:
        models = write_models(Path(scratch))
        checks = verify(models)
    result = {
        "vllm": {"version": getattr(vllm, "__version__", None),
                 "package": os.path.dirname(os.path.abspath(vllm.__file__))},
        "python": sys.executable,
        "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks],
        "seconds": round(time.monotonic() - started, 1),
    }
    with open(result_file, "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main(sys.argv[1])
