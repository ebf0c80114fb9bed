"""DFlash2Speculator checks on CPU, with the kernels in Triton's interpreter.

Run by test_dflash2_speculator.py inside the patched 0.27.1 interpreter;
prints one PROBE-RESULT line. argv[1] is a JSON object with `workdir` and
`checks`. The draft forward (attention has no CPU backend here) is replaced by
fixed hidden states; everything after it -- candidates, selector, walk and
cache -- is the real code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _probe_common as common  # noqa: E402

common.interpret_libdevice()
common.stub_custom_ops()

import torch  # noqa: E402

from vllm.config.compilation import CUDAGraphMode  # noqa: E402
from vllm.model_executor.models import qwen3_dflash2 as model_module  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.dflash2 import speculator as speculator_module  # noqa: E402

DFlash2Qwen3ForCausalLM = model_module.DFlash2Qwen3ForCausalLM
DFlash2Speculator = speculator_module.DFlash2Speculator

ARGS: dict = {}
NEG_INF = float("-inf")


def make_speculator(sample_method: str, steps: int = 3, max_num_seqs: int = 6):
    root = Path(ARGS["workdir"]) / f"{sample_method}-{steps}-{max_num_seqs}"
    target_dir, draft_dir = common.write_configs(root)
    config = common.engine_config(target_dir, draft_dir, steps=steps,
                                  sample_method=sample_method, max_num_seqs=max_num_seqs)
    speculator = DFlash2Speculator(config, torch.device("cpu"))
    speculator.model = common.build_model(DFlash2Qwen3ForCausalLM, config,
                                          prefix=f"spec{id(speculator)}")
    return speculator


class Draft:
    """One drafting step's inputs, laid out as 0.27.1's prepare kernel lays them."""

    def __init__(self, speculator, slots, seed):
        g = torch.Generator().manual_seed(seed)
        self.spec = speculator
        self.slots = list(slots)
        steps = speculator.num_speculative_steps
        per_req = speculator.num_query_per_req
        num_reqs = len(self.slots)
        self.num_tokens = num_reqs * per_req
        vocab = speculator.model.config.vocab_size
        hidden_size = speculator.model.config.hidden_size
        # Hidden states with a clear top-k, so that ties cannot blur the walk.
        self.hidden = torch.randn(self.num_tokens, hidden_size, generator=g) * 3.0
        anchors = torch.randint(0, vocab, (num_reqs,), generator=g)
        positions = torch.randint(10, 100, (num_reqs,), generator=g)
        buffers = speculator.input_buffers
        for r in range(num_reqs):
            buffers.input_ids[r * per_req] = anchors[r]
            for s in range(steps):
                row = r * steps + s
                speculator.sample_indices[row] = r * per_req + 1 + s
                speculator.sample_pos[row] = positions[r] + 1 + s
                speculator.sample_idx_mapping[row] = self.slots[r]
        temps = torch.rand(speculator.max_num_reqs, generator=g) + 0.3
        speculator.temperature.copy_(temps)
        speculator.seeds.copy_(torch.randint(0, 2**62, (speculator.max_num_reqs,), generator=g))

    def run(self):
        self.spec._run_model = lambda *args, **kwargs: self.hidden
        self.spec._generate_draft(len(self.slots), self.num_tokens, None, None, None,
                                  CUDAGraphMode.NONE)

    def expected_rows(self, tokens):
        """Candidates and the edge rows along `tokens`, from the model directly."""
        spec = self.spec
        steps, k = spec.num_speculative_steps, spec.selector_top_k
        num_reqs = len(self.slots)
        with torch.no_grad():
            hidden = self.hidden[spec.sample_indices[: num_reqs * steps]]
            ids, unary = spec.model.compute_candidates(hidden)
            ids = ids.view(num_reqs, steps, k)
            anchors = spec.input_buffers.input_ids[spec._anchor_indices[:num_reqs]]
            scores = spec.model.model.candidate_selector(
                ids, unary.view(num_reqs, steps, k), hidden.view(num_reqs, steps, -1), anchors)
        rows = torch.empty(num_reqs, steps, k)
        for r in range(num_reqs):
            previous = 0
            for s in range(steps):
                rows[r, s] = scores[r, s, previous]
                if tokens is None:
                    previous = int(rows[r, s].argmax())
                else:
                    previous = int((ids[r, s] == tokens[r, s]).nonzero())
        return ids, rows


def greedy_drafting_caches_nothing(steps, seed):
    """draft_sample_method=greedy: no cache at all, and an argmax walk."""
    spec = make_speculator("greedy", steps)
    allocated_none = spec.draft_logits is None
    draft = Draft(spec, [3, 0, 5, 1], seed)
    draft.run()
    num_reqs = len(draft.slots)
    tokens = spec.draft_tokens[:num_reqs].clone()
    ids, rows = draft.expected_rows(None)
    expected = torch.stack([
        torch.stack([ids[r, s, int(rows_choice)] for s, rows_choice in
                     enumerate(rows[r].argmax(-1))]) for r in range(num_reqs)])
    return {
        "draft_logits_none_at_start": allocated_none,
        "draft_logits_none_after": spec.draft_logits is None,
        "tokens_equal_greedy_walk": bool(torch.equal(tokens, expected)),
    }


def sampled_drafting_caches_tempered(steps, seed):
    """draft_sample_method=probabilistic: the cache is rows / T, -inf elsewhere.

    Checked after a second drafting step, so "elsewhere" includes the first
    step's columns.
    """
    spec = make_speculator("probabilistic", steps)
    dl = spec.draft_logits
    result = {
        "spec": [str(t) for t in spec.draft_logits_spec(spec.vllm_config)],
        "buffer_dtype": str(dl.dtype),
        "buffer_shape": list(dl.shape),
        "buffer_all_neg_inf_at_start": bool(torch.isneginf(dl).all()),
        "mapping_inert_at_start": bool((spec.sample_idx_mapping == -1).all()),
    }
    # An earlier step in the same slots, with other candidates: the step
    # checked below must leave none of its columns behind.
    Draft(spec, [2, 0, 4], seed + 1000).run()
    draft = Draft(spec, [2, 0, 4], seed)
    # Slot 4 greedy inside the sampled batch: raw scores, as 0.27.1 caches them.
    spec.temperature[4] = 0.0
    draft.run()
    num_reqs = len(draft.slots)
    tokens = spec.draft_tokens[:num_reqs].clone()
    ids, rows = draft.expected_rows(tokens)
    expected = torch.full_like(dl, NEG_INF)
    for r, slot in enumerate(draft.slots):
        t = float(spec.temperature[slot])
        for s in range(steps):
            expected[slot, s, ids[r, s]] = rows[r, s] / spec.temperature[slot] if t else rows[r, s]
    result["cache_equal"] = bool(torch.equal(dl, expected))
    result["tokens_are_candidates"] = bool(all(
        int(tokens[r, s]) in ids[r, s].tolist()
        for r in range(num_reqs) for s in range(steps)))
    return result


class _WarmingManager:
    """A CUDA-graph manager stand-in whose capture runs the warm-up forward.

    0.27.1's manager executes the forward eagerly before recording it, so the
    kernels really run over every row of the captured size.
    """

    def __init__(self, num_reqs, num_tokens):
        self.num_reqs, self.num_tokens = num_reqs, num_tokens
        self.mapping_seen = None

    def capture(self, forward_fn, *args, **kwargs):
        self.mapping_seen = forward_fn.__self__.sample_idx_mapping.clone()
        forward_fn(self.num_reqs, self.num_tokens, None, None, None, CUDAGraphMode.NONE)


def capture_leaves_slot0_alone(steps, seed, capture_with):
    """Graph capture's warm-up writes no cache column, slot 0's included.

    `capture_with` = "ours" runs DFlash2Speculator.capture; "dflash1" runs
    0.27.1's inherited DFlashSpeculator.capture on the same speculator, which
    zero-fills the mapping: that is the failure the override exists for.
    """
    spec = make_speculator("probabilistic", steps)
    draft = Draft(spec, [0, 3], seed)
    draft.run()
    logits_before = spec.draft_logits.clone()
    ids_before = spec._cached_candidate_ids.clone()
    max_reqs = spec.max_num_reqs
    hidden = torch.randn(max_reqs * spec.num_query_per_req, spec.model.config.hidden_size,
                         generator=torch.Generator().manual_seed(seed + 1)) * 3.0
    spec._run_model = lambda *args, **kwargs: hidden
    manager = _WarmingManager(max_reqs, max_reqs * spec.num_query_per_req)
    spec.query_cudagraph_manager = manager
    spec.block_tables = spec.attn_groups = spec.kv_cache_config = None
    spec._group_causal = False
    if capture_with == "ours":
        spec.capture()
    else:
        DFlashSpeculator.capture(spec)
    finite_before = torch.isfinite(logits_before[0]).sum(-1).tolist()
    finite_after = torch.isfinite(spec.draft_logits[0]).sum(-1).tolist()
    return {
        "mapping_during_capture": sorted(set(manager.mapping_seen.tolist())),
        "cache_unchanged": bool(torch.equal(spec.draft_logits, logits_before)),
        "ids_unchanged": bool(torch.equal(spec._cached_candidate_ids, ids_before)),
        "slot0_finite_columns_before": finite_before,
        "slot0_finite_columns_after": finite_after,
    }


def built_over_stubbed_base(steps, max_num_reqs):
    """The constructor over a base __init__ that sets only what upstream's tests set.

    Upstream's own unit tests build the speculator this way; the attributes
    below are all such a stub provides. The mapping must still start inert
    whenever a buffer is given to it later.
    """
    from types import SimpleNamespace

    def stub_init(self, vllm_config, device):
        self.draft_model_config = SimpleNamespace(hf_config=SimpleNamespace(
            dflash_config={"selector_top_k": 4, "mask_token_id": 1000}))
        self.max_num_reqs = max_num_reqs
        self.num_query_per_req = 1 + steps
        self.num_speculative_steps = steps
        self.vocab_size = 1024
        self.draft_tokens = torch.zeros(max_num_reqs, steps, dtype=torch.int64)
        self.draft_logits = None

    original = DFlashSpeculator.__init__
    DFlashSpeculator.__init__ = stub_init
    try:
        spec = DFlash2Speculator(None, torch.device("cpu"))
    finally:
        DFlashSpeculator.__init__ = original
    result = {
        "selector_top_k": spec.selector_top_k,
        "selector_scores_shape": list(spec._selector_scores.shape),
        "anchor_indices": spec._anchor_indices.tolist(),
    }
    # As 0.27.1's base allocates it: zeros, i.e. every row aimed at slot 0.
    spec.sample_idx_mapping = torch.zeros(max_num_reqs * steps, dtype=torch.int32)
    result["mapping_after_zero_allocation"] = sorted(set(spec.sample_idx_mapping.tolist()))
    return result


CHECKS = {f.__name__: f for f in (
    greedy_drafting_caches_nothing,
    sampled_drafting_caches_tempered,
    capture_leaves_slot0_alone,
    built_over_stubbed_base,
)}


if __name__ == "__main__":
    ARGS.update(json.loads(sys.argv[1]))
    Path(ARGS["workdir"]).mkdir(parents=True, exist_ok=True)
    common.run_checks(CHECKS, ARGS, modules=(speculator_module, model_module))
