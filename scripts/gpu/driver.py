"""End-to-end DFlash2 check of the patched vLLM 0.27.1 engine on a CUDA GPU,
beside 0.27.1 patched with the DFlash2 PR's edits alone, upstream vLLM 0.28.0
and the newest upstream release.

    python3 scripts/gpu/driver.py run --out DIR [--phases check,serve,throughput]
                                      [--configs a,b,...] [--tp N] [--reuse]
    python3 scripts/gpu/driver.py models --out DIR [--shapes tiny,prod]
    python3 scripts/gpu/driver.py plan --out DIR [--configs closure]
    python3 scripts/gpu/driver.py compare-runs DIR_A DIR_B

`run` writes random checkpoints (safetensors, the upstream layout) - a Qwen3
target, a DFlash2 draft and a DFlash1 draft, at two shapes: `tiny` (hidden
256, vocab 1024) and `prod` (hidden 2048, Qwen3's 151936-token vocab, top-k
16 over 7 draft positions) - then runs its phases:

check       one engine per configuration, each in its own process, all at once
            on the GPU, then compares what they generated:
  1. the engine runs on the V2 model runner and builds exactly one
     DFlash2Speculator for a DFlash2 draft (ours on 0.27.1, upstream's own on
     0.28.0), a DFlashSpeculator (and no DFlash2Speculator) for DFlash1;
  2. greedy: the tokens with speculation equal those without, per prompt;
  3. sampled (temperature 0.7 and 1.3, one seed per request): the runs
     complete, a seeded run repeats itself, and the distribution of the
     sampled tokens at each position with speculation matches the one without
     (chi-square test of homogeneity, pass when every p-value > 0.001);
  4. the speculative-decoding counters (drafts, draft tokens, accepted);
  5. 2-4 again with CUDA graphs (no enforce_eager), and at the prod shape;
  6. twins on two trees, configuration by configuration: the same greedy
     tokens, the same token for every seeded sampled request at each
     temperature, the same counters per phase; judged for 0.27.1 with the PR
     alone against 0.28.0 (pr_X == up_X) and for the closure against the
     newest upstream (X ~ new_X: whose sampler draws other noise for a seed,
     so its sampled tokens are held to the same distribution and only greedy
     tokens and counters to identity, OTHER_NOISE); 0.28.0 against the
     closure (up_X == X) too, reported instead where a fix changes the
     result (TWIN_COMPARISONS);
  7. the variants (VARIANTS): an all-sliding-window draft (window 16) on
     prompts of 48 to 200 tokens, a draft whose max_position_embeddings (256)
     is below the target's max_model_len (2048) on prompts of 300 to 700
     tokens, probabilistic drafting with a draft that spreads over its
     candidates; each against a base run of the same inputs. A tree known to
     lack a fix (EXPECTED_TO_FAIL) has its outcome reported: completed,
     refused at start, or crashed with the error's last lines;
  8. with --tp N: the same engines at tensor_parallel_size N (target and
     draft), through vLLM's multiprocess executor, against the TP 1 ones.
serve       `vllm serve` of the patched 0.27.1 (engine core in its own process)
            with the DFlash2 draft: its greedy completions over HTTP equal the
            offline engine's, and /metrics counts drafts and accepted tokens.
throughput  each engine alone on the GPU, warmed up, on a full batch at the
            prod shape (bfloat16, CUDA graphs): output tokens/s, median of
            several repeats, DFlash2 and no speculation on both versions; the
            judged figure is DFlash2's speedup on 0.27.1 against 0.28.0's.

Each vLLM version runs in its own processes, with its own tree first on
PYTHONPATH (--tree-0271, --tree-0271pr, --tree-0280, --tree-new; the wheels
in --site serve all). `--configs closure` runs the plain base and DFlash2
engines, eager and graph, on all four trees and every variant (31 engines).
Every engine writes its result file as it goes; a failed phase or engine is
reported and the rest still run. Exit status 0 when every check passes; DIR
gets summary.json and one log and one result per engine.

`run --closure-release 0.26.0` labels the closure tree (and `pr_`) with
another release the tool patches, whose venv `--python-0271` then names;
`compare-runs` holds two runs' engines to each other, configuration by
configuration where both ran it with the same attention backend: the same
greedy tokens, seeded sampled tokens and counters (the checkpoints are
seeded, so two runs write the same ones; it checks that they did). So
0.26.0 patched is held to 0.27.1 patched.

The random weights are shaped so that drafting does something: the target is
close to a bigram model whose greedy successor of each of four "cycle" tokens
is the next cycle token, the mask token's embedding points at those four, and
the DFlash2 selector's codebooks encode the same cycle, so a DFlash2 draft is
often accepted after a cycle token and rarely elsewhere. Every other weight is
random at the scale of a trained model's (unit-RMS activations).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# The checkpoint writer lives in the package, where `verify --gpu` uses it too.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from dflash2_backport.verification.checkpoints import (  # noqa: E402
    BENCH_BATCH,
    BENCH_PROMPT,
    SHAPES,
    write_models,
)
from dflash2_backport.verification.gpu_probes import (
    counter_delta as _delta,  # noqa: E402
)
from dflash2_backport.verification.gpu_probes import (
    spec_counters as _spec_counters,  # noqa: E402
)

GREEDY_TOKENS = 64
TEMPERATURES = (0.7, 1.3)
SAMPLED_REQUESTS = 2000
# Drafting with verification's noise shifts the first drafted token's
# distribution by about 0.06 (0.46 against 0.52 for the cycle successor) on
# the spread draft; scripts/gpu/prob_power.py, a simulation of the coupled
# sampler, gives the chi-square test a power of about 0.7 at 2000 requests
# per arm and 1.0 at 8000.
PROB_SAMPLED_REQUESTS = 8000
SAMPLED_TOKENS = 6
P_THRESHOLD = 1e-3

BENCH_TOKENS = 256
BENCH_REPEATS = 15
BENCH_WARMUPS = 2
SPEEDUP_GOAL = 0.97

VERSIONS = ("0.27.1", "0.28.0")
KINDS = ("base", "dflash2", "dflash1")
# The trees a configuration can run on, by name prefix: the 0.27.1 patched by
# `apply` (no prefix: the PR's edits and the upstream fixes), by `apply
# --only-pr` (pr_), upstream 0.28.0 (up_) and the newest upstream release
# that runs on the device (new_, labelled with its METADATA's version).
TREES = {"closure": "", "pr": "pr_", "up": "up_", "new": "new_"}
# The release the closure tree holds: 0.27.1, or another the tool patches
# (`run --closure-release`, which the engines it starts read from here).
CLOSURE_RELEASE = os.environ.get("DRIVER_CLOSURE_RELEASE") or VERSIONS[0]
TREE_VERSIONS = {"closure": CLOSURE_RELEASE, "pr": f"{CLOSURE_RELEASE} --only-pr",
                 "up": VERSIONS[1], "new": "newest"}
UPSTREAM_TREES = ("up", "new")
# A variant runs a DFlash2 draft (or, for base, the target alone) on inputs
# the plain checkpoints do not reach: draft, prompts, lengths and phases.
VARIANTS = {
    "swa": {"draft": "dflash2_swa", "greedy": "greedy_swa", "sampled": "sampled_swa",
            "greedy_tokens": 128, "max_model_len": 512},
    "longctx": {"draft": "dflash2_short", "greedy": "greedy_longctx", "sampled": None,
                "greedy_tokens": 128, "max_model_len": 2048},
    "prob": {"draft": "dflash2_spread", "greedy": "greedy", "sampled": "sampled",
             "greedy_tokens": GREEDY_TOKENS, "max_model_len": 512,
             "draft_sample_method": "probabilistic",
             "sampled_requests": PROB_SAMPLED_REQUESTS},
}
# The check phase's default configurations.
CHECK_CONFIGS = [
    "base_eager", "dflash2_eager", "dflash1_eager", "base_graph", "dflash2_graph",
    "base_eager_bf16", "dflash2_eager_bf16",
    "up_base_eager", "up_dflash2_eager", "up_base_graph", "up_dflash2_graph",
    "prod_base_eager", "prod_dflash2_eager", "prod_base_graph", "prod_dflash2_graph",
    "up_prod_dflash2_eager",
]
# What --tp N adds, each as tpN_<name>.
TP_CONFIGS = ["base_eager", "dflash2_eager", "base_graph", "dflash2_graph",
              "up_base_eager", "up_dflash2_eager", "up_dflash2_graph"]
# One run of the driver: the plain eager and graph engines on all four trees, and
# the variants with their base runs (`--configs closure`); or two, a part each.
CLOSURE_PLAIN = [
    f"{prefix}{kind}_{mode}" for prefix in TREES.values()
    for kind in ("base", "dflash2") for mode in ("eager", "graph")
]
CLOSURE_VARIANTS = [
    "base_swa_graph", "base_swa_eager", "dflash2_swa_graph", "dflash2_swa_eager", "pr_dflash2_swa_graph",
    "up_dflash2_swa_graph", "new_dflash2_swa_graph",
    "base_longctx_graph", "dflash2_longctx_graph", "pr_dflash2_longctx_graph",
    "new_dflash2_longctx_graph",
    "base_prob_graph", "dflash2_prob_graph", "pr_dflash2_prob_graph",
    "new_dflash2_prob_graph",
]
CLOSURE_CONFIGS = CLOSURE_PLAIN + CLOSURE_VARIANTS
# Another release the tool patches (`run --closure-release`): the closure
# tree's checks and variants alone, to hold against 0.27.1's (compare-runs).
RELEASE_CONFIGS = [name for name in CHECK_CONFIGS + CLOSURE_VARIANTS
                   if not name.startswith(tuple(p for p in TREES.values() if p))]
PRESETS = {"default": CHECK_CONFIGS, "closure": CLOSURE_CONFIGS,
           "closure-plain": CLOSURE_PLAIN, "closure-variants": CLOSURE_VARIANTS,
           "release": RELEASE_CONFIGS}
THROUGHPUT_CONFIGS = ["tput_base", "tput_dflash2", "tput_up_base", "tput_up_dflash2"]
CUDA_FAULT = re.compile(r"illegal memory access|CUDA error|device-side assert")
# NVLink multicast can take a shared host's GPUs out of service: off everywhere.
# The attention backend of every engine: Triton's unless DRIVER_ATTENTION_BACKEND
# names another, or is "auto", which leaves the choice to vLLM (`run
# --attention-backend` sets it for the engines it starts).
def attention_backend() -> str | None:
    chosen = os.environ.get("DRIVER_ATTENTION_BACKEND", "TRITON_ATTN")
    return None if chosen in ("", "auto") else chosen


NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0"}


def config_of(name: str) -> dict:
    """A configuration from its name:
    [tput_|tpN_][pr_|up_|new_][prod_]KIND[_VARIANT][_MODE][_bf16].

    `pr_` is 0.27.1 patched with the DFlash2 PR's edits alone, `up_`
    upstream 0.28.0, `new_` the newest upstream (else 0.27.1 patched by
    `apply`), VARIANT one of VARIANTS (tiny DFlash2 or base only), `tpN_`
    tensor parallel N through the multiprocess executor (tp1_ is TP 1 on
    that same path), `tput_` a throughput engine (prod shape, bf16, graphs).
    """
    parts = name.split("_")
    config = {"name": name, "role": "check", "tp": 1, "executor": None,
              "tree": "closure", "version": TREE_VERSIONS["closure"], "shape": "tiny",
              "dtype": "float32", "eager": True, "draft": None, "variant": None}
    if parts and parts[0] == "tput":
        config.update(role="throughput", shape="prod", dtype="bfloat16", eager=False)
        parts.pop(0)
    if parts and re.fullmatch(r"tp\d+", parts[0]):
        config.update(tp=int(parts.pop(0)[2:]), executor="mp")
    tree = {prefix[:-1]: tree for tree, prefix in TREES.items() if prefix}.get(
        parts[0] if parts else None)
    if tree:
        config.update(tree=tree, version=TREE_VERSIONS[tree])
        parts.pop(0)
    if parts and parts[0] == "prod":
        config["shape"] = "prod"
        parts.pop(0)
    if not parts or parts[0] not in KINDS:
        raise ValueError(f"{name}: no kind among {KINDS}")
    kind = parts.pop(0)
    config["draft"] = None if kind == "base" else kind
    if parts and parts[0] in VARIANTS:
        config["variant"] = parts.pop(0)
        if kind == "dflash1" or config["shape"] != "tiny" or config["role"] != "check":
            raise ValueError(f"{name}: variants are tiny DFlash2 or base check engines")
    if config["role"] == "check":
        if not parts or parts[0] not in ("eager", "graph"):
            raise ValueError(f"{name}: eager or graph?")
        config["eager"] = parts.pop(0) == "eager"
    if parts and parts[0] == "bf16":
        config["dtype"] = "bfloat16"
        parts.pop(0)
    if parts:
        raise ValueError(f"{name}: unknown suffix {'_'.join(parts)}")
    if config["draft"] == "dflash1" and config["shape"] != "tiny":
        raise ValueError(f"{name}: the DFlash1 draft is written at the tiny shape only")
    return config


# --------------------------------------------------------------------------
# One engine (runs in its own process)
# --------------------------------------------------------------------------

def _worker_count_drafts(_worker=None) -> bool:
    """Count _generate_draft calls on both speculator classes, where they run.

    Called in the engine's process before it starts (a forked worker inherits
    the wrapper) and again in each worker through collective_rpc, which
    covers workers that were spawned; a class wrapped once is left alone.
    """
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash1_module
    from vllm.v1.worker.gpu.spec_decode.dflash2 import speculator as dflash2_module

    for cls in (dflash1_module.DFlashSpeculator, dflash2_module.DFlash2Speculator):
        if "_driver_draft_calls" in cls.__dict__:
            continue
        original = cls._generate_draft

        def wrapper(self, *args, _original=original, _cls=cls, **kwargs):
            _cls._driver_draft_calls += 1
            return _original(self, *args, **kwargs)

        cls._driver_draft_calls = 0
        cls._generate_draft = wrapper
    return True


def draft_logit_cache(speculator) -> dict | None:
    """The draft-logit cache a speculator allocated, or None (greedy drafts
    allocate none): 0.27.1 keeps a tensor, later releases a DraftLogitsCache
    whose `values` hold its rows (fewer than max_num_seqs only where
    batch-sharded sampling splits them across tensor-parallel ranks)."""
    cache = vars(speculator).get("draft_logits")
    if cache is None:
        return None
    # vars(), not getattr: a tensor's own `values` is a method.
    values = vars(cache).get("values", cache) if hasattr(cache, "__dict__") else cache
    return {"shape": [int(n) for n in values.shape],
            "dtype": str(values.dtype).removeprefix("torch."),
            "bytes": int(values.numel()) * int(values.element_size())}


def _worker_introspect(_worker=None) -> dict:
    """What this process built: speculators, model runners, module origins."""
    import gc
    import inspect
    from pathlib import Path as _Path

    from torch.nn import Module
    from vllm.model_executor.models import qwen3_dflash2
    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator

    # The engine freezes its start-up heap (gc.freeze), which hides it from
    # gc.get_objects; unfreezing only lets the collector see it again.
    gc.unfreeze()
    speculators, runners, dflash2_instances, draft_logits = {}, set(), 0, []
    attention, samplers = {}, {}
    for obj in gc.get_objects():
        # The top-k/top-p sampler binds the path it chose at construction:
        # forward_cuda is FlashInfer's, forward_native PyTorch's.
        if isinstance(obj, Module) and type(obj).__name__ == "TopKTopPSampler":
            chosen = getattr(vars(obj).get("forward"), "__name__", "forward")
            samplers[chosen] = samplers.get(chosen, 0) + 1
        # An attention layer keeps the backend vLLM chose for it, and its
        # implementation the FlashAttention version it calls, as plain
        # attributes; read through __dict__ only, since some objects the
        # collector holds (a ctypes library) answer any attribute name.
        if isinstance(obj, Module) and "attn_backend" in vars(obj):
            fields = vars(obj)
            backend, impl = fields["attn_backend"], fields.get("impl")
            version = vars(impl).get("vllm_flash_attn_version") if hasattr(
                impl, "__dict__") else None
            name = getattr(backend, "get_name", lambda: repr(backend))()
            attention[str(fields.get("layer_name", type(obj).__name__))] = (
                f"{name}{f' (FA{version})' if version else ''}")
        if isinstance(obj, DFlashSpeculator):
            name = type(obj).__name__
            speculators[name] = speculators.get(name, 0) + 1
            dflash2_instances += isinstance(obj, DFlash2Speculator)
            draft_logits.append(draft_logit_cache(obj))
        elif type(obj).__name__ == "GPUModelRunner":
            runners.add(type(obj).__module__)
    modules = {}
    for module in (qwen3_dflash2, inspect.getmodule(DFlash2Speculator)):
        path = _Path(inspect.getsourcefile(module))
        header = path.read_text().splitlines()[:4]
        modules[module.__name__] = {
            "file": str(path),
            "this_tool": any("dflash2-backport" in line for line in header)}
    calls = {f"{cls.__name__}._generate_draft": cls.__dict__.get("_driver_draft_calls")
             for cls in (DFlashSpeculator, DFlash2Speculator)}
    return {"modules": modules, "speculators": speculators,
            "dflash2_instances": dflash2_instances, "model_runners": sorted(runners),
            "attention": attention, "samplers": samplers, "draft_logits": draft_logits,
            "draft_calls": calls, "pid": os.getpid()}


def engine_kwargs(config: dict, models: dict) -> dict:
    """The LLM(...) arguments of a configuration; builds nothing."""
    s = SHAPES[config["shape"]]
    throughput = config["role"] == "throughput"
    variant = VARIANTS.get(config["variant"], {})
    kwargs = dict(
        model=models["target"], dtype=config["dtype"], skip_tokenizer_init=True, seed=0,
        max_model_len=variant.get("max_model_len", 512), max_num_seqs=BENCH_BATCH if throughput else s["max_num_seqs"],
        gpu_memory_utilization=0.1, kv_cache_memory_bytes=s["kv_bytes"],
        enforce_eager=config["eager"], disable_log_stats=False,
    )
    backend = attention_backend()
    if backend:
        kwargs["attention_config"] = {"backend": backend}
    if throughput:
        # Every step of the timed batch replays a captured graph, a verify step
        # of BENCH_BATCH * block_size tokens included (the default stops at 512).
        kwargs["compilation_config"] = {
            "max_cudagraph_capture_size": BENCH_BATCH * s["block_size"]}
    if config["executor"]:
        kwargs.update(tensor_parallel_size=config["tp"],
                      distributed_executor_backend=config["executor"],
                      disable_custom_all_reduce=True)
    if config["draft"] is not None:
        kwargs["speculative_config"] = {
            "method": "dflash", "model": models[variant.get("draft", config["draft"])],
            "num_speculative_tokens": s["block_size"] - 1,
        }
        if backend:
            kwargs["speculative_config"]["attention_backend"] = backend
        if "draft_sample_method" in variant:
            kwargs["speculative_config"]["draft_sample_method"] = (
                variant["draft_sample_method"])
        if config["executor"]:
            kwargs["speculative_config"]["draft_tensor_parallel_size"] = config["tp"]
    return kwargs


def run_engine(name: str, models_by_shape: dict, result_path: Path) -> None:
    config = config_of(name)
    models = models_by_shape[config["shape"]]
    result = {"config": name, **{k: config[k] for k in (
        "draft", "eager", "dtype", "version", "shape", "tp", "role", "tree", "variant")},
        "enforce_eager": config["eager"], "errors": {}}
    try:
        _worker_count_drafts()
    except Exception as exc:  # noqa: BLE001 - the count is a figure, not a check
        result["errors"]["count_drafts"] = repr(exc)

    import vllm
    from vllm import LLM, SamplingParams

    result["vllm_version"] = vllm.__version__
    result["vllm_file"] = vllm.__file__
    kwargs = engine_kwargs(config, models)
    variant = VARIANTS.get(config["variant"], {})
    result["max_model_len"] = kwargs["max_model_len"]
    started = time.time()
    # DRIVER_STACK_DUMP_S=S prints every thread's stack to the engine's log
    # every S seconds until the engine is up: where a slow start spends it.
    dump_every = float(os.environ.get("DRIVER_STACK_DUMP_S") or 0)
    if dump_every > 0:
        import faulthandler

        faulthandler.dump_traceback_later(dump_every, repeat=True)
    try:
        llm = LLM(**kwargs)
    except BaseException:
        # Refused (or crashed) at start: saved as this configuration's result.
        import traceback

        result["errors"]["startup"] = traceback.format_exc()[-2000:]
        result_path.write_text(json.dumps(result))
        raise
    result["startup_s"] = round(time.time() - started, 1)
    if dump_every > 0:
        faulthandler.cancel_dump_traceback_later()
    result["use_v2_model_runner"] = bool(
        getattr(llm.llm_engine.vllm_config, "use_v2_model_runner", False))
    data = json.loads(Path(models["prompts"]).read_text())

    def generate(prompt_list, params):
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompt_list],
                               params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outputs]

    def introspect():
        workers = llm.collective_rpc(_worker_introspect)
        first = workers[0]
        result.update({k: first.get(k) for k in (
            "modules", "speculators", "dflash2_instances", "model_runners", "attention",
            "samplers", "draft_logits")})
        result["draft_calls"] = first["draft_calls"]
        result["workers"] = workers

    def phase(key, body):
        """Run one phase; keep what the others found if it raises."""
        try:
            body()
        except Exception:  # noqa: BLE001 - reported in the summary
            import traceback

            result["errors"][key] = traceback.format_exc()[-2000:]
            print(result["errors"][key], flush=True)
            if CUDA_FAULT.search(result["errors"][key]):
                # The context is lost: every later phase would fail the same
                # way, and the process may hang on its way out.
                result_path.write_text(json.dumps(result))
                print(f"[{name}] CUDA fault in phase {key}: stopping", flush=True)
                os._exit(3)
        result_path.write_text(json.dumps(result))

    phase("count_drafts_in_workers", lambda: llm.collective_rpc(_worker_count_drafts))
    phase("introspect", introspect)
    state = {"counters": _spec_counters(llm)}

    def greedy_phase():
        started = time.time()
        params = SamplingParams(
            temperature=0.0, max_tokens=variant.get("greedy_tokens", GREEDY_TOKENS),
            ignore_eos=True, detokenize=False)
        result["greedy"] = generate(data[variant.get("greedy", "greedy")], params)
        result["greedy_s"] = round(time.time() - started, 2)
        after = _spec_counters(llm)
        result["counters_greedy"] = _delta(after, state["counters"])
        state["counters"] = after

    def sampled_phase(temperature):
        requests = variant.get("sampled_requests", SAMPLED_REQUESTS)
        params = [SamplingParams(temperature=temperature, seed=seed,
                                 max_tokens=SAMPLED_TOKENS, ignore_eos=True,
                                 detokenize=False)
                  for seed in range(requests)]
        result.setdefault("sampled", {})[str(temperature)] = generate(
            [data[variant.get("sampled", "sampled")]] * requests, params)
        after = _spec_counters(llm)
        result[f"counters_T{temperature}"] = _delta(after, state["counters"])
        state["counters"] = after

    def repeat_phase():
        # A seeded run repeats itself (in a different batch).
        params = [SamplingParams(temperature=TEMPERATURES[-1], seed=seed,
                                 max_tokens=SAMPLED_TOKENS, ignore_eos=True,
                                 detokenize=False)
                  for seed in range(64)]
        again = generate([data[variant.get("sampled", "sampled")]] * 64, params)
        first = result["sampled"][str(TEMPERATURES[-1])][:64]
        result["seeded_repeat_equal"] = sum(a == b for a, b in zip(again, first))
        state["counters"] = _spec_counters(llm)

    def throughput_phase():
        params = SamplingParams(temperature=0.0, max_tokens=BENCH_TOKENS,
                                ignore_eos=True, detokenize=False)
        for _ in range(BENCH_WARMUPS):  # the same batch, untimed
            generate(data["bench"], params)
        before = _spec_counters(llm)
        runs, digests = [], []
        for _ in range(BENCH_REPEATS):
            started = time.perf_counter()
            tokens = generate(data["bench"], params)
            elapsed = time.perf_counter() - started
            runs.append(sum(map(len, tokens)) / elapsed)
            digests.append(hash(json.dumps(tokens)) & 0xFFFFFFFF)
        result["throughput"] = {
            "tokens_per_s": runs, "median": statistics.median(runs),
            "requests": len(data["bench"]), "prompt_tokens": BENCH_PROMPT,
            "output_tokens": BENCH_TOKENS,
            "counters": _delta(_spec_counters(llm), before),
            "outputs_stable": len(set(digests)) == 1,
        }
        result["bench_tokens"] = tokens

    if config["role"] == "throughput":
        phase("throughput", throughput_phase)
    else:
        phase("greedy", greedy_phase)
        if variant.get("sampled", "sampled"):
            for temperature in TEMPERATURES:
                phase(f"T{temperature}", lambda t=temperature: sampled_phase(t))
            phase("repeat", repeat_phase)
    phase("draft_calls", introspect)
    print(f"[{name}] done", flush=True)


# --------------------------------------------------------------------------
# `vllm serve` (runs in its own process; the server in another)
# --------------------------------------------------------------------------

def _http(url: str, body: dict | None = None, timeout: float = 30.0):
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, response.read().decode()


def parse_spec_metrics(text: str) -> dict:
    """The spec-decode counters of a Prometheus text page, summed over labels."""
    found: dict = {}
    pattern = re.compile(r'^vllm:spec_decode_(\w+?)(?:_total)?(\{[^}]*\})?\s+(\S+)$')
    for line in text.splitlines():
        match = pattern.match(line)
        if not match or line.startswith("#"):
            continue
        key, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if key.endswith("_created"):
            continue
        position = re.search(r'position="(\d+)"', labels)
        if position:
            values = found.setdefault(key, [])
            index = int(position.group(1))
            values.extend([0.0] * (index + 1 - len(values)))
            values[index] += value
        else:
            found[key] = found.get(key, 0.0) + value
    return found


def completion_tokens(body: dict, prompts: int) -> list[list[int]]:
    """The token ids of a /v1/completions answer, one list per prompt in the
    order the prompts were given (choices carry their prompt's index)."""
    choices = sorted(body["choices"], key=lambda choice: choice["index"])
    if [choice["index"] for choice in choices] != list(range(prompts)):
        raise ValueError(f"choices {[c['index'] for c in choices]} for {prompts} prompts")
    return [list(choice["token_ids"]) for choice in choices]


def run_serve(models_by_shape: dict, result_path: Path, port: int, timeout: float,
              dtype: str = "float32") -> None:
    from concurrent.futures import ThreadPoolExecutor

    models = models_by_shape["tiny"]
    s = SHAPES["tiny"]
    result = {"config": "serve", "version": TREE_VERSIONS["closure"], "dtype": dtype, "errors": {}}
    env = dict(os.environ)
    # The OpenAI server's engine core runs in a process of its own.
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    speculative = {"method": "dflash", "model": models["dflash2"],
                   "num_speculative_tokens": s["block_size"] - 1}
    backend = attention_backend()
    if backend:
        speculative["attention_backend"] = backend
    command = [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", models["target"],
        "--served-model-name", "target", "--host", "127.0.0.1", "--port", str(port),
        "--dtype", dtype, "--seed", "0", "--max-model-len", "512",
        "--max-num-seqs", str(s["max_num_seqs"]), "--gpu-memory-utilization", "0.1",
        "--kv-cache-memory-bytes", str(s["kv_bytes"]), "--enforce-eager",
        "--skip-tokenizer-init", "--speculative-config", json.dumps(speculative),
    ]
    if backend:
        command += ["--attention-config", json.dumps({"backend": backend})]
    result["command"] = command
    log = open(result_path.with_suffix(".server.log"), "w")
    started = time.time()
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def save():
        result_path.write_text(json.dumps(result))

    try:
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"server exited {server.returncode} before healthy")
            if time.time() - started > timeout:
                raise TimeoutError(f"not healthy after {timeout:.0f} s")
            try:
                if _http(f"{base}/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(2)
        result["healthy_after_s"] = round(time.time() - started, 1)
        save()
        data = json.loads(Path(models["prompts"]).read_text())

        def complete(prompts):
            status, text = _http(f"{base}/v1/completions", {
                "model": "target", "prompt": prompts, "max_tokens": GREEDY_TOKENS,
                "temperature": 0.0, "ignore_eos": True, "return_token_ids": True,
            }, timeout=120)
            return completion_tokens(json.loads(text), len(prompts))

        before = parse_spec_metrics(_http(f"{base}/metrics")[1])
        try:
            # Every prompt in one request, as the offline engine gets them at
            # once: in bfloat16 the batch a request runs in changes rounding.
            result["greedy"] = complete(data["greedy"])
            result["requests"] = "one request with every prompt"
        except (OSError, KeyError, ValueError) as exc:
            result["errors_batched"] = repr(exc)
            with ThreadPoolExecutor(8) as pool:
                result["greedy"] = [tokens for batch in pool.map(
                    complete, [[p] for p in data["greedy"]]) for tokens in batch]
            result["requests"] = "one request per prompt, 8 at a time"
        after = parse_spec_metrics(_http(f"{base}/metrics")[1])
        result["counters_greedy"] = _delta(after, before)
        result["metrics_total"] = after
    except Exception:  # noqa: BLE001 - reported in the summary
        import traceback

        result["errors"]["serve"] = traceback.format_exc()[-2000:]
        print(result["errors"]["serve"], flush=True)
    finally:
        try:
            os.killpg(server.pid, signal.SIGINT)
            server.wait(timeout=30)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(server.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            server.wait()
        log.close()
        save()
    print("[serve] done", flush=True)


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------

def chi_square_homogeneity(a: list[int], b: list[int], min_count: int = 10):
    """p-value and total variation of two samples of tokens, rare ones pooled."""
    from collections import Counter

    from scipy.stats import chi2

    ca, cb = Counter(a), Counter(b)
    keys = sorted(set(ca) | set(cb))
    rows, other = [], [0, 0]
    for key in keys:
        if ca[key] + cb[key] >= min_count:
            rows.append([ca[key], cb[key]])
        else:
            other[0] += ca[key]
            other[1] += cb[key]
    if sum(other) >= min_count:
        rows.append(other)
    table = np.array(rows, dtype=float)
    na, nb = len(a), len(b)
    tv = 0.5 * sum(abs(ca[k] / na - cb[k] / nb) for k in keys)
    if len(table) < 2:
        return 1.0, tv, len(table)
    expected = table.sum(1, keepdims=True) * np.array([[na, nb]]) / (na + nb)
    stat = float(((table - expected) ** 2 / expected).sum())
    dof = len(table) - 1
    return float(chi2.sf(stat, dof)), float(tv), len(table)


def compare_greedy(reference: list, other: list) -> dict:
    equal = sum(x == y for x, y in zip(reference, other))
    tokens = sum(len(x) for x in reference)
    diverged = []
    for i, (x, y) in enumerate(zip(reference, other)):
        if x != y:
            first = next((j for j, (p, q) in enumerate(zip(x, y)) if p != q),
                         min(len(x), len(y)))
            diverged.append({"prompt": i, "first_diff": first})
    return {"equal_prompts": equal, "prompts": len(reference),
            "tokens": tokens, "diverged": diverged,
            "same_count": len(reference) == len(other)}


def compare_sampled(reference: dict, other: dict) -> dict:
    report = {}
    for temperature, ref in reference.items():
        got = other[temperature]
        per_position = []
        for pos in range(SAMPLED_TOKENS):
            p, tv, bins = chi_square_homogeneity([r[pos] for r in ref],
                                                 [g[pos] for g in got])
            per_position.append({"pos": pos, "p": p, "tv": tv, "bins": bins})
        report[temperature] = per_position
    return report


COUNTER_KEYS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                "num_accepted_tokens_per_pos")


def acceptance(counters: dict) -> str:
    drafts = counters.get("num_drafts", 0.0)
    proposed = counters.get("num_draft_tokens", 0.0)
    accepted = counters.get("num_accepted_tokens", 0.0)
    per_pos = counters.get("num_accepted_tokens_per_pos", [])
    rate = accepted / proposed if proposed else 0.0
    length = 1 + accepted / drafts if drafts else 0.0
    return (f"drafts={drafts:.0f} proposed={proposed:.0f} accepted={accepted:.0f} "
            f"rate={rate:.3f} mean_accept_len={length:.2f} "
            f"per_pos={[int(v) for v in per_pos]}")


def attention_by_backend(attention: dict) -> str:
    """{'model.layers.0.self_attn.attn': 'FLASH_ATTN (FA3)', ...} -> one line:
    each backend with the layers that run it."""
    grouped: dict = {}
    for layer, backend in sorted(attention.items()):
        grouped.setdefault(backend, []).append(layer)
    return "; ".join(f"{backend}: {', '.join(layers)}"
                     for backend, layers in sorted(grouped.items()))


def _split(name: str) -> tuple[str, str]:
    """(prefix, rest): 'up_prod_dflash2_eager' -> ('up_prod_', 'dflash2_eager')."""
    parts = name.split("_")
    for i, part in enumerate(parts):
        if part in KINDS:
            return "".join(p + "_" for p in parts[:i]), "_".join(parts[i:])
    return "", name


def compare_versions(ours: dict, upstream: dict,
                     labels: tuple = VERSIONS, same_noise: bool = True) -> dict:
    """Token-for-token and counter-for-counter identity of two engines' results.
    Where the two versions draw different sampling noise for the same seed
    (`same_noise` False), sampled tokens are held to the same distribution
    (chi-square homogeneity at each position) and the sampled phases'
    counters, which then vary as the tokens do, are reported beside it."""
    report = {"identical": True, "parts": {}, "reported": {}}

    def part(key, equal, figure):
        report["parts"][key] = {"equal": equal, "figure": figure}
        report["identical"] &= equal

    if "greedy" in ours or "greedy" in upstream:
        g = compare_greedy(ours.get("greedy", []), upstream.get("greedy", []))
        part("greedy", g["same_count"] and g["equal_prompts"] == g["prompts"],
             f"{g['equal_prompts']}/{g['prompts']} prompts identical; "
             f"diverged={g['diverged'][:6]}")
    for temperature in map(str, TEMPERATURES):
        a = ours.get("sampled", {}).get(temperature)
        b = upstream.get("sampled", {}).get(temperature)
        if a is None and b is None:
            continue
        a, b = a or [], b or []
        equal = sum(x == y for x, y in zip(a, b))
        first = [i for i, (x, y) in enumerate(zip(a, b)) if x != y][:6]
        seeded = (f"{equal}/{max(len(a), len(b))} seeded requests identical; "
                  f"first differing seeds={first}")
        if same_noise:
            part(f"sampled T={temperature}", len(a) == len(b) and equal == len(a), seeded)
            continue
        report["reported"][f"seeded T={temperature}"] = seeded
        if not a or not b:
            part(f"sampled T={temperature}", False, f"{len(a)} vs {len(b)} requests")
            continue
        positions = compare_sampled({temperature: a}, {temperature: b})[temperature]
        low = min(positions, key=lambda row: row["p"])
        part(f"sampled T={temperature}", low["p"] > P_THRESHOLD,
             f"same distribution (chi-square, every p > {P_THRESHOLD}): min p={low['p']:.3g} "
             f"at pos{low['pos']}, {len(a)} vs {len(b)} requests")
    phases = ("greedy", *(f"T{t}" for t in TEMPERATURES))
    for phase in phases:
        a, b = ours.get(f"counters_{phase}"), upstream.get(f"counters_{phase}")
        if a is None and b is None:
            continue
        a = {k: v for k, v in (a or {}).items() if k in COUNTER_KEYS}
        b = {k: v for k, v in (b or {}).items() if k in COUNTER_KEYS}
        if a == b:
            figure = acceptance(a) if a else "no spec-decode counters on either"
        else:
            figure = f"{labels[0]}: {acceptance(a)} | {labels[1]}: {acceptance(b)}"
        if same_noise or phase == "greedy":
            part(f"counters {phase}", a == b, figure)
        else:
            report["reported"][f"counters {phase}"] = figure
    if "seeded_repeat_equal" in ours or "seeded_repeat_equal" in upstream:
        part("seeded repeat", ours.get("seeded_repeat_equal") ==
             upstream.get("seeded_repeat_equal"),
             f"{ours.get('seeded_repeat_equal')} vs {upstream.get('seeded_repeat_equal')}")
    return report


def _run_results(run: Path) -> dict[str, dict]:
    """A run directory's engine results, by configuration name."""
    found = {}
    for path in sorted(run.glob("*.json")):
        try:
            config_of(path.stem)
        except ValueError:
            continue  # summary.json, models.json, serve.json
        found[path.stem] = json.loads(path.read_text())
    return found


def _checkpoint_digests(run: Path) -> dict[str, str]:
    """Every file of the run's checkpoints and prompts, by path under models/."""
    import hashlib

    root = run / "models"
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def compare_runs(first: Path, second: Path) -> tuple[bool, list[str]]:
    """Hold two runs' engines to each other (compare_versions), where both
    ran a configuration with the same attention backend: (all identical and
    at least one compared, one line per configuration)."""
    lines = []
    if _checkpoint_digests(first) != _checkpoint_digests(second):
        return False, ["FAIL  the two runs wrote different checkpoints or prompts"]
    ours, theirs = _run_results(first), _run_results(second)
    compared = 0
    passed = True
    for name in sorted(set(ours) & set(theirs)):
        a, b = ours[name], theirs[name]
        label = f"{a.get('version', '?')} vs {b.get('version', '?')}"
        if "error" in a or "error" in b:
            lines.append(f"SKIP  {name}: {label}: an engine did not finish")
            continue
        if a.get("attention") != b.get("attention"):
            lines.append(f"SKIP  {name}: {label}: other attention backends "
                         f"({attention_by_backend(a.get('attention') or {})} | "
                         f"{attention_by_backend(b.get('attention') or {})})")
            continue
        report = compare_versions(a, b, labels=(a.get("version"), b.get("version")))
        compared += 1
        passed &= report["identical"]
        detail = "; ".join(f"{key}: {part['figure']}" for key, part in report["parts"].items()
                           if not part["equal"] or key == "greedy")
        lines.append(f"{'PASS' if report['identical'] else 'FAIL'}  {name}: {label}: {detail}")
    for name in sorted(set(ours) ^ set(theirs)):
        lines.append(f"INFO  {name}: in one run only")
    if not compared:
        lines.append("FAIL  no configuration both runs finished with the same attention backend")
    return passed and compared > 0, lines


def throughput_table(results: dict) -> dict | None:
    rows = {}
    for version, prefix in zip(VERSIONS, ("tput_", "tput_up_")):
        row = {}
        for kind in ("base", "dflash2"):
            r = results.get(f"{prefix}{kind}", {})
            t = r.get("throughput")
            row[kind] = t
        rows[version] = row
    if not any(v for row in rows.values() for v in row.values()):
        return None
    return rows


# Where a tree is known to lack a fix, its result is reported, not judged:
# (tree, variant) -> why.
EXPECTED_TO_FAIL = {
    ("pr", "longctx"): "0.27.1 with the PR alone sizes the draft's rotary cache by its "
                       "own max_position_embeddings (#57941, fixed in 0.33.0)",
    ("up", "longctx"): "0.28.0 sizes the draft's rotary cache by its own "
                       "max_position_embeddings (#57941, fixed in 0.33.0)",
    ("pr", "prob"): "0.27.1 with the PR alone drafts with verification's Gumbel "
                    "noise (#54282, fixed in 0.29.0)",
    ("up", "prob"): "0.28.0 drafts with verification's Gumbel noise (#54282, fixed in "
                    "0.29.0)",
}
# Twin comparisons, (tree, tree): judged unless the variant is named here.
TWIN_COMPARISONS = {
    ("pr", "up"): {"swa": "0.28.0 carries the prepare-inputs guards (#51538) that the "
                          "PR's speculator inherits without: draft KV of a sliding "
                          "window may land in the null block"},
    ("closure", "new"): {},
    ("up", "closure"): {
        "prob": "the closure salts the draft's noise (#54282), 0.28.0 does not: the "
                "seeded sampled tokens differ",
        "longctx": "the closure raises the draft's max_position_embeddings (#57941), "
                   "0.28.0 does not",
        "swa": "the closure keeps the last block of a prefix-cache hit for a DFlash "
               "draft (#53505), 0.28.0 drops it: the sampled prompt, repeated, is "
               "prefilled from other hits"},
}


# Twin trees whose samplers draw different noise for the same seed: their
# sampled tokens are held to the same distribution, not token for token.
OTHER_NOISE = {
    ("closure", "new"): "0.33.0 and 0.34.0 draw the sampler's noise from a murmur3 hash "
                        "of the seed and position, 0.27.1 to 0.29.0 from Philox: a seed "
                        "gives other tokens, also without a draft",
}


def tree_of(result: dict) -> str:
    """A result's tree; results written before trees were named carry a version."""
    if "tree" in result:
        return result["tree"]
    return "up" if result.get("version") == VERSIONS[1] else "closure"


def outcome(result: dict) -> tuple[str, str]:
    """What became of an engine: completed, refused (a clear error at start),
    crashed (a CUDA fault or a dead process) or failed, with the error's last
    lines."""
    errors = dict(result.get("errors", {}))
    if "error" in result:
        errors["process"] = result["error"]
    if not errors:
        return "completed", "every phase ran"
    text = "\n".join(str(v) for v in errors.values())
    tail = log_tail(text, 3)
    if CUDA_FAULT.search(text) or re.search(r"exit -\d+|signal", text):
        return "crashed", tail
    if "startup" in errors:
        return "refused", tail
    return "failed", tail


# Trees whose target-only runs are the same code: no fix touches a run
# without a draft.
SAME_TARGET = {"closure": "closure", "pr": "closure", "up": "up", "new": "new"}


def base_of(name: str, available) -> tuple[str | None, bool]:
    """The base run a DFlash engine's tokens are held against, and whether its
    target is the same code: the same tree's run, else the closure's (whose
    target may differ from an upstream release's)."""
    config = config_of(name)
    if config["draft"] is None:
        return None, False
    # The base run of a variant shares its prompts and sampled requests.
    variant = config["variant"]
    mode = "eager" if config["eager"] else "graph"
    rest = "_".join(p for p in ("prod" if config["shape"] == "prod" else None, "base",
                                variant, mode,
                                "bf16" if config["dtype"] == "bfloat16" else None) if p)
    for tree in (config["tree"], "closure"):
        if TREES[tree] + rest in available:
            return TREES[tree] + rest, SAME_TARGET[tree] == SAME_TARGET[config["tree"]]
    return None, False


def twins(names) -> list[tuple[str, str, str | None]]:
    """(first, second, why reported) for every pair of twins on compared trees;
    why is None where the comparison is judged."""
    by_tree = {}
    for name in names:
        if name.startswith("tput_") or name == "serve":
            continue
        config = config_of(name)
        rest = name
        if config["tree"] != "closure":
            rest = re.sub(rf"(^|_){TREES[config['tree']]}", r"\1", name, count=1)
        by_tree.setdefault(config["tree"], {})[rest] = (name, config["variant"])
    pairs = []
    for (a, b), reported in TWIN_COMPARISONS.items():
        for rest, (name, variant) in sorted(by_tree.get(a, {}).items()):
            if rest in by_tree.get(b, {}):
                pairs.append((name, by_tree[b][rest][0], reported.get(variant)))
    return pairs


def summarize(results: dict) -> tuple[dict, bool]:
    ok = True
    checks = {}

    def check(key: str, passed: bool, figure: str) -> None:
        nonlocal ok
        ok &= passed
        checks[key] = {"pass": passed, "figure": figure}
        print(f"{'PASS' if passed else 'FAIL'}  {key}: {figure}", flush=True)

    def info(key: str, figure: str) -> None:
        checks[f"{key} (info)"] = {"figure": figure}
        print(f"INFO  {key}: {figure}", flush=True)

    engines = {n: r for n, r in results.items() if n != "serve"}
    known_failure = {n: EXPECTED_TO_FAIL.get((tree_of(r), r.get("variant")))
                     for n, r in engines.items()}
    # A tree known to crash past the draft's positions: its outcome is
    # reported, and nothing else of it judged.
    crash_reported = {n for n, r in engines.items()
                      if known_failure[n] and r.get("variant") == "longctx"}
    for name, r in engines.items():
        if name in crash_reported:
            state, detail = outcome(r)
            info(f"{name}: {state}", f"{detail} (reported, not judged: "
                                     f"{known_failure[name]})")
            if state != "completed":
                continue
        elif "error" in r:
            state, detail = outcome(r)
            check(f"{name}: engine {state}", False, detail)
            continue
        if "model_runners" not in r:
            check(f"{name}: runner and speculator", False, "no introspection result")
        else:
            upstream = tree_of(r) in UPSTREAM_TREES
            v2 = any(m.startswith("vllm.v1.worker.gpu.") for m in r["model_runners"])
            workers = r.get("workers") or [r]
            if r["draft"] == "dflash2":
                expected = {"DFlash2Speculator": 1}
            elif r["draft"] == "dflash1":
                expected = {"DFlashSpeculator": 1}
            else:
                expected = {}
            passed = all(w.get("speculators") == expected for w in workers)
            if r["draft"] or not upstream:
                passed &= v2
            # Ours on 0.27.1; upstream's own on 0.28.0.
            ours = all(m["this_tool"] for m in r["modules"].values())
            theirs = not any(m["this_tool"] for m in r["modules"].values())
            passed &= theirs if upstream else ours
            check(f"{name}: runner and speculator", passed,
                  f"vllm={r.get('vllm_version')} runners={r['model_runners']} "
                  f"use_v2_model_runner={r.get('use_v2_model_runner')} "
                  f"speculators={[w.get('speculators') for w in workers]} "
                  f"draft_calls={r.get('draft_calls')} "
                  f"modules_from_this_tool={ours} startup={r.get('startup_s')}s")
            if r.get("attention"):
                info(f"{name}: attention backend by layer", attention_by_backend(r["attention"]))
            if r.get("samplers"):
                info(f"{name}: top-k/top-p sampler path", r["samplers"])
            for cache in filter(None, r.get("draft_logits") or []):
                # Allocated before the KV cache is sized: what it takes, the
                # KV cache does not get.
                info(f"{name}: draft-logit cache",
                     f"{' x '.join(map(str, cache['shape']))} {cache['dtype']}, "
                     f"{cache['bytes'] / 2**20:.1f} MiB")
        for key, trace in r.get("errors", {}).items():
            check(f"{name}: {key} phase", False, trace.strip().splitlines()[-1])

    prefixes = sorted({_split(n)[0] for n in engines if not n.startswith("tput_")})
    pairs = [("dflash2_eager", "base_eager"), ("dflash1_eager", "base_eager"),
             ("dflash2_graph", "base_graph"), ("dflash2_graph", "base_eager"),
             ("base_graph", "base_eager")]

    def greedy_pair(spec: str, base: str, strict: bool) -> None:
        spec_r, base_r = results.get(spec, {}), results.get(base, {})
        if "greedy" not in spec_r or "greedy" not in base_r:
            return
        # Across graph/eager or in bf16 the target's own numerics differ:
        # reported, not judged.
        greedy_verdict(f"greedy {spec} == {base}", f"greedy {spec} vs {base}",
                       base_r["greedy"], spec_r["greedy"], strict)

    def greedy_verdict(judged: str, reported: str, reference: list, got: list,
                       strict: bool, extra: str = "") -> None:
        g = compare_greedy(reference, got)
        figure = (f"{g['equal_prompts']}/{g['prompts']} prompts identical over "
                  f"{g['tokens']} tokens; diverged={g['diverged'][:8]}{extra}")
        if strict:
            check(judged, g["same_count"] and g["equal_prompts"] == g["prompts"], figure)
        else:
            info(reported, figure)

    def sampled_pair(spec: str, base: str, reported: str | None = None) -> None:
        spec_r, base_r = results.get(spec, {}), results.get(base, {})
        temps = {str(t) for t in TEMPERATURES}
        if not all(temps <= set(x.get("sampled", {})) for x in (spec_r, base_r)):
            return
        report = compare_sampled(base_r["sampled"], spec_r["sampled"])
        worst = min(p["p"] for rows in report.values() for p in rows)
        lines = "; ".join(
            f"T={t}: " + " ".join(f"pos{p['pos']} p={p['p']:.3g} tv={p['tv']:.3f}"
                                  for p in rows)
            for t, rows in report.items())
        key = f"sampled {spec} ~ {base} (chi-square, every p > {P_THRESHOLD})"
        figure = (f"{len(base_r['sampled'][str(TEMPERATURES[0])])} seeded requests per "
                  f"arm and temperature; min p={worst:.3g}; {lines}")
        if reported:
            info(key, f"{'passes' if worst > P_THRESHOLD else 'fails'}: {figure} "
                      f"(reported: {reported})")
            checks[f"{key} (info)"]["detail"] = report
        else:
            check(key, worst > P_THRESHOLD, figure)
            checks[key]["detail"] = report
        check(f"{spec}: seeded run repeats", spec_r.get("seeded_repeat_equal") == 64,
              f"{spec_r.get('seeded_repeat_equal')}/64 requests identical on a "
              "second run")

    for prefix in prefixes:
        # float32, and bfloat16 (_bf16: what FlashAttention takes), alike.
        for suffix in ("", "_bf16"):
            for spec, base in pairs:
                strict = not suffix and not (
                    spec == "base_graph" or (spec, base) == ("dflash2_graph", "base_eager"))
                greedy_pair(prefix + spec + suffix, prefix + base + suffix, strict)
            for spec, base in (("dflash2_eager", "base_eager"),
                               ("dflash2_graph", "base_graph"),
                               ("dflash1_eager", "base_eager")):
                sampled_pair(prefix + spec + suffix, prefix + base + suffix)

            # The test's power: the two temperatures' distributions must differ.
            base = f"{prefix}base_eager{suffix}"
            s = results.get(base, {}).get("sampled", {})
            if len(s) == len(TEMPERATURES):
                t0, t1 = (str(t) for t in TEMPERATURES)
                p, tv, _ = chi_square_homogeneity([r[1] for r in s[t0]],
                                                  [r[1] for r in s[t1]])
                check(f"power: T={t0} vs T={t1} ({base}, pos1) is told apart",
                      p < P_THRESHOLD, f"p={p:.3g} tv={tv:.3f}")

    # The variants: each DFlash2 engine against its base run.
    for name in sorted(n for n, r in engines.items() if r.get("variant") and r.get("draft")):
        base, same_target = base_of(name, results)
        if base is None:
            info(f"{name}: base run", "none among the configurations run")
            continue
        # Judged where the base ran the same target code; a crash a tree is
        # known for is reported above.
        # In bfloat16 a verify step's batch shape changes the target's own
        # rounding, as in the plain pairs above: reported, not judged.
        greedy_pair(name, base, strict=same_target and name not in crash_reported
                    and config_of(name)["dtype"] == "float32")
        sampled_pair(name, base, known_failure[name])

    for name, r in engines.items():
        if name in crash_reported:
            continue
        if r.get("draft") and "error" not in r and r.get("role") != "throughput":
            for phase in ("greedy", *(f"T{t}" for t in TEMPERATURES)):
                if f"counters_{phase}" not in r:
                    continue
                counters = r[f"counters_{phase}"]
                passed = counters.get("num_draft_tokens", 0) > 0
                if r["draft"] == "dflash2" and phase == "greedy":
                    passed &= counters.get("num_accepted_tokens", 0) > 0
                check(f"{name}: counters ({phase})", passed, acceptance(counters))

    # Twins on two trees: the PR's edits alone against 0.28.0, the closure
    # against the newest upstream, 0.28.0 against the closure.
    for first, second, reported in twins(engines):
        a, b = engines[first], engines[second]
        if "error" in a or "error" in b:
            continue
        noise = OTHER_NOISE.get((config_of(first)["tree"], config_of(second)["tree"]))
        report = compare_versions(a, b, (first, second), same_noise=noise is None)
        figure = "; ".join(f"{k}: {v['figure']}" for k, v in report["parts"].items())
        if noise and report["reported"]:
            figure += ("; reported: " + "; ".join(
                f"{k}: {v}" for k, v in report["reported"].items()) + f" ({noise})")
        key = f"{first} == {second}" if noise is None else f"{first} ~ {second}"
        if reported:
            info(key, f"{'identical' if report['identical'] else 'differ'}: "
                      f"{figure or 'nothing to compare'} (reported: {reported})")
            checks[f"{key} (info)"]["detail"] = report
        else:
            check(key, report["identical"], figure or "nothing to compare")
            checks[key]["detail"] = report

    # The sliding-window draft's counters on every tree, side by side.
    for mode in ("graph", "eager"):
        row = {prefix or "closure_": engines[f"{prefix}dflash2_swa_{mode}"]
               for prefix in TREES.values() if f"{prefix}dflash2_swa_{mode}" in engines}
        for phase in ("greedy", *(f"T{t}" for t in TEMPERATURES)):
            seen = {tree[:-1]: r[f"counters_{phase}"] for tree, r in row.items()
                    if f"counters_{phase}" in r}
            if len(seen) > 1:
                info(f"dflash2_swa_{mode} counters ({phase}) by tree",
                     " | ".join(f"{tree}: {acceptance(c)}" for tree, c in seen.items()))

    # Tensor parallel against TP 1: counters side by side, greedy reported.
    for name in sorted(engines):
        match = re.match(r"tp(\d+)_(.*)", name)
        if not match or "error" in engines[name]:
            continue
        tp1 = engines.get(match.group(2), {})
        r = engines[name]
        for phase in ("greedy", *(f"T{t}" for t in TEMPERATURES)):
            a, b = r.get(f"counters_{phase}"), tp1.get(f"counters_{phase}")
            if a is not None and r.get("draft"):
                info(f"{name} counters ({phase}) beside TP 1",
                     f"TP {match.group(1)}: {acceptance(a)} | TP 1: "
                     f"{acceptance(b) if b is not None else 'not run'}")
        if "greedy" in r and "greedy" in tp1:
            g = compare_greedy(tp1["greedy"], r["greedy"])
            info(f"greedy {name} vs {match.group(2)}",
                 f"{g['equal_prompts']}/{g['prompts']} prompts identical; "
                 f"diverged={g['diverged'][:6]}")

    if "serve" in results:
        r = results["serve"]
        if "error" in r:
            check("serve", False, r["error"])
        else:
            for key, trace in r.get("errors", {}).items():
                check(f"serve: {key}", False, trace.strip().splitlines()[-1])
            if "greedy" in r:
                # The offline engine of the server's own dtype; in bfloat16 the
                # target alone is reported beside it, as the offline pairs are.
                bf16 = r.get("dtype") == "bfloat16"
                suffix = "_bf16" if bf16 else ""
                for reference, strict in ((f"dflash2_eager{suffix}", True),
                                          (f"base_eager{suffix}", not bf16)):
                    if "greedy" not in results.get(reference, {}):
                        info(f"serve greedy == offline {reference}", "offline run missing")
                        continue
                    greedy_verdict(
                        f"serve greedy == offline {reference}",
                        f"serve greedy vs offline {reference}",
                        results[reference]["greedy"], r["greedy"], strict,
                        f"; healthy after {r.get('healthy_after_s')} s; "
                        f"{r.get('requests', 'one request per prompt')}")
                counters = r.get("counters_greedy", {})
                check("serve: /metrics spec-decode counters move",
                      counters.get("num_drafts", 0) > 0
                      and counters.get("num_accepted_tokens", 0) > 0,
                      acceptance(counters))

    table = throughput_table(results)
    if table is not None:
        print("THROUGHPUT  prod shape (hidden 2048, vocab 151936), bfloat16, CUDA graphs, "
              f"{BENCH_BATCH} greedy requests x {BENCH_PROMPT} prompt + {BENCH_TOKENS} "
              f"output tokens, each engine alone, median of {BENCH_REPEATS}", flush=True)
        print(f"  {'version':8} {'engine':8} {'median tok/s':>12}  runs", flush=True)
        speedups = {}
        for version, row in table.items():
            for kind, t in row.items():
                if t is None:
                    print(f"  {version:8} {kind:8} {'missing':>12}", flush=True)
                    continue
                runs = " ".join(f"{v:.0f}" for v in t["tokens_per_s"])
                extra = f"  {acceptance(t['counters'])}" if kind == "dflash2" else ""
                print(f"  {version:8} {kind:8} {t['median']:12.0f}  [{runs}]{extra}",
                      flush=True)
            if row.get("base") and row.get("dflash2"):
                speedups[version] = row["dflash2"]["median"] / row["base"]["median"]
                print(f"  {version:8} DFlash2 speedup over no speculation: "
                      f"{speedups[version]:.3f}x", flush=True)
        checks["throughput table (info)"] = {"figure": table, "speedups": speedups}
        if len(speedups) == 2:
            ours, theirs = speedups[VERSIONS[0]], speedups[VERSIONS[1]]
            plain = {kind: table[VERSIONS[0]][kind]["median"] / table[VERSIONS[1]][kind]["median"]
                     for kind in ("base", "dflash2")}
            check(f"throughput: 0.27.1 DFlash2 speedup >= {SPEEDUP_GOAL} x 0.28.0's",
                  ours >= SPEEDUP_GOAL * theirs,
                  f"0.27.1 {ours:.3f}x vs 0.28.0 {theirs:.3f}x: ratio {ours / theirs:.3f}; "
                  f"plain tok/s ratio 0.27.1/0.28.0: DFlash2 {plain['dflash2']:.3f}, "
                  f"no speculation {plain['base']:.3f}")
        else:
            check("throughput: 0.27.1 DFlash2 speedup vs 0.28.0's", False,
                  f"speedups measured: {speedups}")
        ours_tokens = results.get("tput_dflash2", {}).get("bench_tokens")
        theirs_tokens = results.get("tput_up_dflash2", {}).get("bench_tokens")
        if ours_tokens and theirs_tokens:
            g = compare_greedy(theirs_tokens, ours_tokens)
            info("throughput batch: 0.27.1 DFlash2 tokens vs 0.28.0 DFlash2",
                 f"{g['equal_prompts']}/{g['prompts']} requests identical (bfloat16)")
    return checks, ok


# --------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------

def flashinfer_workspace(python: str | None, fallback: Path) -> str:
    """Where an engine's FlashInfer builds and finds its JIT kernels: a venv
    made by real_install_venv.sh has them built ahead in VENV/flashinfer;
    elsewhere one workspace in the run per tree or version (`fallback`)."""
    if python:
        own = Path(python).parent.parent / "flashinfer"
        if own.is_dir():
            return str(own)
    return str(fallback)


def _engine_env(base_env: dict, tree: str, trees: dict, site: str, out: Path,
                name: str, python: str | None = None) -> dict:
    """The environment of one engine: its tree first, then the wheels; a
    tree that needs wheels of its own (the newest upstream's) names its whole
    path in TREE/.pythonpath, which setup_device.sh writes."""
    own = set(trees.values()) | {site}
    rest = [p for p in base_env.get("PYTHONPATH", "").split(":") if p and p not in own]
    listed = Path(trees[tree]) / ".pythonpath"
    first = (listed.read_text().strip().split(":") if listed.is_file()
             else [trees[tree], site])
    rest = [p for p in rest if p not in first]
    env = dict(base_env, PYTHONPATH=":".join([*first, *rest]),
               VLLM_CACHE_ROOT=str(out / "vllm-cache" / name))
    # FlashInfer builds its kernels into one directory per user, with the
    # venv's torch paths in the build file: two venvs sharing it rebuild
    # each other's kernels at every start. One per tree, shared by its engines.
    env.setdefault("FLASHINFER_WORKSPACE_BASE",
                   flashinfer_workspace(python, out / "flashinfer" / tree))
    env.update(NO_MULTICAST)
    return env


def log_tail(text: str, lines: int = 4) -> str:
    """The last lines of a log that say something: a traceback's frames and
    code lines are indented, its exception and the engine's log lines not."""
    kept = [line.strip() for line in text.splitlines()
            if line.strip() and not line[:1].isspace()]
    return " | ".join(kept[-lines:])


def newest_version(tree: str) -> str | None:
    """The version in the METADATA beside a tree's vllm/, None without one."""
    for metadata in sorted(Path(tree).glob("vllm-*.dist-info/METADATA")):
        for line in metadata.read_text(errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def _launch(out: Path, name: str, env: dict, extra: list[str],
            python: str = sys.executable):
    """Start `driver.py EXTRA` in `python`: this interpreter, or the one of
    a venv that has its tree's vLLM installed (--python-0271, --python-0280)."""
    log = open(out / f"{name}.log", "w")
    command = [python, __file__, *extra]
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log


def _collect(out: Path, procs: dict, deadline: float, results: dict) -> None:
    for name, (proc, log) in procs.items():
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        path = out / f"{name}.json"
        if path.exists():
            results[name] = json.loads(path.read_text())
            if proc.returncode != 0:
                tail = (out / f"{name}.log").read_text(errors="replace")[-3000:]
                results[name].setdefault("errors", {})["process"] = (
                    f"exit {proc.returncode}; the phases above it were saved; "
                    + log_tail(tail))
        else:
            tail = (out / f"{name}.log").read_text(errors="replace")[-3000:]
            config = {} if name == "serve" else config_of(name)
            results[name] = {"error": f"exit {proc.returncode}: " + log_tail(tail),
                             **{k: config.get(k) for k in ("draft", "tree", "variant")}}
            print(f"---- {name} failed (exit {proc.returncode}); log tail:\n{tail}\n----",
                  flush=True)


def run_all(args) -> int:
    if args.closure_release:
        # The engines this starts read it when they import this module.
        os.environ["DRIVER_CLOSURE_RELEASE"] = args.closure_release
        TREE_VERSIONS.update(closure=args.closure_release,
                             pr=f"{args.closure_release} --only-pr")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    phases = [p for p in args.phases.split(",") if p]
    names = config_names(args.configs)
    if args.tp:
        names += [f"tp{args.tp}_{n}" for n in TP_CONFIGS]
    trees = {"closure": args.tree_0271, "pr": args.tree_0271pr, "up": args.tree_0280,
             "new": args.tree_new}
    newest = newest_version(args.tree_new)
    if newest:
        TREE_VERSIONS["new"] = newest
        print(f"newest upstream tree: {args.tree_new} (vLLM {newest})", flush=True)
    else:
        dropped = [n for n in names if config_of(n)["tree"] == "new"]
        names = [n for n in names if n not in dropped]
        if dropped:
            print(f"INFO  no vllm-*.dist-info/METADATA under {args.tree_new}: not run: "
                  f"{dropped}", flush=True)
    # A venv's interpreter per tree (the tree's folder then holds no vLLM of its own).
    pythons = {"closure": args.python_0271, "up": args.python_0280}
    pythons = {tree: python for tree, python in pythons.items() if python}
    if args.attention_backend is not None:
        os.environ["DRIVER_ATTENTION_BACKEND"] = args.attention_backend
    base_env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0",
                    HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    if not args.default_sampler:
        # The bundle's trees come without FlashInfer: the PyTorch sampler.
        base_env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    base_env.update(NO_MULTICAST)
    started = time.time()

    models_path = out / "models.json"
    models = json.loads(models_path.read_text()) if models_path.exists() else {}

    def ensure(shape):
        if shape not in models or not Path(models[shape]["prompts"]).exists():
            t = time.time()
            models[shape] = write_models(out / "models", shape)
            models_path.write_text(json.dumps(models))
            print(f"wrote the {shape} checkpoints in {time.time() - t:.1f} s", flush=True)

    results = {}
    if args.reuse:
        for path in sorted(out.glob("*.json")):
            if path.stem in ("summary", "models"):
                continue
            try:
                config_of(path.stem) if path.stem != "serve" else None
            except ValueError:
                continue
            results[path.stem] = json.loads(path.read_text())
        if results:
            print(f"reusing earlier results: {sorted(results)}", flush=True)

    def engine_args(name):
        return ["engine", "--name", name, "--models", str(models_path),
                "--result", str(out / f"{name}.json")]

    procs = {}
    if "check" in phases or "serve" in phases:
        ensure("tiny")
    # (name, tree, the process's arguments) in launch order; a tree named by
    # --ready waits for its file.
    launches = []
    if "serve" in phases:
        launches.append(("serve", "closure", lambda: [
            "serve-check", "--models", str(models_path), "--result",
            str(out / "serve.json"), "--port", str(args.port),
            "--timeout", str(round(started + args.timeout - time.time())),
            "--dtype", args.serve_dtype]))
    if "check" in phases:
        for name in sorted(names, key=lambda n: config_of(n)["shape"] != "tiny"):
            ensure(config_of(name)["shape"])
            launches.append((name, config_of(name)["tree"],
                             lambda name=name: engine_args(name)))
    waits = ready_files(args.ready)
    for tree, path in sorted(waits.items()):
        print(f"{tree} engines start once {path} exists", flush=True)
    seen_ready = set()
    while launches:
        for item in list(launches):
            name, tree, arguments = item
            if tree in waits and not waits[tree].exists():
                continue
            if tree in waits and tree not in seen_ready:
                seen_ready.add(tree)
                print(f"{tree}: {waits[tree]} is there after "
                      f"{time.time() - started:.0f} s", flush=True)
            env = _engine_env(base_env, tree, trees, args.site, out, name,
                              pythons.get(tree))
            procs[name] = _launch(out, name, env, arguments(),
                                  pythons.get(tree, sys.executable))
            launches.remove(item)
            time.sleep(1)
        if not launches or time.time() > started + args.timeout - 60:
            break
        time.sleep(2)
    for name, tree, _ in launches:
        results[name] = {"error": f"not started: {waits[tree]} did not appear within "
                                  f"{args.timeout - 60:.0f} s",
                         **({} if name == "serve" else {
                             k: config_of(name).get(k) for k in ("draft", "tree", "variant")})}
        print(f"---- {name} not started: {waits[tree]} never appeared", flush=True)
    if procs:
        _collect(out, procs, started + args.timeout, results)
    checks, ok = summarize(results)
    _write_summary(out, ok, checks, results)

    if "throughput" in phases:
        ensure("prod")
        # One at a time, so that each has the GPU alone.
        for name in [n for n in args.throughput_configs.split(",") if n]:
            config = config_of(name)
            env = _engine_env(base_env, config["tree"], trees, args.site, out, name,
                              pythons.get(config["tree"]))
            t = time.time()
            proc = _launch(out, name, env, engine_args(name),
                           pythons.get(config["tree"], sys.executable))
            _collect(out, {name: proc}, time.time() + args.engine_timeout, results)
            print(f"[{name}] finished in {time.time() - t:.0f} s", flush=True)
        print("---- summary with the throughput phase ----", flush=True)
        checks, ok = summarize(results)
        _write_summary(out, ok, checks, results)
    print(f"whole run: {time.time() - started:.0f} s", flush=True)
    print("ALL CHECKS PASSED" if ok else "SOME CHECKS FAILED", flush=True)
    return 0 if ok else 1


def ready_files(specs: list[str]) -> dict[str, Path]:
    """--ready TREE=FILE, each at most once per tree."""
    waits = {}
    for spec in specs:
        tree, sep, path = spec.partition("=")
        if not sep or not path or tree not in TREES or tree in waits:
            raise ValueError(f"--ready {spec}: TREE=FILE, TREE one of {sorted(TREES)}, "
                             "each tree once")
        waits[tree] = Path(path)
    return waits


def config_names(spec: str) -> list[str]:
    """Configuration names from --configs: names and presets, each once."""
    names = []
    for item in (n for n in spec.split(",") if n):
        for name in PRESETS.get(item, [item]):
            if name not in names:
                names.append(name)
    return names


def _write_summary(out: Path, ok: bool, checks: dict, results: dict) -> None:
    (out / "summary.json").write_text(json.dumps(
        {"ok": ok, "checks": checks,
         "startup_s": {k: v.get("startup_s") for k, v in results.items()}},
        indent=1, default=str))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="write the models, run the phases, compare")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--phases", default="check,serve,throughput",
                     help="comma-separated subset of check, serve, throughput")
    run.add_argument("--configs", default="default",
                     help="the check phase's configurations (see config_of), or a "
                          f"preset among {sorted(PRESETS)}, or both, comma-separated; "
                          "empty for none")
    run.add_argument("--tp", type=int, default=0,
                     help="also run the check configurations at this tensor-parallel "
                          "size, through the multiprocess executor (1 runs that path "
                          "on one GPU)")
    run.add_argument("--reuse", action="store_true",
                     help="compare against the results already in --out too")
    run.add_argument("--timeout", type=float, default=480.0,
                     help="seconds the check and serve engines may take together")
    run.add_argument("--engine-timeout", type=float, default=240.0,
                     help="seconds each throughput engine may take")
    run.add_argument("--throughput-configs", default=",".join(THROUGHPUT_CONFIGS),
                     help="the throughput engines, run in this order (a subset "
                          "splits the phase over several runs; --reuse joins them)")
    run.add_argument("--port", type=int, default=8431)
    run.add_argument("--tree-0271", default="/tmp/vt")
    run.add_argument("--tree-0280", default="/tmp/vt28")
    run.add_argument("--tree-0271pr", default="/tmp/vtpr",
                     help="0.27.1 patched by apply --only-pr (pr_ configurations)")
    run.add_argument("--tree-new", default="/tmp/vtnew",
                     help="the newest upstream release (new_ configurations)")
    run.add_argument("--site", default="/tmp/site")
    run.add_argument("--python-0271", help="run the 0.27.1 engines (no prefix) in this "
                     "interpreter, a venv with 0.27.1 installed and patched, instead of "
                     "--tree-0271 on PYTHONPATH")
    run.add_argument("--python-0280", help="the same for the up_ engines (0.28.0)")
    run.add_argument("--serve-dtype", default="float32", choices=("float32", "bfloat16"),
                     help="the served model's dtype (FlashAttention takes bfloat16); "
                          "its greedy tokens are held to the offline engine of that dtype")
    run.add_argument("--ready", action="append", default=[], metavar="TREE=FILE",
                     help="start TREE's engines (closure, pr, up, new; the server "
                          "runs on closure) only once FILE exists: an install still "
                          "running when the run starts")
    run.add_argument("--attention-backend", help="every engine's attention backend "
                     "(default TRITON_ATTN); 'auto' leaves it to vLLM")
    run.add_argument("--default-sampler", action="store_true",
                     help="leave VLLM_USE_FLASHINFER_SAMPLER to vLLM (on CUDA its default "
                          "is FlashInfer's sampler, which a venv made by pip has); "
                          "otherwise every engine runs the PyTorch sampler")
    run.add_argument("--closure-release", help="the release the closure tree (and pr_) "
                     "holds, where --python-0271 names another release's venv the tool "
                     "patched (0.26.0); default 0.27.1")
    runs = sub.add_parser("compare-runs", help="hold two runs' engines to each other")
    runs.add_argument("first", type=Path)
    runs.add_argument("second", type=Path)
    models = sub.add_parser("models", help="only write the checkpoints")
    models.add_argument("--out", type=Path, required=True)
    models.add_argument("--shapes", default="tiny")
    plan = sub.add_parser("plan", help="write the tiny checkpoints and print each "
                                       "configuration's engine arguments (no vLLM)")
    plan.add_argument("--out", type=Path, required=True)
    plan.add_argument("--configs", default="default")
    engine = sub.add_parser("engine", help=argparse.SUPPRESS)
    engine.add_argument("--name", required=True)
    engine.add_argument("--models", type=Path, required=True)
    engine.add_argument("--result", type=Path, required=True)
    serve = sub.add_parser("serve-check", help=argparse.SUPPRESS)
    serve.add_argument("--models", type=Path, required=True)
    serve.add_argument("--result", type=Path, required=True)
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--timeout", type=float, required=True)
    serve.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    if args.command == "compare-runs":
        identical, lines = compare_runs(args.first, args.second)
        print("\n".join(lines))
        return 0 if identical else 1
    if args.command == "models":
        print(json.dumps({shape: write_models(args.out, shape)
                          for shape in args.shapes.split(",")}, indent=1))
        return 0
    if args.command == "plan":
        names = config_names(args.configs)
        shapes = {config_of(n)["shape"] for n in names}
        models = {shape: write_models(args.out, shape) for shape in sorted(shapes)}
        print(json.dumps({n: engine_kwargs(config_of(n), models[config_of(n)["shape"]])
                          for n in names}, indent=1))
        return 0
    if args.command == "engine":
        run_engine(args.name, json.loads(args.models.read_text()), args.result)
        return 0
    if args.command == "serve-check":
        run_serve(json.loads(args.models.read_text()), args.result, args.port,
                  args.timeout - 30, args.dtype)
        return 0
    names = config_names(args.configs)
    for name in names + [n for n in args.throughput_configs.split(",") if n]:
        try:
            config_of(name)
        except ValueError as exc:
            parser.error(str(exc))
    try:
        ready_files(args.ready)
    except ValueError as exc:
        parser.error(str(exc))
    unknown = set(args.phases.split(",")) - {"check", "serve", "throughput", ""}
    if unknown:
        parser.error(f"unknown phases: {sorted(unknown)}")
    return run_all(args)


if __name__ == "__main__":
    sys.exit(main())
