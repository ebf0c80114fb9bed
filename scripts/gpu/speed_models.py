"""Checkpoints for timing DFlash2: a target of Qwen3-8B's shape and a DFlash2
draft at its width, random bfloat16 weights built so that greedy drafts are
accepted at two known rates.

The target is close to a bigram model over two cycles of tokens, as the
small checkpoints' is (dflash2_backport/verification/checkpoints.py); the
draft's selector encodes each cycle with deliberate wrong edges:

    high  a0 > a1 > ... > a5 > a0 in the target; the draft walks a0 ... a5
          and then guesses b0. From anchor a0 it proposes a1..a5 (accepted)
          and b0 (rejected: the target says a0), so every verification step
          ends back on a0 with 6 new tokens: mean acceptance length 6.
    low   b0 > b1 > b2 > b0 in the target; the draft guesses b0 > b1, then a0
          after b1 and after b2. Anchor b0 gives b1 accepted and b2 from the
          target (2 tokens), anchor b2 gives b0 from the target (1 token):
          3 tokens per 2 steps, mean acceptance length 1.5.

A prompt that ends on a0 (b0) puts its request in that regime for the whole
output; both regimes run in the same engine.

Weights are written tensor by tensor in bfloat16. The decoder layers' are
slices, at random offsets, of one pool of random bfloat16 values per scale,
so that 8 billion parameters cost little more than their write; each
sublayer's output is scaled down with depth so that the noise the layers
add in total is the 2-layer target's (1-layer draft's).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np

from dflash2_backport.verification.checkpoints import (
    GAMMA,
    RESIDUAL,
    SELECTOR_GAIN,
    bf16_bits,
    draft_config,
    layer_shapes,
    matrix_std,
    save_safetensors_bf16,
    target_config,
)

SPEED_SHAPES = {
    # Qwen3-8B's widths and depth; a draft as published DFlash drafts for it
    # are built (5 layers, block 16, target layers spread over the depth).
    "8b": dict(
        vocab=151936, hidden=4096, intermediate=12288, target_layers=36, heads=32,
        kv_heads=8, head_dim=128, draft_layers=5, block_size=16, mask_token=151669,
        top_k=16, rank=32, taps=3, group=16, beta=8.0 + math.log(151936 / 1024),
        target_layer_ids=[1, 9, 17, 25, 33], kv_bytes=4 << 30,
    ),
    # The same construction at a size a unit test writes in a second.
    "mini": dict(
        vocab=4096, hidden=256, intermediate=512, target_layers=4, heads=4,
        kv_heads=2, head_dim=64, draft_layers=2, block_size=16, mask_token=4000,
        top_k=16, rank=32, taps=3, group=16, beta=8.0 + math.log(4096 / 1024),
        target_layer_ids=[0, 2, 3], kv_bytes=1 << 30,
    ),
}
HIGH_CYCLE = (110, 111, 112, 113, 114, 115)
LOW_CYCLE = (120, 121, 122)
CYCLES = (HIGH_CYCLE, LOW_CYCLE)
# The draft's guess after each token; every other edge is the target's own.
WRONG_EDGES = {HIGH_CYCLE[-1]: LOW_CYCLE[0], LOW_CYCLE[1]: HIGH_CYCLE[0],
               LOW_CYCLE[2]: HIGH_CYCLE[0]}
REGIME_ANCHORS = {"high": HIGH_CYCLE[0], "low": LOW_CYCLE[0]}
PROMPT_TOKENS = 64
PROMPTS_PER_REGIME = 32
POOL_SPREAD = 1 << 22  # offsets into a pool: enough that no two layers align
MASK_AXIS = 0
# Each cycle token's unit embedding along the mask direction: with nine cycle
# tokens at 1/3 each, every one scores beta/3 at a mask slot.
MASK_SHARE = 1 / 3


def target_successors() -> dict[int, int]:
    return {c[i]: c[(i + 1) % len(c)] for c in CYCLES for i in range(len(c))}


def draft_successors() -> dict[int, int]:
    return {**target_successors(), **WRONG_EDGES}


def residual_scale(layers: int, reference_layers: int) -> float:
    """Each sublayer's output scale that keeps the summed noise of
    `reference_layers` layers at RESIDUAL each (variances add)."""
    return RESIDUAL * math.sqrt(reference_layers / layers)


def _rng(seed: int, *tags: int) -> np.random.Generator:
    return np.random.default_rng([seed, *tags])


def _normal(rng, shape, std) -> np.ndarray:
    out = rng.standard_normal(shape, dtype=np.float32)
    out *= np.float32(std)
    return out


def _ones(rng, n: int) -> np.ndarray:
    return 1.0 + _normal(rng, n, 0.02)


class _Pools:
    """Random bf16 values per scale. A tensor up to `largest` values is a
    slice of its scale's pool at a random offset (no copy); a larger one is
    assembled from such slices, a block of rows each."""

    def __init__(self, seed: int, largest: int) -> None:
        self.seed, self.largest = seed, largest
        self.spread = min(POOL_SPREAD, largest)
        self.pools: dict[float, np.ndarray] = {}
        self.offsets = _rng(seed, 99)

    def _slice(self, n: int, std: float) -> np.ndarray:
        if std not in self.pools:
            rng = _rng(self.seed, len(self.pools) + 1)
            self.pools[std] = bf16_bits(_normal(rng, self.largest + self.spread, std))
        start = int(self.offsets.integers(0, self.largest + self.spread - n + 1))
        return self.pools[std][start:start + n]

    def take(self, shape, std: float) -> np.ndarray:
        n = math.prod(shape)
        if n <= self.largest:
            return self._slice(n, std).reshape(shape)
        out = np.empty(shape, dtype=np.uint16)
        rows = max(1, self.largest // math.prod(shape[1:]))
        for start in range(0, shape[0], rows):
            block = out[start:start + rows]
            block[...] = self._slice(block.size, std).reshape(block.shape)
        return out


def _layer_tensor(name: str, shape, s: dict, pools: _Pools, rng, residual: float):
    """One decoder-layer tensor, by the end of its name."""
    hidden = s["hidden"]
    if name.endswith("norm.weight"):
        return _ones(rng, shape[0])
    if name.endswith("base_kernel"):
        base = _normal(rng, shape, 0.05)
        base[:, 0] += 1.0  # tap 0 (the slot itself) near identity
        return base
    if name.endswith("kernel_projection.weight"):
        return _normal(rng, shape, 0.05 * hidden ** -0.5)
    return pools.take(shape, matrix_std(name, shape, s, residual))


def mask_direction(s: dict) -> np.ndarray:
    """The mask token's direction: one hidden axis, so that turning every
    other token's output row away from it is zeroing one column."""
    direction = np.zeros(s["hidden"], dtype=np.float32)
    direction[MASK_AXIS] = 1.0
    return direction


def cycle_units(seed: int, s: dict) -> dict[int, np.ndarray]:
    """Each cycle token's unit embedding: random, with the same share along
    the mask direction, so that the mask token points at all of them."""
    rng = _rng(seed, 10)
    units = {}
    for token in sorted(target_successors()):
        unit = rng.standard_normal(s["hidden"]).astype(np.float32)
        unit[MASK_AXIS] = 0.0
        unit *= math.sqrt(1 - MASK_SHARE ** 2) / np.linalg.norm(unit)
        unit[MASK_AXIS] = MASK_SHARE
        units[token] = unit
    return units


def _owned_copy(array: np.ndarray) -> np.ndarray:
    return array.copy() if array.base is not None else array


def target_tensors(seed: int, s: dict):
    """(shapes, fill): the target's tensor shapes and a function that makes
    each one, in any order."""
    units = cycle_units(seed, s)
    hidden, vocab = s["hidden"], s["vocab"]
    successors = target_successors()
    shapes = {"model.embed_tokens.weight": (vocab, hidden),
              "lm_head.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    for layer in range(s["target_layers"]):
        shapes.update(layer_shapes(f"model.layers.{layer}.", s))
    pools = _Pools(seed, max(math.prod(v) for k, v in shapes.items() if ".layers." in k))
    residual = residual_scale(s["target_layers"], 2)

    def embed():
        out = _owned_copy(pools.take(shapes["model.embed_tokens.weight"], 1.0))
        for token, unit in units.items():
            out[token] = bf16_bits(unit * np.sqrt(hidden))
        out[s["mask_token"]] = bf16_bits(mask_direction(s) * np.sqrt(hidden))
        return out

    def lm_head():
        out = _owned_copy(pools.take(shapes["lm_head.weight"], GAMMA * hidden ** -0.5))
        # Other tokens score ~0 at the draft's mask slots ...
        out[:, MASK_AXIS] = 0
        # ... and each cycle token's successor scores ~beta after it.
        for token, successor in successors.items():
            out[successor] = bf16_bits(s["beta"] * hidden ** -0.5 * units[token])
        return out

    def fill(name):
        if name == "model.embed_tokens.weight":
            return embed()
        if name == "lm_head.weight":
            return lm_head()
        if name == "model.norm.weight":
            return _ones(_rng(seed, 3), hidden)
        return _layer_tensor(name, shapes[name], s, pools, _rng(seed, 4, _name_tag(name)),
                             residual)

    return shapes, fill


def draft_tensors(seed: int, s: dict, gain: float = SELECTOR_GAIN):
    hidden, vocab, rank = s["hidden"], s["vocab"], s["rank"]
    width = len(s["target_layer_ids"]) * hidden
    shapes = {"fc.weight": (hidden, width), "hidden_norm.weight": (hidden,),
              "norm.weight": (hidden,),
              "candidate_selector.predecessor_codebook": (vocab, rank),
              "candidate_selector.successor_codebook": (vocab, rank),
              "candidate_selector.hidden_projection.weight": (rank, hidden)}
    for layer in range(s["draft_layers"]):
        shapes.update(layer_shapes(f"layers.{layer}.", s, dflash2=True))
    pools = _Pools(seed, max(math.prod(v) for k, v in shapes.items() if "layers." in k))
    residual = residual_scale(s["draft_layers"], 1)
    edges = draft_successors()
    if len(edges) > rank:
        raise ValueError(f"{len(edges)} selector edges need rank >= {len(edges)}")

    @functools.cache
    def codebooks() -> dict[str, np.ndarray]:
        rng = _rng(seed, 5)
        predecessor = _normal(rng, (vocab, rank), 0.1)
        successor = _normal(rng, (vocab, rank), 0.1)
        for token in target_successors():
            predecessor[token] = successor[token] = 0.0
        # Edge k: its source's predecessor code is gain in dimension k alone,
        # its destination's successor code 1 there (a destination of several
        # edges has several ones).
        for k, (source, destination) in enumerate(sorted(edges.items())):
            predecessor[source, k] = gain
            successor[destination, k] = 1.0
        return {"predecessor": predecessor, "successor": successor}

    def fill(name):
        if name == "fc.weight":
            return pools.take(shapes[name], width ** -0.5)
        if name in ("hidden_norm.weight", "norm.weight"):
            return _ones(_rng(seed, 7, len(name)), hidden)
        if name.endswith("_codebook"):
            return codebooks()[name.removeprefix("candidate_selector.").split("_")[0]]
        if name == "candidate_selector.hidden_projection.weight":
            # The projected hidden state is ~1 in every rank at a mask slot.
            projection = np.tile(mask_direction(s) / np.sqrt(hidden), (rank, 1))
            return projection + _normal(_rng(seed, 8), projection.shape,
                                        0.01 * hidden ** -0.5)
        return _layer_tensor(name, shapes[name], s, pools, _rng(seed, 4, _name_tag(name)),
                             residual)

    return shapes, fill


def _name_tag(name: str) -> int:
    return int.from_bytes(name.encode()[-8:].rjust(8, b"\0"), "little") ^ len(name)


def speed_prompts(seed: int, s: dict) -> dict[str, list[list[int]]]:
    rng = _rng(seed, 9)
    excluded = set(target_successors()) | {s["mask_token"]}
    pool = np.array([t for t in range(3, min(s["vocab"], 32768)) if t not in excluded])
    found = {}
    for regime, anchor in REGIME_ANCHORS.items():
        prompts = rng.choice(pool, size=(PROMPTS_PER_REGIME, PROMPT_TOKENS))
        prompts[:, -1] = anchor
        found[regime] = prompts.tolist()
    return found


def write_speed_models(out: Path, shape: str = "8b", seed: int = 0) -> dict[str, str]:
    """out/speed-SHAPE/{target,dflash2}/ and prompts.json; a checkpoint whose
    files are all there already is kept (one 16 GB write per machine)."""
    s = SPEED_SHAPES[shape]
    root = out / f"speed-{shape}"
    target_shapes, target_fill = target_tensors(seed, s)
    draft_shapes, draft_fill = draft_tensors(seed + 1, s)
    configs = {"target": dict(target_config(s), torch_dtype="bfloat16"),
               "dflash2": _speed_draft_config(s)}
    tensors = {"target": (target_shapes, target_fill), "dflash2": (draft_shapes, draft_fill)}
    paths = {}
    for name, config in configs.items():
        directory = root / name
        weights = directory / "model.safetensors"
        done = directory / ".complete"
        if not done.is_file():
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "config.json").write_text(json.dumps(config, indent=1))
            save_safetensors_bf16(weights, *tensors[name])
            done.write_text(json.dumps({"seed": seed, "shape": shape}))
        paths[name] = str(directory)
    (root / "prompts.json").write_text(json.dumps(speed_prompts(seed, s)))
    paths["prompts"] = str(root / "prompts.json")
    return paths


def _speed_draft_config(s: dict) -> dict:
    config = dict(draft_config("dflash2", s), torch_dtype="bfloat16")
    config["dflash_config"] = dict(config["dflash_config"],
                                   target_layer_ids=list(s["target_layer_ids"]))
    return config


def parameter_count(shapes: dict[str, tuple]) -> int:
    return sum(math.prod(shape) for shape in shapes.values())
