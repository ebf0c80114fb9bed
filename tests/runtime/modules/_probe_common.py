"""Code shared by the probes, which run inside the patched vLLM 0.27.1 interpreter.

Nothing here is imported by pytest itself: the probes put this directory on
sys.path and import it in the environment the runtime conftest sets up.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from pathlib import Path

UPSTREAM_MODEL = "vllm/model_executor/models/qwen3_dflash2.py"
UPSTREAM_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"


def emit(result: dict) -> None:
    """The probe's answer, through the runner's result file."""
    from runtime_guest import emit as guest_emit

    guest_emit(result)


def installed_marker(module) -> str:
    """The third line of an installed module: whose copy of it this venv holds."""
    return Path(module.__file__).read_text().splitlines()[2]


def load_upstream(relative: str, upstream_root: str | Path, alias: str):
    """Import one of upstream 0.28.0's DFlash2 modules next to ours.

    It is loaded into the same package as ours, under another name, so that
    its relative imports and its base classes resolve to the patched 0.27.1
    tree: upstream's modules need exactly the seams the patch adds.
    """
    path = Path(upstream_root) / relative
    package = relative[: -len(".py")].replace("/", ".").rsplit(".", 1)[0]
    name = f"{package}.{alias}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def interpret_libdevice() -> None:
    from runtime_guest import use_triton_interpreter

    use_triton_interpreter()


def stub_custom_ops() -> None:
    from runtime_guest import stub_silu_and_mul

    stub_silu_and_mul()


TARGET_BASE = {
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1024,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


def write_configs(root: Path, draft: dict | None = None, dflash: dict | None = None,
                  target: dict | None = None):
    """A tiny Qwen3 target and a DFlash2 draft for it, as config directories.

    `target` and `draft` replace the default configs whole when given;
    `dflash` overrides keys of the default draft's dflash_config.
    """
    target_dir = root / "target"
    draft_dir = root / "draft"
    target_dir.mkdir(parents=True, exist_ok=True)
    draft_dir.mkdir(parents=True, exist_ok=True)
    target = target or {**TARGET_BASE, "architectures": ["Qwen3ForCausalLM"],
                        "num_hidden_layers": 2}
    dflash_config = {
        "mask_token_id": 1000,
        "target_layer_ids": [0, 1],
        "selector_top_k": 4,
        "selector_rank": 8,
        "conv_kernel_size": 3,
        "conv_group_size": 16,
        **(dflash or {}),
    }
    draft_config = draft or {
        **TARGET_BASE,
        "architectures": ["DFlash2DraftModel"],
        "num_hidden_layers": 1,
        "block_size": 4,
        "dflash_config": dflash_config,
    }
    (target_dir / "config.json").write_text(json.dumps(target))
    (draft_dir / "config.json").write_text(json.dumps(draft_config))
    return target_dir, draft_dir


def engine_config(target_dir, draft_dir, *, steps=3, sample_method="probabilistic",
                  dtype="float32", max_num_seqs=8):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(
        model=str(target_dir),
        skip_tokenizer_init=True,
        dtype=dtype,
        load_format="dummy",
        max_model_len=256,
        max_num_seqs=max_num_seqs,
        enforce_eager=True,
        speculative_config={
            "method": "dflash",
            "model": str(draft_dir),
            "num_speculative_tokens": steps,
            "draft_sample_method": sample_method,
        },
    )
    return args.create_engine_config()


_DISTRIBUTED = contextlib.ExitStack()


def distributed(config) -> None:
    """A single-rank gloo group, kept for the life of the probe process."""
    if _DISTRIBUTED._exit_callbacks:
        return
    from runtime_guest import distributed as guest_distributed

    _DISTRIBUTED.enter_context(guest_distributed(config))


def build_model(cls, config, seed: int = 0, prefix: str = ""):
    """Build `cls` for `config` and fill every parameter from a seeded stream.

    `prefix` names the attention layers only (parameter names do not carry
    it); two models built for one config need different ones.
    """
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.utils.torch_utils import set_default_torch_dtype

    distributed(config)
    # As vLLM's model loader does: layers without an explicit params_dtype
    # take the default dtype.
    with set_current_vllm_config(config), torch.device("cpu"), \
            set_default_torch_dtype(config.model_config.dtype):
        model = cls(vllm_config=config, prefix=prefix)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parameter in sorted(model.named_parameters()):
            if parameter.dtype.is_floating_point:
                values = torch.randn(parameter.shape, generator=generator) * 0.1
                parameter.copy_(values.to(parameter.dtype))
    plain_cpu_linears(model)
    return model


def plain_cpu_linears(model) -> None:
    """Route every linear layer through torch's F.linear on CPU.

    vLLM's CPU platform picks a GEMM per layer after loading and may prepack
    the weight, which would hide later weight changes from the layer; these
    checks copy and load weights after building.
    """
    import torch

    for module in model.modules():
        weight = getattr(module, "weight", None)
        if hasattr(module, "quant_method") and isinstance(weight, torch.Tensor) \
                and weight.ndim == 2:
            module.cpu_linear = torch.nn.functional.linear


def run_checks(checks: dict, args: dict, modules=()) -> None:
    """Run each requested case, report per case, and emit everything at once.

    A failing case is reported with its traceback and the others still run:
    one interpreter start serves a whole test module.
    """
    import time
    import traceback

    results = {"_installed": {m.__name__: installed_marker(m) for m in modules}}
    for case in args["checks"]:
        started = time.monotonic()
        try:
            results[case["id"]] = checks[case["check"]](**case.get("params", {}))
        except Exception as exc:  # noqa: BLE001 -- reported to the test as the result
            results[case["id"]] = {"error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc()}
        results[case["id"]]["_seconds"] = round(time.monotonic() - started, 2)
    emit(results)
