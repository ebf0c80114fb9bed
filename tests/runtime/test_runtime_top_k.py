"""`LogitsProcessor.get_top_k_tokens` on a real ParallelLMHead equals
torch.topk over the full logits, at tensor-parallel sizes 1 and 2.

At size 2 each rank holds half the vocabulary and the last shard carries the
padding rows, so the shard-local selection, the id offset, the padding mask
and the all-gather-and-reselect all run. One process per rank, over gloo.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.runtime

CODE = "import sys, json, topk_probe; topk_probe.main(*json.loads(sys.argv[1]))"


def run_ranks(snippets, python, world_size, workdir):
    init_file = workdir / f"rendezvous-{python.parent.parent.name}-{world_size}"
    return [
        snippets.start(python, CODE, args=[json.dumps([world_size, rank, str(init_file)])])
        for rank in range(world_size)
    ]


TOLERANCE = 1e-5


def top_k_violations(ranks: list[dict], combined_values: str | None = None) -> list[str]:
    """Values must match the full logits' top-k, except in cases that set both
    a scale and a soft cap, where they are held to `combined_values` (a
    reference name) or, if None, not checked (see the last test)."""
    problems = []
    for seen in ranks:
        if seen["flashinfer_calls"]:
            problems.append(f"rank {seen['rank']}: FlashInfer used on CPU")
        for case, outcome in seen["cases"].items():
            where = f"rank {seen['rank']} {case}"
            if not outcome["ok"]:
                problems.append(f"{where}: {outcome['error']}")
                continue
            if not outcome["ids_equal"]:
                problems.append(f"{where}: ids differ from torch.topk of the full logits")
            both = "soft_cap=None" not in case and not case.startswith("scale=1.0,")
            reference = combined_values if both else "full_logits"
            if reference is not None:
                error = outcome[f"value_error_vs_{reference}"]
                if error > TOLERANCE:
                    problems.append(f"{where}: values off by {error}")
            if outcome.get("reference_error_vs_forward", 0.0) > TOLERANCE:
                problems.append(f"{where}: reference differs from LogitsProcessor.forward")
            if outcome["torch_topk_calls"] != (1 if seen["world_size"] == 1 else 2):
                problems.append(f"{where}: torch.topk ran {outcome['torch_topk_calls']}x")
    return problems


@pytest.fixture(scope="module")
def ranks(snippets, venvs, tmp_path_factory):
    """Both sizes in both venvs, all started at once: {(venv, size): ranks}."""
    workdir = tmp_path_factory.mktemp("top-k")
    started = {
        (name, size): run_ranks(snippets, python, size, workdir)
        for name, python in venvs.items()
        for size in (1, 2)
    }
    results = iter(snippets.gather([s for group in started.values() for s in group]))
    return {key: [next(results) for _ in group] for key, group in started.items()}


@pytest.mark.parametrize("world_size", [1, 2])
def test_vocab_parallel_top_k_equals_torch_topk_over_full_logits(ranks, world_size):
    patched = ranks["patched", world_size]
    assert top_k_violations(patched) == []
    # The padded shard really is in play: unmasked, its rows would win.
    assert patched[-1]["num_org_vocab_padding"] > 0

    pristine = top_k_violations(ranks["pristine", world_size])
    assert pristine and all("AttributeError" in p and "get_top_k_tokens" in p
                            for p in pristine), pristine


@pytest.mark.parametrize("world_size", [1, 2])
def test_top_k_with_both_scale_and_soft_cap_caps_the_scaled_values(ranks, world_size):
    """With both set, `get_top_k_tokens` applies the scale before the soft cap
    (as upstream 0.28.0 does), while `LogitsProcessor.forward` caps first and
    then scales. The ids agree either way (both maps are monotonic); the
    values are those of the scale-then-cap order."""
    patched = ranks["patched", world_size]
    assert top_k_violations(patched, combined_values="scaled_then_capped") == []
