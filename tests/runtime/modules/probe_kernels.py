"""Kernel checks for the DFlash2 walk and draft-logit cache, on the Triton interpreter.

Run by test_dflash2_kernels.py inside the patched 0.27.1 interpreter; prints
one PROBE-RESULT line. argv[1] is a JSON object with `upstream` (a directory
containing upstream 0.28.0's `vllm/`) and `checks` (names of the functions
below to run, with their parameters).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _probe_common as common  # noqa: E402

common.interpret_libdevice()

import torch  # noqa: E402

from vllm.triton_utils import triton  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.dflash2 import speculator as ours  # noqa: E402

ARGS: dict = {}
NEG_INF = float("-inf")


# ----------------------------------------------------------------------------
# Inputs and plain-torch references


def make_batch(num_reqs, num_steps, top_k, vocab, seed, *, max_num_reqs=None,
               slots=None, spread=2.0, device="cpu"):
    """A drafted block as the speculator hands it to the kernels."""
    g = torch.Generator().manual_seed(seed)
    max_num_reqs = max_num_reqs or num_reqs
    scores = torch.randn(num_reqs, num_steps, top_k, top_k, generator=g) * spread
    candidates = torch.stack([
        torch.randperm(vocab, generator=g)[:top_k]
        for _ in range(num_reqs * num_steps)
    ]).view(num_reqs, num_steps, top_k)
    if slots is None:
        slots = torch.randperm(max_num_reqs, generator=g)[:num_reqs]
    slots = torch.as_tensor(slots, dtype=torch.int32)
    req_state = slots.repeat_interleave(num_steps)
    positions = torch.randint(8, 200, (num_reqs,), generator=g)
    sample_pos = (positions[:, None] + 1 + torch.arange(num_steps)).reshape(-1)
    return {
        "scores": scores.to(device),
        "candidates": candidates.to(device),
        "req_state": req_state.to(device),
        "sample_pos": sample_pos.to(device),
        "slots": slots,
    }


def launch_walk(module, batch, temperature, seeds, *, probabilistic, fp64=False):
    num_reqs, num_steps, top_k = batch["candidates"].shape
    device = batch["scores"].device
    tokens = torch.full((num_reqs, num_steps), -7, dtype=torch.int64, device=device)
    realized = torch.full((num_reqs, num_steps, top_k), 12345.0, device=device)
    module._selector_walk_kernel[(num_reqs,)](
        batch["scores"].contiguous(),
        batch["candidates"].contiguous(),
        batch["sample_pos"],
        batch["req_state"],
        temperature,
        seeds,
        tokens,
        realized,
        num_steps=num_steps,
        top_k=top_k,
        BLOCK_K=triton.next_power_of_2(top_k),
        SAMPLE_PROBABILISTIC=probabilistic,
        USE_FP64=fp64,
        num_warps=1,
    )
    return tokens, realized


def launch_cache(module, batch, realized, draft_logits, cached_ids):
    num_reqs, num_steps, top_k = batch["candidates"].shape
    module._cache_draft_logits_kernel[(num_reqs * num_steps,)](
        draft_logits,
        cached_ids,
        batch["candidates"].contiguous(),
        realized,
        batch["req_state"],
        draft_logits.stride(0),
        draft_logits.stride(1),
        num_steps=num_steps,
        top_k=top_k,
        BLOCK_K=triton.next_power_of_2(top_k),
        num_warps=1,
    )


def reference_greedy_walk(scores, candidates):
    """Argmax at each position of the edge row of the previous choice."""
    num_reqs, num_steps, _, _ = scores.shape
    tokens = torch.empty(num_reqs, num_steps, dtype=torch.int64)
    chosen_rows = torch.empty(scores.shape[:3])
    for r in range(num_reqs):
        previous = 0
        for s in range(num_steps):
            row = scores[r, s, previous]
            previous = int(row.argmax())
            tokens[r, s] = candidates[r, s, previous]
            chosen_rows[r, s] = row
    return tokens, chosen_rows


def rows_along(tokens, scores, candidates):
    """The edge rows a walk that produced `tokens` read, position by position."""
    num_reqs, num_steps, _, _ = scores.shape
    rows = torch.empty(scores.shape[:3])
    for r in range(num_reqs):
        previous = 0
        for s in range(num_steps):
            rows[r, s] = scores[r, s, previous]
            previous = int((candidates[r, s] == tokens[r, s]).nonzero())
    return rows


def chi_square_sf(statistic: float, dof: int) -> float:
    """P(chi2_dof >= statistic), via the regularised upper incomplete gamma."""
    return float(torch.special.gammaincc(
        torch.tensor(dof / 2.0, dtype=torch.float64),
        torch.tensor(statistic / 2.0, dtype=torch.float64),
    ))


def chi_square(counts: torch.Tensor, probs: torch.Tensor, min_expected=5.0):
    """Pearson's test, pooling cells whose expectation is below `min_expected`."""
    total = counts.sum()
    expected = probs * total
    order = torch.argsort(expected)
    pooled_obs, pooled_exp, acc_o, acc_e = [], [], 0.0, 0.0
    for i in order.tolist():
        acc_o += float(counts[i])
        acc_e += float(expected[i])
        if acc_e >= min_expected:
            pooled_obs.append(acc_o)
            pooled_exp.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 and pooled_exp:
        pooled_obs[-1] += acc_o
        pooled_exp[-1] += acc_e
    obs = torch.tensor(pooled_obs, dtype=torch.float64)
    exp = torch.tensor(pooled_exp, dtype=torch.float64)
    statistic = float(((obs - exp) ** 2 / exp).sum())
    dof = len(pooled_obs) - 1
    return statistic, dof, chi_square_sf(statistic, dof)


# ----------------------------------------------------------------------------
# Checks


def greedy_walk_matches_reference(num_reqs, num_steps, top_k, seed, probabilistic):
    """Greedy drafting (or temperature 0 in a sampled batch) is an exact argmax walk."""
    vocab = 97
    batch = make_batch(num_reqs, num_steps, top_k, vocab, seed)
    temperature = torch.zeros(num_reqs, dtype=torch.float32)
    # Greedy drafting must ignore the request temperatures entirely.
    if not probabilistic:
        temperature.fill_(0.8)
    seeds = torch.arange(num_reqs, dtype=torch.int64) + 11
    tokens, realized = launch_walk(ours, batch, temperature, seeds,
                                   probabilistic=probabilistic)
    expected, rows = reference_greedy_walk(batch["scores"], batch["candidates"])
    result = {"tokens_equal": bool(torch.equal(tokens, expected))}
    if probabilistic:
        # Temperature 0: the cached distribution is the raw scores walked.
        result["realized_equal"] = bool(torch.equal(realized, rows))
    return result


def sampled_walk_follows_softmax(temperature, num_samples, top_k, num_steps, seed):
    """Path frequencies over many seeds match the product of softmax(row / T)."""
    vocab = 50
    one = make_batch(1, num_steps, top_k, vocab, seed, spread=1.0)
    batch = {
        "scores": one["scores"].expand(num_samples, -1, -1, -1).contiguous(),
        "candidates": one["candidates"].expand(num_samples, -1, -1).contiguous(),
        "req_state": torch.arange(num_samples, dtype=torch.int32).repeat_interleave(num_steps),
        "sample_pos": one["sample_pos"].repeat(num_samples),
    }
    temps = torch.full((num_samples,), temperature, dtype=torch.float32)
    seeds = torch.randint(0, 2**62, (num_samples,), generator=torch.Generator().manual_seed(seed))
    started = time.monotonic()
    tokens, _ = launch_walk(ours, batch, temps, seeds, probabilistic=True)
    elapsed = time.monotonic() - started

    # Index each sampled path in base top_k and compare with the exact path law.
    candidates = one["candidates"][0]
    scores = one["scores"][0].double()
    choice = torch.stack([
        (candidates[s][None, :] == tokens[:, s][:, None]).int().argmax(1)
        for s in range(num_steps)
    ], dim=1)
    path_index = (choice * (top_k ** torch.arange(num_steps - 1, -1, -1))).sum(1)
    counts = torch.bincount(path_index, minlength=top_k ** num_steps).double()

    def path_law(temp):
        law = torch.ones(1, dtype=torch.float64)
        for s in range(num_steps):
            step_probs = []
            for path in range(law.numel()):
                previous = path % top_k if s > 0 else 0
                step_probs.append(law[path] * torch.softmax(scores[s, previous] / temp, -1))
            law = torch.cat(step_probs)
        return law

    stat, dof, p_value = chi_square(counts, path_law(temperature))
    # Power check: the same counts against the law without temperature.
    _, _, p_untempered = chi_square(counts, path_law(1.0))
    return {
        "p_value": p_value,
        "statistic": stat,
        "dof": dof,
        "p_value_against_untempered": p_untempered,
        "seconds": elapsed,
    }


def draft_noise_salt() -> int:
    """gumbel.py's `_DRAFT_NOISE_SALT` (the draft-noise-salt fix), 0 without it."""
    from vllm.v1.worker.gpu.sample import gumbel

    salt = getattr(gumbel, "_DRAFT_NOISE_SALT", 0)
    return int(getattr(salt, "value", salt))


def step_seeds(seeds: torch.Tensor, step: int) -> torch.Tensor:
    """The seeds a draw at draft step `step` is keyed with: the request's, with
    the step in their high 32 bits where gumbel.py has `spec_step_seed` (the
    spec-step-seed fix, vLLM 0.33.0's formula)."""
    from vllm.v1.worker.gpu.sample import gumbel

    return seeds ^ (step << 32) if hasattr(gumbel, "spec_step_seed") else seeds


def sampled_walk_keys_like_verification(num_reqs, num_steps, top_k, seed, fp64):
    """Each draw equals 0.27.1's own Gumbel sampler keyed at position Q-1,
    moved by the draft's salt where vLLM has one, with the draft step mixed
    into the seed where vLLM has `spec_step_seed`.

    0.27.1 samples a target token at position Q with gumbel_sample over the
    vocabulary, keyed by the seed and the input position Q-1, noise indexed by
    token id. Laying the walked row out over the vocabulary (-inf elsewhere)
    and sampling it that way at Q-1 plus the salt must give the walk's token,
    draw for draw; at Q-1 itself (verification's own key) it must not, where
    the salt is there.
    """
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample

    salt = draft_noise_salt()

    vocab = 64
    max_num_reqs = num_reqs + 3
    batch = make_batch(num_reqs, num_steps, top_k, vocab, seed, max_num_reqs=max_num_reqs)
    g = torch.Generator().manual_seed(seed + 1)
    temps = (torch.rand(max_num_reqs, generator=g) * 1.5 + 0.25).float()
    seeds = torch.randint(0, 2**62, (max_num_reqs,), generator=g)
    tokens, _ = launch_walk(ours, batch, temps, seeds, probabilistic=True, fp64=fp64)

    def verify(key_offset):
        """Tokens 0.27.1's sampler draws along the walked path, keyed at Q + key_offset."""
        drawn = torch.empty_like(tokens)
        for r in range(num_reqs):
            previous = 0
            slot = batch["slots"][r : r + 1]
            for s in range(num_steps):
                logits = torch.full((1, vocab), NEG_INF)
                logits[0, batch["candidates"][r, s]] = batch["scores"][r, s, previous]
                q = batch["sample_pos"][r * num_steps + s : r * num_steps + s + 1]
                token = gumbel_sample(logits, slot, temps, step_seeds(seeds, s),
                                      q + key_offset, apply_temperature=True, use_fp64=fp64)
                drawn[r, s] = token[0]
                previous = int((batch["candidates"][r, s] == tokens[r, s]).nonzero())
        return drawn

    matches = verify(salt - 1)
    return {
        "salt": salt,
        "steps_mixed": not torch.equal(step_seeds(seeds, 1), seeds),
        "draws_equal_at_q_minus_1": bool(torch.equal(tokens, matches)),
        "mismatches": int((tokens != matches).sum()),
        "draws": tokens.numel(),
        "draws_equal_at_q": bool(torch.equal(tokens, verify(salt))),
        "draws_equal_at_q_minus_2": bool(torch.equal(tokens, verify(salt - 2))),
        "draws_equal_at_verifications_key": bool(torch.equal(tokens, verify(-1))),
    }


def cache_holds_tempered_scores(num_reqs, num_steps, top_k, seed):
    """Cached draft logits: scores / T at the candidate columns, -inf elsewhere."""
    vocab = 61
    max_num_reqs = num_reqs + 2
    batch = make_batch(num_reqs, num_steps, top_k, vocab, seed, max_num_reqs=max_num_reqs)
    g = torch.Generator().manual_seed(seed + 5)
    temps = (torch.rand(max_num_reqs, generator=g) * 1.5 + 0.25).float()
    # One request greedy inside the sampled batch: 0.27.1 caches raw logits then.
    temps[batch["slots"][0]] = 0.0
    seeds = torch.randint(0, 2**62, (max_num_reqs,), generator=g)
    tokens, realized = launch_walk(ours, batch, temps, seeds, probabilistic=True)
    draft_logits = torch.full((max_num_reqs, num_steps, vocab), NEG_INF)
    cached_ids = torch.zeros(max_num_reqs, num_steps, top_k, dtype=torch.int64)
    launch_cache(ours, batch, realized, draft_logits, cached_ids)

    rows = rows_along(tokens, batch["scores"], batch["candidates"])
    expected = torch.full_like(draft_logits, NEG_INF)
    for r in range(num_reqs):
        slot = int(batch["slots"][r])
        t = float(temps[slot])
        for s in range(num_steps):
            values = rows[r, s] / temps[slot] if t != 0.0 else rows[r, s]
            expected[slot, s, batch["candidates"][r, s]] = values
    used = set(batch["slots"].tolist())
    untouched = [i for i in range(max_num_reqs) if i not in used]
    return {
        "cache_equal": bool(torch.equal(draft_logits, expected)),
        "max_abs_diff": float(torch.nan_to_num(
            (draft_logits - expected).abs(), nan=0.0, posinf=0.0).max()),
        "finite_per_row": sorted({int(x) for x in torch.isfinite(draft_logits).sum(-1).view(-1)}),
        "unused_slots_untouched": bool(torch.isneginf(draft_logits[untouched]).all()),
        "ids_recorded": bool(all(
            torch.equal(cached_ids[int(batch["slots"][r])], batch["candidates"][r])
            for r in range(num_reqs))),
    }


def cache_write_clears_previous_columns(top_k, overlap, seed):
    """A second draft step leaves only its own candidates in the cache."""
    vocab = 40
    num_steps = 3
    slots = [2, 0, 1]
    first = make_batch(3, num_steps, top_k, vocab, seed, max_num_reqs=4, slots=slots)
    second = make_batch(3, num_steps, top_k, vocab, seed + 1, max_num_reqs=4, slots=slots)
    # Share `overlap` candidates between the steps, in shuffled lanes, so a
    # column is both cleared and rewritten.
    for r in range(3):
        for s in range(num_steps):
            old = first["candidates"][r, s]
            keep = old[:overlap].flip(0)
            fresh = [c for c in range(vocab) if c not in old.tolist()][: top_k - overlap]
            second["candidates"][r, s] = torch.cat([torch.tensor(fresh, dtype=torch.int64), keep])
    temps = torch.full((4,), 0.9)
    seeds = torch.arange(4, dtype=torch.int64)
    draft_logits = torch.full((4, num_steps, vocab), NEG_INF)
    cached_ids = torch.zeros(4, num_steps, top_k, dtype=torch.int64)
    for batch in (first, second):
        tokens, realized = launch_walk(ours, batch, temps, seeds, probabilistic=True)
        launch_cache(ours, batch, realized, draft_logits, cached_ids)
    rows = rows_along(tokens, second["scores"], second["candidates"])
    ok = True
    for r, slot in enumerate(slots):
        for s in range(num_steps):
            expected = torch.full((vocab,), NEG_INF)
            expected[second["candidates"][r, s]] = rows[r, s] / temps[slot]
            ok &= bool(torch.equal(draft_logits[slot, s], expected))
    return {
        "only_latest_columns": ok,
        "finite_per_row": sorted(
            {int(x) for x in torch.isfinite(draft_logits[:3]).sum(-1).view(-1)}),
    }


def padding_rows_are_inert(num_live, num_padding, seed):
    """Rows mapped to -1 write no token, no realized score and no cache column."""
    vocab = 33
    num_steps, top_k = 3, 4
    live_slots = list(range(1, num_live + 1))
    batch = make_batch(num_live + num_padding, num_steps, top_k, vocab, seed,
                       max_num_reqs=num_live + 1,
                       slots=live_slots + [-1] * num_padding)
    temps = torch.full((num_live + 1,), 0.7)
    seeds = torch.arange(num_live + 1, dtype=torch.int64)
    # Slot 0 holds a live distribution from an earlier step.
    draft_logits = torch.full((num_live + 1, num_steps, vocab), NEG_INF)
    draft_logits[0, :, :top_k] = 1.5
    cached_ids = torch.zeros(num_live + 1, num_steps, top_k, dtype=torch.int64)
    cached_ids[0] = torch.arange(top_k)
    before_logits, before_ids = draft_logits.clone(), cached_ids.clone()
    tokens, realized = launch_walk(ours, batch, temps, seeds, probabilistic=True)
    launch_cache(ours, batch, realized, draft_logits, cached_ids)
    pad = slice(num_live, None)
    return {
        "padding_tokens_untouched": bool((tokens[pad] == -7).all()),
        "padding_realized_untouched": bool((realized[pad] == 12345.0).all()),
        "slot0_logits_unchanged": bool(torch.equal(draft_logits[0], before_logits[0])),
        "slot0_ids_unchanged": bool(torch.equal(cached_ids[0], before_ids[0])),
        "live_rows_written": bool(torch.isfinite(draft_logits[1:]).sum(-1).eq(top_k).all()),
    }


def walk_matches_upstream(num_reqs, num_steps, top_k, seed, temperature):
    """Same tokens as upstream's walk; its raw-score cache is ours times T.

    Upstream keys its draws as we do, so the sampled tokens agree draw for
    draw: 0.28.0's walk at the positions given, the walk from 0.29.0 on at
    those plus the draft's salt (`IS_DRAFTING=True`), which is the draw ours
    makes where vLLM has the salt; from 0.33.0 on, each step with its seed
    mixed (`spec_step_seed`), which ours does where vLLM has it. 0.28.0's
    walk takes one seed per request, so it walks here one step at a time,
    along the edge rows our walk reached, each step on its own seed.
    Upstream caches pre-temperature scores (0.28.0 divides on load), where
    0.27.1 needs them divided already.
    """
    upstream = common.load_upstream(common.UPSTREAM_SPECULATOR, ARGS["upstream"],
                                    "upstream_speculator")
    vocab = 70
    batch = make_batch(num_reqs, num_steps, top_k, vocab, seed, max_num_reqs=num_reqs)
    temps = torch.full((num_reqs,), temperature, dtype=torch.float32)
    seeds = torch.arange(num_reqs, dtype=torch.int64) * 7919
    mine, mine_realized = launch_walk(ours, batch, temps, seeds, probabilistic=True)
    rows = rows_along(mine, batch["scores"], batch["candidates"])
    salted_pos = (batch["sample_pos"] + draft_noise_salt()).view(num_reqs, num_steps)
    theirs = torch.empty_like(mine)
    theirs_realized = torch.empty_like(mine_realized)
    for s in range(num_steps):
        step_scores = torch.zeros(num_reqs, 1, top_k, top_k)
        step_scores[:, 0, 0] = rows[:, s]  # a first step reads edge row 0
        one_step = {
            "scores": step_scores,
            "candidates": batch["candidates"][:, s : s + 1],
            "req_state": batch["slots"],
            "sample_pos": salted_pos[:, s].contiguous(),
        }
        tokens, realized = launch_walk(upstream, one_step, temps, step_seeds(seeds, s),
                                       probabilistic=True)
        theirs[:, s], theirs_realized[:, s] = tokens[:, 0], realized[:, 0]
    ours_cache = torch.full((num_reqs, num_steps, vocab), NEG_INF)
    theirs_cache = ours_cache.clone()
    launch_cache(ours, batch, mine_realized, ours_cache,
                 torch.zeros(num_reqs, num_steps, top_k, dtype=torch.int64))
    launch_cache(upstream, batch, theirs_realized, theirs_cache,
                 torch.zeros(num_reqs, num_steps, top_k, dtype=torch.int64))
    finite = torch.isfinite(theirs_cache)
    return {
        "tokens_equal": bool(torch.equal(mine, theirs)),
        "same_columns": bool(torch.equal(finite, torch.isfinite(ours_cache))),
        "cache_is_upstream_over_t": bool(torch.equal(
            ours_cache[finite], theirs_cache[finite] / temperature)),
    }


CHECKS = {f.__name__: f for f in (
    greedy_walk_matches_reference,
    sampled_walk_follows_softmax,
    sampled_walk_keys_like_verification,
    cache_holds_tempered_scores,
    cache_write_clears_previous_columns,
    padding_rows_are_inert,
    walk_matches_upstream,
)}


if __name__ == "__main__":
    ARGS.update(json.loads(sys.argv[1]))
    common.run_checks(CHECKS, ARGS, modules=(ours,))
