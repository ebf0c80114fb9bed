"""Model checks for qwen3_dflash2 against upstream 0.28.0's, on CPU.

Run by test_dflash2_model.py inside the patched 0.27.1 interpreter; prints one
PROBE-RESULT line. argv[1] is a JSON object with `upstream` (a directory
containing upstream 0.28.0's `vllm/`), `workdir` and `checks`.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _probe_common as common  # noqa: E402

common.stub_custom_ops()

import torch  # noqa: E402

from vllm.model_executor.models import qwen3_dflash2 as ours  # noqa: E402

ARGS: dict = {}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def upstream():
    return common.load_upstream(common.UPSTREAM_MODEL, ARGS["upstream"], "upstream_qwen3_dflash2")


def _configs(case: str, dtype="float32", steps=3, dflash=None, configs=None):
    root = Path(ARGS["workdir"]) / case
    target_dir, draft_dir = common.write_configs(root, dflash=dflash, **(configs or {}))
    return common.engine_config(target_dir, draft_dir, steps=steps, dtype=dtype), draft_dir


_MODELS: dict = {}


def _model_pair(dtype="float32", steps=3, dflash=None, configs=None):
    """Ours and upstream's DFlash2 model for one config, with equal weights.

    `configs` ({"target": ..., "draft": ...}) replaces the default tiny pair.
    """
    key = json.dumps([dtype, steps, dflash, configs], sort_keys=True)
    if key not in _MODELS:
        config, draft_dir = _configs(f"pair{len(_MODELS)}", dtype, steps, dflash, configs)
        mine = common.build_model(ours.DFlash2Qwen3ForCausalLM, config)
        theirs = common.build_model(upstream().DFlash2Qwen3ForCausalLM, config,
                                    prefix="upstream")
        theirs.load_state_dict(mine.state_dict())
        _MODELS[key] = (mine, theirs, config, draft_dir)
    return _MODELS[key]


def _summary(a: torch.Tensor, b: torch.Tensor) -> dict:
    diff = (a.double() - b.double()).abs()
    return {
        "equal": bool(torch.equal(a, b)),
        "max_abs_diff": float(diff.max()) if diff.numel() else 0.0,
        "shape": list(a.shape),
    }


# ----------------------------------------------------------------------------
# Checks


def grouped_conv_matches_upstream(num_blocks, block_size, taps, num_groups, group_size,
                                  dtype, seed):
    """_grouped_conv equals upstream's; also a plain per-row loop."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    rows = num_blocks * block_size
    hidden = num_groups * group_size
    x = torch.randn(rows, hidden, generator=g).to(dt)
    delta = torch.randn(rows, taps, num_groups, generator=g).to(dt)
    base = torch.randn(taps, hidden, generator=g).to(dt)
    args = (x, delta, base, block_size, num_groups, group_size, taps)
    mine = ours._grouped_conv(*args)

    # Per row: sum over taps reaching back inside the row's own block only.
    reference = torch.zeros(rows, hidden, dtype=torch.float64)
    kernel = base.double().view(taps, num_groups, group_size)
    for i in range(rows):
        for t in range(taps):
            if i % block_size >= t:
                w = kernel[t] + delta[i, t].double()[:, None]
                reference[i] += (w * x[i - t].double().view(num_groups, group_size)).view(-1)
    tolerance = 1e-5 if dt == torch.float32 else 5e-2
    result = {"reference_close": bool(torch.allclose(mine.double(), reference,
                                                     rtol=tolerance, atol=tolerance))}
    if rows >= taps:
        # Upstream's shift needs at least `taps` rows.
        result.update(_summary(mine, upstream()._grouped_conv(*args)))
    return result


def score_edges_matches_upstream(batch, steps, top_k, rank, vocab, dtype, seed):
    """_score_edges equals upstream's and the defining sum."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    predecessor = torch.randn(vocab, rank, generator=g).to(dt)
    successor = torch.randn(vocab, rank, generator=g).to(dt)
    candidates = torch.randint(0, vocab, (batch, steps, top_k), generator=g)
    unary = torch.randn(batch, steps, top_k, generator=g)
    hidden = torch.randn(batch, steps, rank, generator=g).to(dt)
    anchors = torch.randint(0, vocab, (batch,), generator=g)
    args = (predecessor, successor, candidates, unary, hidden, anchors, top_k)
    mine = ours._score_edges(*args)
    theirs = upstream()._score_edges(*args)

    reference = torch.empty(batch, steps, top_k, top_k, dtype=torch.float64)
    for b in range(batch):
        for s in range(steps):
            previous = [int(anchors[b])] * top_k if s == 0 else candidates[b, s - 1].tolist()
            for p in range(top_k):
                for c in range(top_k):
                    code = predecessor[previous[p]].double() * hidden[b, s].double()
                    reference[b, s, p, c] = unary[b, s, c].double() + (
                        code * successor[candidates[b, s, c]].double()).sum()
    tolerance = 1e-4 if dt == torch.float32 else 0.25
    result = _summary(mine, theirs)
    result["dtype"] = str(mine.dtype)
    result["upstream_dtype"] = str(theirs.dtype)
    atol = 1e-5 if dt == torch.float32 else 1e-2
    result["close_to_upstream"] = bool(
        torch.allclose(mine.double(), theirs.double(), rtol=1e-5, atol=atol))
    result["reference_close"] = bool(torch.allclose(mine.double(), reference,
                                                    rtol=tolerance, atol=tolerance))
    return result


def parameters_match_upstream(dtype, steps, dflash, configs=None):
    """Built model: same parameter names, shapes and dtypes as upstream's."""
    mine, theirs, _, _ = _model_pair(dtype, steps, dflash, configs)

    def table(model):
        return [(n, list(p.shape), str(p.dtype)) for n, p in model.named_parameters()]

    def layout(model):
        layer = model.model.layers[0]
        return {
            "layer": type(layer).__name__,
            "model": type(model.model).__name__,
            "block_size": layer.attention_conv.block_size,
            "top_k": model.model.candidate_selector.top_k,
            "input_embedding_scale": model.model.input_embedding_scale,
            "scale": model.candidate_logits_processor.scale,
            "soft_cap": model.candidate_logits_processor.soft_cap,
        }

    return {
        "ours": table(mine),
        "upstream": table(theirs),
        "ours_layout": layout(mine),
        "upstream_layout": layout(theirs),
    }


def compute_candidates_matches_upstream(dtype, dflash, tokens, seed):
    """compute_candidates: same ids and values as upstream's, same weights."""
    dflash = dflash or {}
    mine, theirs, _, _ = _model_pair(dtype, 3, dflash)
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, mine.config.hidden_size, generator=g).to(DTYPES[dtype])
    with torch.no_grad():
        ids, values = mine.compute_candidates(hidden)
        up_ids, up_values = theirs.compute_candidates(hidden)
        logits = mine.lm_head.weight.float() @ hidden.float().T
    top_k = mine.model.candidate_selector.top_k
    ref_values, ref_ids = torch.topk(logits.T, top_k, dim=-1)
    scale = float(dflash.get("output_multiplier", 1.0))
    cap = float(dflash.get("final_logit_softcapping") or 0.0)
    ref_values = ref_values * scale
    if cap > 0:
        ref_values = torch.tanh(ref_values / cap) * cap
    return {
        "ids_equal": bool(torch.equal(ids, up_ids)),
        "values": _summary(values, up_values),
        "dtypes": [str(ids.dtype), str(values.dtype)],
        "upstream_dtypes": [str(up_ids.dtype), str(up_values.dtype)],
        "shape": list(ids.shape),
        "reference_ids_equal": bool(torch.equal(ids, ref_ids)) if dtype == "float32" else None,
        "reference_close": bool(torch.allclose(values, ref_values, rtol=1e-4, atol=1e-4))
        if dtype == "float32" else None,
    }


def candidate_selector_matches_upstream(dtype, batch, seed):
    """The selector module's forward equals upstream's."""
    mine, theirs, _, _ = _model_pair(dtype, 3, None)
    g = torch.Generator().manual_seed(seed)
    top_k = mine.model.candidate_selector.top_k
    vocab = mine.config.vocab_size
    candidates = torch.randint(0, vocab, (batch, 3, top_k), generator=g)
    unary = torch.randn(batch, 3, top_k, generator=g)
    hidden = torch.randn(batch, 3, mine.config.hidden_size, generator=g).to(DTYPES[dtype])
    anchors = torch.randint(0, vocab, (batch,), generator=g)
    with torch.no_grad():
        a = mine.model.candidate_selector(candidates, unary, hidden, anchors)
        b = theirs.model.candidate_selector(candidates, unary, hidden, anchors)
    result = _summary(a, b)
    result["close"] = bool(torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-4))
    return result


class _FixedMixing(torch.nn.Module):
    """Stands in for attention, which has no CPU backend here: a fixed linear map."""

    def __init__(self, weight):
        super().__init__()
        self.weight = weight

    def forward(self, positions, hidden_states):
        return hidden_states @ self.weight


def decoder_layer_matches_upstream(dtype, steps, with_residual, seed):
    """DFlash2Qwen3DecoderLayer.forward equals upstream's, attention held fixed."""
    mine, theirs, config, _ = _model_pair(dtype, steps, None)
    g = torch.Generator().manual_seed(seed)
    hidden_size = mine.config.hidden_size
    dt = DTYPES[dtype]
    mixing = (torch.randn(hidden_size, hidden_size, generator=g) / hidden_size**0.5).to(dt)
    rows = 4 * (1 + steps)
    x = torch.randn(rows, hidden_size, generator=g).to(dt)
    residual = torch.randn(rows, hidden_size, generator=g).to(dt) if with_residual else None
    positions = torch.arange(rows)
    outputs = []
    from vllm.config import set_current_vllm_config
    for model in (mine, theirs):
        layer = model.model.layers[0]
        original = layer.self_attn
        layer.self_attn = _FixedMixing(mixing)
        try:
            with torch.no_grad(), set_current_vllm_config(config):
                outputs.append(layer(positions, x.clone(),
                                     None if residual is None else residual.clone()))
        finally:
            layer.self_attn = original
    (h1, r1), (h2, r2) = outputs
    return {"hidden": _summary(h1, h2), "residual": _summary(r1, r2)}


def _upstream_substr_renames() -> dict:
    """orig_to_new_substr of upstream 0.28.0's DFlashQwen3Model, read from its source."""
    source = (Path(ARGS["upstream"]) / "vllm/model_executor/models/qwen3_dflash.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "DFlashQwen3Model":
            for item in ast.walk(node):
                if isinstance(item, ast.keyword) and item.arg == "orig_to_new_substr":
                    return ast.literal_eval(item.value)
    raise LookupError("orig_to_new_substr not found upstream")


def _fresh(shape, dtype, generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator).to(dtype)


def _checkpoint_from(model, renames: dict) -> dict[str, torch.Tensor]:
    """A DFlash2 checkpoint in upstream's naming, from a built model's layout.

    The inverse of upstream's loading: no `model.` prefix, q/k/v and gate/up
    unfused, and each of `renames` (checkpoint name -> vLLM name) undone.
    """
    g = torch.Generator().manual_seed(1234)
    checkpoint = {}
    for name, parameter in model.named_parameters():
        if name == "model.mask_embedding":
            continue  # only a separate mask_embedding.pt carries it
        stored = name.removeprefix("model.")
        for original, renamed in renames.items():
            if renamed and stored.startswith(renamed):
                stored = original + stored[len(renamed):]
        dtype, rest = parameter.dtype, tuple(parameter.shape[1:])
        if ".qkv_proj." in stored:
            attn = model.model.layers[int(name.split(".")[2])].self_attn
            q, kv = attn.q_size, attn.kv_size
            for part, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                shape = (rows, *rest)
                checkpoint[stored.replace("qkv_proj", part)] = _fresh(shape, dtype, g)
        elif ".gate_up_proj." in stored:
            shape = (parameter.shape[0] // 2, *rest)
            for part in ("gate_proj", "up_proj"):
                checkpoint[stored.replace("gate_up_proj", part)] = _fresh(shape, dtype, g)
        else:
            checkpoint[stored] = _fresh(tuple(parameter.shape), dtype, g)
    return checkpoint


def _expected_state(model, checkpoint, renames) -> dict[str, torch.Tensor]:
    """Where upstream puts each checkpoint tensor: vLLM name -> expected value."""
    expected = {}
    fused: dict[str, list] = {}
    for stored, tensor in checkpoint.items():
        name = stored
        for original, renamed in renames.items():
            if renamed is not None and original in name:
                name = name.replace(original, renamed)
        name = name if name.startswith("lm_head") else "model." + name
        for part, fused_name in (("q_proj", "qkv_proj"), ("k_proj", "qkv_proj"),
                                 ("v_proj", "qkv_proj"), ("gate_proj", "gate_up_proj"),
                                 ("up_proj", "gate_up_proj")):
            if f".{part}." in name:
                fused.setdefault(name.replace(part, fused_name), []).append((part, tensor))
                break
        else:
            expected[name] = tensor
    order = {"q_proj": 0, "k_proj": 1, "v_proj": 2, "gate_proj": 0, "up_proj": 1}
    for name, parts in fused.items():
        expected[name] = torch.cat([t for _, t in sorted(parts, key=lambda p: order[p[0]])])
    return expected


def load_weights_places_like_upstream(dtype, naming, seed):
    """A safetensors checkpoint in upstream's names lands where upstream puts it."""
    from safetensors.torch import save_file

    from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator

    renames = _upstream_substr_renames()
    mine, theirs, config, draft_dir = _model_pair(dtype, 3, None)
    # Stored names that upstream renames (encoder.*, midlayer.*) exercise the mapper.
    used = {k: v for k, v in renames.items()
            if naming == "renamed" and not k.startswith("midlayer")}
    if naming == "midlayer":
        used = {"midlayer.": "layers.0."}
    checkpoint = _checkpoint_from(mine, used)
    path = Path(ARGS["workdir"]) / f"ckpt-{dtype}-{naming}-{seed}.safetensors"
    save_file(checkpoint, str(path))

    def load(model):
        weights = safetensors_weights_iterator([str(path)], use_tqdm_on_load=False)
        from vllm.config import set_current_vllm_config
        with torch.no_grad(), set_current_vllm_config(config):
            model.load_weights(weights)
        return dict(model.named_parameters())

    mine_state = load(mine)
    expected = _expected_state(mine, checkpoint, renames)
    misplaced = sorted(n for n, t in expected.items()
                       if n not in mine_state or not torch.equal(mine_state[n].detach(), t))
    missing = sorted(set(mine_state) - set(expected) - {"model.mask_embedding"})
    result = {
        "stored_names": sorted(checkpoint),
        "misplaced": misplaced,
        "not_loaded": missing,
        "dflash2_tensors": sorted(n for n in checkpoint if "conv" in n or "selector" in n),
    }
    if naming == "plain":
        # Upstream's own classes on the same file, for a direct comparison.
        theirs_state = load(theirs)
        result["differs_from_upstream"] = sorted(
            n for n in theirs_state
            if not torch.equal(theirs_state[n].detach(), mine_state[n].detach()))
    return result


CHECKS = {f.__name__: f for f in (
    grouped_conv_matches_upstream,
    score_edges_matches_upstream,
    parameters_match_upstream,
    compute_candidates_matches_upstream,
    candidate_selector_matches_upstream,
    decoder_layer_matches_upstream,
    load_weights_places_like_upstream,
)}


if __name__ == "__main__":
    ARGS.update(json.loads(sys.argv[1]))
    Path(ARGS["workdir"]).mkdir(parents=True, exist_ok=True)
    common.run_checks(CHECKS, ARGS, modules=(ours,))
