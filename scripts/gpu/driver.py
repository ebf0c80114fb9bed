"""End-to-end DFlash2 check of the patched vLLM 0.27.1 engine on a CUDA GPU.

    python3 scripts/gpu/driver.py run --out DIR [--configs a,b,...]
    python3 scripts/gpu/driver.py models --out DIR        # only write the models

`run` writes three tiny random checkpoints (safetensors, the upstream layout)
- a Qwen3 target, a DFlash2 draft and a DFlash1 draft - then starts one
engine per configuration, each in its own process (all at once, they share
the GPU), and compares what they generated:

  1. the engine runs on the V2 model runner and builds exactly one
     DFlash2Speculator for the DFlash2 draft, a DFlashSpeculator (and no
     DFlash2Speculator) for the DFlash1 draft;
  2. greedy: the tokens with speculation equal those without, per prompt;
  3. sampled (temperature 0.7 and 1.3, one seed per request): the runs
     complete, a seeded run repeats itself, and the distribution of the
     sampled tokens at each position with speculation matches the one without
     (chi-square test of homogeneity, pass when every p-value > 0.001);
  4. the speculative-decoding counters (drafts, draft tokens, accepted);
  5. 2-4 again with CUDA graphs (no enforce_eager).

Needs the patched vLLM tree on PYTHONPATH (scripts/gpu/setup_device.sh);
`models` needs only numpy. Exit status 0 when every check passes; DIR gets
summary.json and one log per engine.

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
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

VOCAB = 1024
HIDDEN = 256
INTERMEDIATE = 512
TARGET_LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
DRAFT_LAYERS = 1
BLOCK_SIZE = 4
NUM_SPEC = BLOCK_SIZE - 1
MASK_TOKEN = 1000
TOP_K = 4
RANK = 8
TAPS = 3
GROUP = 16
CYCLE = [100, 101, 102, 103]
BETA = 8.0     # logit of a cycle token's successor
GAMMA = 1.0    # spread of every other logit
RESIDUAL = 0.3  # scale of each sublayer's output against the unit-RMS stream
SELECTOR_GAIN = 20.0

GREEDY_PROMPTS = 24
GREEDY_TOKENS = 64
TEMPERATURES = (0.7, 1.3)
SAMPLED_REQUESTS = 2000
SAMPLED_TOKENS = 6
P_THRESHOLD = 1e-3

# name: (draft, enforce_eager, dtype)
CONFIGS = {
    "base_eager": (None, True, "float32"),
    "dflash2_eager": ("dflash2", True, "float32"),
    "dflash1_eager": ("dflash1", True, "float32"),
    "base_graph": (None, False, "float32"),
    "dflash2_graph": ("dflash2", False, "float32"),
    "base_eager_bf16": (None, True, "bfloat16"),
    "dflash2_eager_bf16": ("dflash2", True, "bfloat16"),
}


# --------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------

def save_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Write float32 tensors in the safetensors format (no library needed)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        for data in blobs:
            handle.write(data)


def read_safetensors_header(path: Path) -> dict:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length))


def _config_common() -> dict:
    return {
        "model_type": "qwen3",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def target_config() -> dict:
    return {**_config_common(), "architectures": ["Qwen3ForCausalLM"],
            "num_hidden_layers": TARGET_LAYERS}


def draft_config(kind: str) -> dict:
    dflash = {"mask_token_id": MASK_TOKEN, "target_layer_ids": [0, 1]}
    config = {**_config_common(), "num_hidden_layers": DRAFT_LAYERS,
              "block_size": BLOCK_SIZE}
    if kind == "dflash2":
        dflash.update(selector_top_k=TOP_K, selector_rank=RANK,
                      conv_kernel_size=TAPS, conv_group_size=GROUP)
        config.update(architectures=["DFlash2DraftModel"], is_causal=False)
    else:
        config.update(architectures=["DFlashDraftModel"])
    config["dflash_config"] = dflash
    return config


class _Weights:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def normal(self, shape, std) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def ones(self, n: int) -> np.ndarray:
        return (1.0 + self.rng.standard_normal(n) * 0.02).astype(np.float32)


def _decoder_layer(w: _Weights, prefix: str) -> dict[str, np.ndarray]:
    """One Qwen3 decoder layer, HF names; sublayer outputs at RESIDUAL scale."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    return {
        f"{prefix}self_attn.q_proj.weight": w.normal((q, HIDDEN), HIDDEN ** -0.5),
        f"{prefix}self_attn.k_proj.weight": w.normal((kv, HIDDEN), HIDDEN ** -0.5),
        f"{prefix}self_attn.v_proj.weight": w.normal((kv, HIDDEN), HIDDEN ** -0.5),
        f"{prefix}self_attn.o_proj.weight": w.normal((HIDDEN, q), RESIDUAL * q ** -0.5),
        f"{prefix}self_attn.q_norm.weight": w.ones(HEAD_DIM),
        f"{prefix}self_attn.k_norm.weight": w.ones(HEAD_DIM),
        f"{prefix}mlp.gate_proj.weight": w.normal((INTERMEDIATE, HIDDEN), HIDDEN ** -0.5),
        f"{prefix}mlp.up_proj.weight": w.normal((INTERMEDIATE, HIDDEN), HIDDEN ** -0.5),
        f"{prefix}mlp.down_proj.weight": w.normal(
            (HIDDEN, INTERMEDIATE), RESIDUAL * INTERMEDIATE ** -0.5),
        f"{prefix}input_layernorm.weight": w.ones(HIDDEN),
        f"{prefix}post_attention_layernorm.weight": w.ones(HIDDEN),
    }


def target_weights(seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    w = _Weights(seed)
    embed = w.normal((VOCAB, HIDDEN), 1.0)
    unit = embed / np.linalg.norm(embed, axis=1, keepdims=True)
    # The mask token's embedding points at the four cycle tokens at once.
    mask_dir = unit[CYCLE].sum(0)
    mask_dir /= np.linalg.norm(mask_dir)
    embed[MASK_TOKEN] = mask_dir * np.sqrt(HIDDEN)
    lm_head = w.normal((VOCAB, HIDDEN), GAMMA * HIDDEN ** -0.5)
    # Other tokens score ~0 at the draft's mask slots ...
    lm_head -= np.outer(lm_head @ mask_dir, mask_dir)
    # ... and each cycle token's successor scores ~BETA after it.
    for i, token in enumerate(CYCLE):
        lm_head[CYCLE[(i + 1) % len(CYCLE)]] = BETA * HIDDEN ** -0.5 * unit[token]
    tensors = {"model.embed_tokens.weight": embed, "lm_head.weight": lm_head,
               "model.norm.weight": w.ones(HIDDEN)}
    for layer in range(TARGET_LAYERS):
        tensors.update(_decoder_layer(w, f"model.layers.{layer}."))
    return tensors, mask_dir


def draft_weights(kind: str, mask_dir: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Upstream layout: no `model.` prefix, no embed_tokens or lm_head (shared)."""
    w = _Weights(seed)
    tensors = {
        "fc.weight": w.normal((HIDDEN, 2 * HIDDEN), (2 * HIDDEN) ** -0.5),
        "hidden_norm.weight": w.ones(HIDDEN),
        "norm.weight": w.ones(HIDDEN),
    }
    for layer in range(DRAFT_LAYERS):
        prefix = f"layers.{layer}."
        tensors.update(_decoder_layer(w, prefix))
        if kind != "dflash2":
            continue
        groups = HIDDEN // GROUP
        for conv in ("attention_conv", "mlp_conv"):
            base = w.normal((2, TAPS, HIDDEN), 0.05)
            base[:, 0] += 1.0  # tap 0 (the slot itself) near identity
            tensors[f"{prefix}{conv}.base_kernel"] = base
            tensors[f"{prefix}{conv}.kernel_projection.weight"] = w.normal(
                (2 * TAPS * groups, HIDDEN), 0.05 * HIDDEN ** -0.5)
    if kind == "dflash2":
        predecessor = w.normal((VOCAB, RANK), 0.1)
        successor = w.normal((VOCAB, RANK), 0.1)
        for i, token in enumerate(CYCLE):
            predecessor[token] = 0.0
            predecessor[token, i] = SELECTOR_GAIN
            successor[CYCLE[(i + 1) % len(CYCLE)]] = 0.0
            successor[CYCLE[(i + 1) % len(CYCLE)], i] = 1.0
        # The projected hidden state is ~1 in every rank at a mask slot.
        projection = np.tile(mask_dir / np.sqrt(HIDDEN), (RANK, 1)).astype(np.float32)
        projection += w.normal(projection.shape, 0.01 * HIDDEN ** -0.5)
        tensors.update({
            "candidate_selector.predecessor_codebook": predecessor,
            "candidate_selector.successor_codebook": successor,
            "candidate_selector.hidden_projection.weight": projection,
        })
    return tensors


def prompts(seed: int) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    pool = np.array([t for t in range(3, VOCAB) if t not in CYCLE and t != MASK_TOKEN])
    lengths = np.linspace(3, 120, GREEDY_PROMPTS).astype(int)
    greedy = []
    for i, length in enumerate(lengths):
        tokens = rng.choice(pool, size=int(length)).tolist()
        if i % 2 == 0:  # half end on a cycle token: drafts there are accepted
            tokens[-1] = CYCLE[i // 2 % len(CYCLE)]
        greedy.append(tokens)
    sampled = rng.choice(pool, size=12).tolist()
    sampled[-1] = CYCLE[0]
    return {"greedy": greedy, "sampled": sampled}


def write_models(out: Path, seed: int = 0) -> dict[str, str]:
    paths = {}
    target, mask_dir = target_weights(seed)
    models = {"target": (target_config(), target)}
    for kind, offset in (("dflash2", 1), ("dflash1", 2)):
        models[kind] = (draft_config(kind), draft_weights(kind, mask_dir, seed + offset))
    for name, (config, tensors) in models.items():
        directory = out / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config, indent=1))
        save_safetensors(directory / "model.safetensors", tensors)
        paths[name] = str(directory)
    (out / "prompts.json").write_text(json.dumps(prompts(seed)))
    paths["prompts"] = str(out / "prompts.json")
    return paths


# --------------------------------------------------------------------------
# One engine (runs in its own process)
# --------------------------------------------------------------------------

def _spec_counters(llm) -> dict:
    found = {}
    for metric in llm.get_metrics():
        if not metric.name.startswith("vllm:spec_decode"):
            continue
        name = metric.name.removeprefix("vllm:spec_decode_")
        if hasattr(metric, "values"):
            found[name] = [float(v) for v in metric.values]
        else:
            found[name] = float(metric.value)
    return found


def _delta(after: dict, before: dict) -> dict:
    out = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, list):
            old = old or [0.0] * len(value)
            out[key] = [a - b for a, b in zip(value, old)]
        else:
            out[key] = value - (old or 0.0)
    return out


def _introspect() -> dict:
    import gc

    from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
    from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator

    # The engine freezes its start-up heap (gc.freeze), which hides it from
    # gc.get_objects; unfreezing only lets the collector see it again.
    gc.unfreeze()
    speculators, runners = {}, set()
    for obj in gc.get_objects():
        if isinstance(obj, DFlashSpeculator):
            name = type(obj).__name__
            speculators[name] = speculators.get(name, 0) + 1
        elif type(obj).__name__ == "GPUModelRunner":
            runners.add(type(obj).__module__)
    import inspect

    from vllm.model_executor.models import qwen3_dflash2

    modules = {}
    for module in (qwen3_dflash2, inspect.getmodule(DFlash2Speculator)):
        path = Path(inspect.getsourcefile(module))
        header = path.read_text().splitlines()[:4]
        modules[module.__name__] = {
            "file": str(path),
            "this_tool": any("dflash2-backport" in line for line in header)}
    return {
        "modules": modules,
        "speculators": speculators,
        "dflash2_instances": sum(
            isinstance(o, DFlash2Speculator) for o in gc.get_objects()
            if isinstance(o, DFlashSpeculator)),
        "model_runners": sorted(runners),
    }


def run_engine(name: str, models: dict, result_path: Path) -> None:
    draft, eager, dtype = CONFIGS[name]
    calls = {"DFlash2Speculator._generate_draft": 0, "DFlashSpeculator._generate_draft": 0}

    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash1_module
    from vllm.v1.worker.gpu.spec_decode.dflash2 import speculator as dflash2_module

    def counted(cls, key):
        original = cls._generate_draft

        def wrapper(self, *args, **kwargs):
            calls[key] += 1
            return original(self, *args, **kwargs)

        cls._generate_draft = wrapper

    counted(dflash1_module.DFlashSpeculator, "DFlashSpeculator._generate_draft")
    counted(dflash2_module.DFlash2Speculator, "DFlash2Speculator._generate_draft")

    from vllm import LLM, SamplingParams

    kwargs = dict(
        model=models["target"], dtype=dtype, skip_tokenizer_init=True, seed=0,
        max_model_len=512, max_num_seqs=128, gpu_memory_utilization=0.1,
        kv_cache_memory_bytes=2 << 30, enforce_eager=eager, disable_log_stats=False,
        attention_config={"backend": "TRITON_ATTN"},
    )
    if draft is not None:
        kwargs["speculative_config"] = {
            "method": "dflash", "model": models[draft],
            "num_speculative_tokens": NUM_SPEC, "attention_backend": "TRITON_ATTN",
        }
    result = {"config": name, "draft": draft, "enforce_eager": eager, "dtype": dtype}
    started = time.time()
    llm = LLM(**kwargs)
    result["startup_s"] = round(time.time() - started, 1)
    result.update(_introspect())
    result["use_v2_model_runner"] = bool(
        getattr(llm.llm_engine.vllm_config, "use_v2_model_runner", False))
    data = json.loads(Path(models["prompts"]).read_text())

    def generate(prompt_list, params):
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompt_list],
                               params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outputs]

    result["errors"] = {}

    def phase(key, body):
        """Run one phase; keep what the others found if it raises."""
        try:
            body()
        except Exception:  # noqa: BLE001 - reported in the summary
            import traceback

            result["errors"][key] = traceback.format_exc()[-2000:]
            print(result["errors"][key], flush=True)
        result["draft_calls"] = dict(calls)
        result_path.write_text(json.dumps(result))

    state = {"counters": _spec_counters(llm)}

    def greedy_phase():
        started = time.time()
        params = SamplingParams(temperature=0.0, max_tokens=GREEDY_TOKENS,
                                ignore_eos=True, detokenize=False)
        result["greedy"] = generate(data["greedy"], params)
        result["greedy_s"] = round(time.time() - started, 2)
        after = _spec_counters(llm)
        result["counters_greedy"] = _delta(after, state["counters"])
        state["counters"] = after

    def sampled_phase(temperature):
        params = [SamplingParams(temperature=temperature, seed=seed,
                                 max_tokens=SAMPLED_TOKENS, ignore_eos=True,
                                 detokenize=False)
                  for seed in range(SAMPLED_REQUESTS)]
        result.setdefault("sampled", {})[str(temperature)] = generate(
            [data["sampled"]] * SAMPLED_REQUESTS, params)
        after = _spec_counters(llm)
        result[f"counters_T{temperature}"] = _delta(after, state["counters"])
        state["counters"] = after

    def repeat_phase():
        # A seeded run repeats itself (in a different batch).
        params = [SamplingParams(temperature=TEMPERATURES[-1], seed=seed,
                                 max_tokens=SAMPLED_TOKENS, ignore_eos=True,
                                 detokenize=False)
                  for seed in range(64)]
        again = generate([data["sampled"]] * 64, params)
        first = result["sampled"][str(TEMPERATURES[-1])][:64]
        result["seeded_repeat_equal"] = sum(a == b for a, b in zip(again, first))

    phase("greedy", greedy_phase)
    for temperature in TEMPERATURES:
        phase(f"T{temperature}", lambda t=temperature: sampled_phase(t))
    phase("repeat", repeat_phase)
    print(f"[{name}] done", flush=True)


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
            "tokens": tokens, "diverged": diverged}


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


def summarize(results: dict) -> tuple[dict, bool]:
    ok = True
    checks = {}

    def check(key: str, passed: bool, figure: str) -> None:
        nonlocal ok
        ok &= passed
        checks[key] = {"pass": passed, "figure": figure}
        print(f"{'PASS' if passed else 'FAIL'}  {key}: {figure}", flush=True)

    for name in CONFIGS:
        if name not in results:
            continue
        r = results[name]
        if "error" in r:
            check(f"{name}: engine", False, r["error"])
            continue
        v2 = "vllm.v1.worker.gpu.model_runner" in r["model_runners"]
        if r["draft"] == "dflash2":
            passed = v2 and r["speculators"] == {"DFlash2Speculator": 1}
        elif r["draft"] == "dflash1":
            passed = v2 and r["speculators"] == {"DFlashSpeculator": 1}
        else:
            passed = v2 and not r["speculators"]
        ours = all(m["this_tool"] for m in r["modules"].values())
        passed &= ours
        check(f"{name}: runner and speculator", passed,
              f"runners={r['model_runners']} use_v2_model_runner={r['use_v2_model_runner']} "
              f"speculators={r['speculators']} draft_calls={r.get('draft_calls')} "
              f"modules_from_this_tool={ours} "
              f"startup={r['startup_s']}s")
        for key, trace in r.get("errors", {}).items():
            check(f"{name}: {key} phase", False, trace.strip().splitlines()[-1])

    pairs = [("dflash2_eager", "base_eager"), ("dflash1_eager", "base_eager"),
             ("dflash2_graph", "base_graph"), ("dflash2_graph", "base_eager"),
             ("base_graph", "base_eager"), ("dflash2_eager_bf16", "base_eager_bf16")]
    for spec, base in pairs:
        if spec not in results or base not in results:
            continue
        if "greedy" not in results[spec] or "greedy" not in results[base]:
            continue
        g = compare_greedy(results[base]["greedy"], results[spec]["greedy"])
        strict = not spec.endswith("bf16") and not (
            spec == "base_graph" or (spec, base) == ("dflash2_graph", "base_eager"))
        figure = (f"{g['equal_prompts']}/{g['prompts']} prompts identical over "
                  f"{g['tokens']} tokens; diverged={g['diverged'][:8]}")
        if strict:
            check(f"greedy {spec} == {base}", g["equal_prompts"] == g["prompts"], figure)
        else:
            # Across graph/eager or in bf16 the target's own numerics differ;
            # reported, not judged.
            checks[f"greedy {spec} vs {base} (info)"] = {"figure": figure}
            print(f"INFO  greedy {spec} vs {base}: {figure}", flush=True)

    for spec, base in (("dflash2_eager", "base_eager"), ("dflash2_graph", "base_graph"),
                       ("dflash1_eager", "base_eager")):
        if spec not in results or base not in results:
            continue
        temps = {str(t) for t in TEMPERATURES}
        if not all(temps <= set(results[x].get("sampled", {})) for x in (spec, base)):
            continue
        report = compare_sampled(results[base]["sampled"], results[spec]["sampled"])
        worst = min(p["p"] for rows in report.values() for p in rows)
        lines = "; ".join(
            f"T={t}: " + " ".join(f"pos{p['pos']} p={p['p']:.3g} tv={p['tv']:.3f}"
                                  for p in rows)
            for t, rows in report.items())
        check(f"sampled {spec} ~ {base} (chi-square, every p > {P_THRESHOLD})",
              worst > P_THRESHOLD,
              f"{SAMPLED_REQUESTS} seeded requests per arm and temperature; min p="
              f"{worst:.3g}; {lines}")
        checks[f"sampled {spec} ~ {base} (chi-square, every p > {P_THRESHOLD})"][
            "detail"] = report
        r = results[spec]
        check(f"{spec}: seeded run repeats", r.get("seeded_repeat_equal") == 64,
              f"{r.get('seeded_repeat_equal')}/64 requests identical on a second run")

    # The test's power: the two temperatures' distributions must differ.
    if len(results.get("base_eager", {}).get("sampled", {})) == len(TEMPERATURES):
        s = results["base_eager"]["sampled"]
        t0, t1 = (str(t) for t in TEMPERATURES)
        p, tv, _ = chi_square_homogeneity([r[1] for r in s[t0]], [r[1] for r in s[t1]])
        check("power: T=0.7 vs T=1.3 (base_eager, pos1) is told apart", p < P_THRESHOLD,
              f"p={p:.3g} tv={tv:.3f}")

    for name, r in results.items():
        if r.get("draft") and "error" not in r:
            for phase in ("greedy", *(f"T{t}" for t in TEMPERATURES)):
                if f"counters_{phase}" not in r:
                    continue
                counters = r[f"counters_{phase}"]
                figure = acceptance(counters)
                passed = counters.get("num_draft_tokens", 0) > 0
                if r["draft"] == "dflash2" and phase == "greedy":
                    passed &= counters.get("num_accepted_tokens", 0) > 0
                check(f"{name}: counters ({phase})", passed, figure)
    return checks, ok


def run_all(out: Path, names: list[str], timeout: float) -> int:
    out.mkdir(parents=True, exist_ok=True)
    models = write_models(out / "models")
    (out / "models.json").write_text(json.dumps(models))
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_USE_FLASHINFER_SAMPLER="0", PYTHONUNBUFFERED="1")
    procs = {}
    for name in names:
        log = open(out / f"{name}.log", "w")
        procs[name] = (subprocess.Popen(
            [sys.executable, __file__, "engine", "--name", name,
             "--models", str(out / "models.json"), "--result", str(out / f"{name}.json")],
            stdout=log, stderr=subprocess.STDOUT,
            env=dict(env, VLLM_CACHE_ROOT=str(out / "vllm-cache" / name))), log)
        time.sleep(2)
    deadline = time.time() + timeout
    results = {}
    for name, (proc, log) in procs.items():
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        path = out / f"{name}.json"
        if proc.returncode == 0 and path.exists():
            results[name] = json.loads(path.read_text())
        else:
            tail = (out / f"{name}.log").read_text(errors="replace")[-3000:]
            results[name] = {"error": f"exit {proc.returncode}", "draft": CONFIGS[name][0]}
            print(f"---- {name} failed (exit {proc.returncode}); log tail:\n{tail}\n----",
                  flush=True)
    checks, ok = summarize(results)
    (out / "summary.json").write_text(json.dumps(
        {"ok": ok, "checks": checks,
         "startup_s": {k: v.get("startup_s") for k, v in results.items()}}, indent=1))
    print("ALL CHECKS PASSED" if ok else "SOME CHECKS FAILED", flush=True)
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="write the models, run every engine, compare")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--configs", default=",".join(CONFIGS),
                     help=f"comma-separated subset of {', '.join(CONFIGS)}")
    run.add_argument("--timeout", type=float, default=480.0,
                     help="seconds the engines may take together")
    models = sub.add_parser("models", help="only write the three checkpoints")
    models.add_argument("--out", type=Path, required=True)
    engine = sub.add_parser("engine", help=argparse.SUPPRESS)
    engine.add_argument("--name", required=True, choices=list(CONFIGS))
    engine.add_argument("--models", type=Path, required=True)
    engine.add_argument("--result", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "models":
        print(json.dumps(write_models(args.out), indent=1))
        return 0
    if args.command == "engine":
        run_engine(args.name, json.loads(args.models.read_text()), args.result)
        return 0
    names = [n for n in args.configs.split(",") if n]
    unknown = set(names) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configs: {sorted(unknown)}")
    return run_all(args.out, names, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
