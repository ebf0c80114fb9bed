"""Small checkpoints in the upstream layout: a Qwen3 target and DFlash2 (and
DFlash1) drafts, safetensors written with numpy alone.

`dflash2-backport verify --gpu` writes the tiny ones into its temporary
directory, in the interpreter that runs vLLM (this file is loaded there by
path: it imports nothing of this package, only numpy and the standard
library); scripts/gpu/driver.py writes both shapes for its runs.

    tiny  Qwen3, hidden 256, 2 layers, 4 heads, 2 KV heads, head_dim 64,
          vocab 1024; drafts with 1 layer, block 4, top-k 4, rank 8
    prod  Qwen3-1.7B's widths and Qwen3's 151936-token vocab, 2 layers; a
          DFlash2 draft with block 8 (7 draft positions), top-k 16, rank 32

At the tiny shape three more DFlash2 drafts vary one thing each (DRAFT_VARIANTS):
`dflash2_swa` has every layer `sliding_attention` with a window of 16 (the
flagship drafts are all sliding-window), `dflash2_short` a
`max_position_embeddings` of 256, far below the target's 2048, and
`dflash2_spread` a weak selector, so that its walk spreads over the
candidates instead of nearly always taking the cycle successor (a draft
that is nearly deterministic gives probabilistic drafting no noise to
couple with verification's).

The weights are random at the scale of a trained model's (unit-RMS
activations), except that the target is close to a bigram model whose greedy
successor of each of four "cycle" tokens is the next cycle token, the mask
token's embedding points at those four, and the DFlash2 selector's codebooks
encode the same cycle: a DFlash2 draft is often accepted after a cycle token
and rarely elsewhere, so drafting does something measurable.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

SHAPES = {
    "tiny": dict(
        vocab=1024, hidden=256, intermediate=512, target_layers=2, heads=4,
        kv_heads=2, head_dim=64, draft_layers=1, block_size=4, mask_token=1000,
        top_k=4, rank=8, taps=3, group=16, beta=8.0, max_num_seqs=128,
        kv_bytes=1 << 30,
    ),
    # Qwen3-1.7B's widths and vocabulary, two target layers. The successor's
    # logit grows with log(vocab) so that it keeps the probability it has in
    # the tiny vocabulary against 148x more competitors.
    "prod": dict(
        vocab=151936, hidden=2048, intermediate=6144, target_layers=2, heads=16,
        kv_heads=8, head_dim=128, draft_layers=1, block_size=8, mask_token=151669,
        top_k=16, rank=32, taps=3, group=16, beta=8.0 + math.log(151936 / 1024),
        max_num_seqs=128, kv_bytes=2 << 30,
    ),
}
CYCLE = [100, 101, 102, 103]
GAMMA = 1.0    # spread of every other logit
RESIDUAL = 0.3  # scale of each sublayer's output against the unit-RMS stream
SELECTOR_GAIN = 20.0
# The successor then scores about 0.6 above the other cycle tokens: at T 0.7
# the walk takes it about 45% of the time, below the target's ~72%, which is
# where drafting with verification's noise biases the output most
# (scripts/gpu/prob_power.py).
SPREAD_SELECTOR_GAIN = 0.6
SLIDING_WINDOW = 16
SHORT_MAX_POSITIONS = 256

# name: (the draft kind whose weights it has, config changes, selector gain).
DRAFT_VARIANTS = {
    "dflash2_swa": ("dflash2", {"layer_types": "sliding_attention",
                                "sliding_window": SLIDING_WINDOW}, SELECTOR_GAIN),
    "dflash2_short": ("dflash2", {"max_position_embeddings": SHORT_MAX_POSITIONS},
                      SELECTOR_GAIN),
    "dflash2_spread": ("dflash2", {}, SPREAD_SELECTOR_GAIN),
}

# prompts.json: greedy prompts of 3 to 120 tokens (half end on a cycle
# token), one sampled prompt, and a batch for throughput runs; for the
# sliding-window draft, greedy prompts of 48 to 200 tokens and a sampled one
# of 64, all well past its window; for the short draft, prompts of 300 to 700
# tokens, past its max_position_embeddings.
GREEDY_PROMPTS = 24
SWA_PROMPTS = (12, 48, 200)
SWA_SAMPLED_PROMPT = 64
LONG_PROMPTS = (8, 300, 700)
BENCH_BATCH = 128
BENCH_PROMPT = 64


def _safetensors_header(shapes: dict[str, tuple[int, ...]], dtype: str, itemsize: int) -> bytes:
    """The length-prefixed header of a safetensors file whose tensors, in
    sorted order, all have `dtype`."""
    header, offset = {}, 0
    for name in sorted(shapes):
        size = math.prod(shapes[name]) * itemsize
        header[name] = {"dtype": dtype, "shape": list(shapes[name]),
                        "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def save_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Write float32 tensors in the safetensors format (no library needed)."""
    with open(path, "wb") as handle:
        handle.write(_safetensors_header(
            {name: tensor.shape for name, tensor in tensors.items()}, "F32", 4))
        for name in sorted(tensors):
            handle.write(np.ascontiguousarray(tensors[name], dtype="<f4").data)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest, ties to
    even, as torch rounds; a NaN stays a NaN (rounding could carry it to inf)."""
    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4")
    # In place on one temporary: these arrays run to hundreds of MB.
    rounded = bits >> np.uint32(16)
    rounded &= np.uint32(1)
    rounded += np.uint32(0x7FFF)
    rounded += bits
    rounded >>= np.uint32(16)
    out = rounded.astype("<u2")
    nan = np.isnan(values)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def save_safetensors_bf16(path: Path, shapes: dict[str, tuple[int, ...]], fill) -> None:
    """Write bfloat16 tensors one at a time: `fill(name)` returns each as
    float32 values or as bf16 bits (uint16), so that a model of many GB never
    sits in memory whole."""
    with open(path, "wb") as handle:
        handle.write(_safetensors_header(shapes, "BF16", 2))
        for name in sorted(shapes):
            tensor = fill(name)
            if tuple(tensor.shape) != tuple(shapes[name]):
                raise ValueError(f"{name}: shape {tensor.shape}, header says {shapes[name]}")
            if tensor.dtype != np.uint16:
                tensor = bf16_bits(tensor)
            handle.write(np.ascontiguousarray(tensor, dtype="<u2").data)


def read_safetensors_header(path: Path) -> dict:
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(length))


def _config_common(s: dict) -> dict:
    return {
        "model_type": "qwen3",
        "vocab_size": s["vocab"],
        "hidden_size": s["hidden"],
        "intermediate_size": s["intermediate"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv_heads"],
        "head_dim": s["head_dim"],
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


def target_config(s: dict) -> dict:
    return {**_config_common(s), "architectures": ["Qwen3ForCausalLM"],
            "num_hidden_layers": s["target_layers"]}


def draft_config(kind: str, s: dict) -> dict:
    if kind in DRAFT_VARIANTS:
        base, changes, _ = DRAFT_VARIANTS[kind]
        config = draft_config(base, s)
        for key, value in changes.items():
            config[key] = ([value] * s["draft_layers"] if key == "layer_types"
                           else value)
        if "sliding_window" in changes:
            # Qwen3's config keeps the top-level window only with
            # use_sliding_window; vLLM's DFlash reads dflash_config's first.
            config["dflash_config"] = dict(config["dflash_config"],
                                           swa_window_size=changes["sliding_window"])
        return config
    dflash = {"mask_token_id": s["mask_token"], "target_layer_ids": [0, 1]}
    config = {**_config_common(s), "num_hidden_layers": s["draft_layers"],
              "block_size": s["block_size"]}
    if kind == "dflash2":
        dflash.update(selector_top_k=s["top_k"], selector_rank=s["rank"],
                      conv_kernel_size=s["taps"], conv_group_size=s["group"])
        config.update(architectures=["DFlash2DraftModel"], is_causal=False)
    else:
        config.update(architectures=["DFlashDraftModel"])
    config["dflash_config"] = dflash
    return config


class _Weights:
    """Seeded weights; `fast` draws float32 directly (prod-size matrices)."""

    def __init__(self, seed: int, fast: bool = False) -> None:
        self.rng = np.random.default_rng(seed)
        self.fast = fast

    def normal(self, shape, std) -> np.ndarray:
        if self.fast:
            out = self.rng.standard_normal(shape, dtype=np.float32)
            out *= np.float32(std)
            return out
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def ones(self, n: int) -> np.ndarray:
        return (1.0 + self.rng.standard_normal(n) * 0.02).astype(np.float32)


def layer_shapes(prefix: str, s: dict, dflash2: bool = False) -> dict[str, tuple[int, ...]]:
    """One Qwen3 decoder layer's tensors, HF names, in the order they are
    drawn; a DFlash2 draft layer adds its two dynamic convolutions."""
    hidden, inter = s["hidden"], s["intermediate"]
    q, kv = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    shapes = {
        "self_attn.q_proj.weight": (q, hidden), "self_attn.k_proj.weight": (kv, hidden),
        "self_attn.v_proj.weight": (kv, hidden), "self_attn.o_proj.weight": (hidden, q),
        "self_attn.q_norm.weight": (s["head_dim"],), "self_attn.k_norm.weight": (s["head_dim"],),
        "mlp.gate_proj.weight": (inter, hidden), "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
        "input_layernorm.weight": (hidden,), "post_attention_layernorm.weight": (hidden,),
    }
    if dflash2:
        groups = hidden // s["group"]
        for conv in ("attention_conv", "mlp_conv"):
            shapes[f"{conv}.base_kernel"] = (2, s["taps"], hidden)
            shapes[f"{conv}.kernel_projection.weight"] = (2 * s["taps"] * groups, hidden)
    return {prefix + name: shape for name, shape in shapes.items()}


def matrix_std(name: str, shape: tuple[int, ...], s: dict, residual: float) -> float:
    """A layer matrix's spread: unit-RMS inputs give unit-RMS outputs, except
    that a sublayer's output (o_proj, down_proj) is at `residual` scale."""
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return residual * shape[1] ** -0.5
    return s["hidden"] ** -0.5


def _decoder_layer(w: _Weights, prefix: str, s: dict,
                   dflash2: bool = False) -> dict[str, np.ndarray]:
    """One decoder layer's seeded tensors; sublayer outputs at RESIDUAL scale."""
    tensors = {}
    for name, shape in layer_shapes(prefix, s, dflash2).items():
        if name.endswith("norm.weight"):
            tensors[name] = w.ones(shape[0])
        elif name.endswith("base_kernel"):
            tensors[name] = w.normal(shape, 0.05)
            tensors[name][:, 0] += 1.0  # tap 0 (the slot itself) near identity
        elif name.endswith("kernel_projection.weight"):
            tensors[name] = w.normal(shape, 0.05 * s["hidden"] ** -0.5)
        else:
            tensors[name] = w.normal(shape, matrix_std(name, shape, s, RESIDUAL))
    return tensors


def target_weights(seed: int, s: dict, fast: bool = False):
    w = _Weights(seed, fast)
    vocab, hidden = s["vocab"], s["hidden"]
    embed = w.normal((vocab, hidden), 1.0)
    unit = embed[CYCLE] / np.linalg.norm(embed[CYCLE], axis=1, keepdims=True)
    # The mask token's embedding points at the four cycle tokens at once.
    mask_dir = unit.sum(0)
    mask_dir /= np.linalg.norm(mask_dir)
    mask_dir = mask_dir.astype(np.float32)
    embed[s["mask_token"]] = mask_dir * np.sqrt(hidden)
    lm_head = w.normal((vocab, hidden), GAMMA * hidden ** -0.5)
    # Other tokens score ~0 at the draft's mask slots ...
    lm_head -= np.outer(lm_head @ mask_dir, mask_dir).astype(np.float32)
    # ... and each cycle token's successor scores ~beta after it.
    for i in range(len(CYCLE)):
        lm_head[CYCLE[(i + 1) % len(CYCLE)]] = s["beta"] * hidden ** -0.5 * unit[i]
    tensors = {"model.embed_tokens.weight": embed, "lm_head.weight": lm_head,
               "model.norm.weight": w.ones(hidden)}
    for layer in range(s["target_layers"]):
        tensors.update(_decoder_layer(w, f"model.layers.{layer}.", s))
    return tensors, mask_dir


def draft_weights(kind: str, mask_dir: np.ndarray, seed: int, s: dict,
                  fast: bool = False, gain: float = SELECTOR_GAIN) -> dict[str, np.ndarray]:
    """Upstream layout: no `model.` prefix, no embed_tokens or lm_head (shared)."""
    w = _Weights(seed, fast)
    hidden, vocab, rank = s["hidden"], s["vocab"], s["rank"]
    tensors = {
        "fc.weight": w.normal((hidden, 2 * hidden), (2 * hidden) ** -0.5),
        "hidden_norm.weight": w.ones(hidden),
        "norm.weight": w.ones(hidden),
    }
    for layer in range(s["draft_layers"]):
        tensors.update(_decoder_layer(w, f"layers.{layer}.", s, dflash2=kind == "dflash2"))
    if kind == "dflash2":
        predecessor = w.normal((vocab, rank), 0.1)
        successor = w.normal((vocab, rank), 0.1)
        for i, token in enumerate(CYCLE):
            predecessor[token] = 0.0
            predecessor[token, i] = gain
            successor[CYCLE[(i + 1) % len(CYCLE)]] = 0.0
            successor[CYCLE[(i + 1) % len(CYCLE)], i] = 1.0
        # The projected hidden state is ~1 in every rank at a mask slot.
        projection = np.tile(mask_dir / np.sqrt(hidden), (rank, 1)).astype(np.float32)
        projection += w.normal(projection.shape, 0.01 * hidden ** -0.5)
        tensors.update({
            "candidate_selector.predecessor_codebook": predecessor,
            "candidate_selector.successor_codebook": successor,
            "candidate_selector.hidden_projection.weight": projection,
        })
    return tensors


def prompts(seed: int, s: dict) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    excluded = set(CYCLE) | {s["mask_token"]}
    pool = np.array([t for t in range(3, min(s["vocab"], 32768)) if t not in excluded])
    # Half end on a cycle token: drafts there are accepted.
    greedy = _ending_on_cycle(rng, pool, np.linspace(3, 120, GREEDY_PROMPTS).astype(int))
    sampled = rng.choice(pool, size=12).tolist()
    sampled[-1] = CYCLE[0]
    bench = _ending_on_cycle(rng, pool, [BENCH_PROMPT] * BENCH_BATCH)
    found = {"greedy": greedy, "sampled": sampled, "bench": bench}
    if s["vocab"] <= 32768:
        # A stream of their own, so that the prompts above stay as they were.
        found.update(long_prompts(np.random.default_rng(seed + 7919), pool))
    return found


def _ending_on_cycle(rng, pool, lengths) -> list[list[int]]:
    found = []
    for i, length in enumerate(lengths):
        tokens = rng.choice(pool, size=int(length)).tolist()
        if i % 2 == 0:
            tokens[-1] = CYCLE[i // 2 % len(CYCLE)]
        found.append(tokens)
    return found


def long_prompts(rng, pool) -> dict[str, list]:
    swa = np.linspace(*SWA_PROMPTS[1:], SWA_PROMPTS[0]).astype(int)
    sampled = rng.choice(pool, size=SWA_SAMPLED_PROMPT).tolist()
    sampled[-1] = CYCLE[0]
    long = np.linspace(*LONG_PROMPTS[1:], LONG_PROMPTS[0]).astype(int)
    return {"greedy_swa": _ending_on_cycle(rng, pool, swa), "sampled_swa": sampled,
            "greedy_longctx": _ending_on_cycle(rng, pool, long)}


def write_models(out: Path, shape: str = "tiny", seed: int = 0,
                 drafts: tuple[str, ...] | None = None) -> dict[str, str]:
    """The checkpoints of one shape under out/shape: the target, and each of
    `drafts` (default: DFlash2, and at the tiny shape DFlash1 and the
    DRAFT_VARIANTS)."""
    s = SHAPES[shape]
    fast = shape != "tiny"
    root = out / shape
    paths = {}
    target, mask_dir = target_weights(seed, s, fast)
    models = {"target": (target_config(s), target)}
    if drafts is None:
        drafts = (("dflash2", "dflash1", *DRAFT_VARIANTS) if shape == "tiny"
                  else ("dflash2",))
    # Each kind keeps its seed whichever others are written; a variant has
    # its base kind's.
    seeds = {"dflash2": 1, "dflash1": 2}
    for kind in drafts:
        base, _, gain = DRAFT_VARIANTS.get(kind, (kind, None, SELECTOR_GAIN))
        models[kind] = (draft_config(kind, s), draft_weights(
            base, mask_dir, seed + seeds[base], s, fast, gain))
    for name, (config, tensors) in models.items():
        directory = root / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config, indent=1))
        save_safetensors(directory / "model.safetensors", tensors)
        paths[name] = str(directory)
    (root / "prompts.json").write_text(json.dumps(prompts(seed, s)))
    paths["prompts"] = str(root / "prompts.json")
    return paths
