"""`gumbel_noised_argmax` against 0.27.1's own Gumbel sampler, in triton's
interpreter.

Each row is one request drawing one token from K candidates. The reference is
0.27.1's `gumbel_sample` (its `gumbel_block_argmax` per vocabulary block) over
a full-vocabulary row that is -inf outside the candidates, where the noise is
keyed by the token id. The candidate form hands `gumbel_noised_argmax` only
the K scores, keyed by their token ids: if both draw the same noise for the
same seed, position and token, they pick the same token on every row. That is
what lets a DFlash2 draft and the target's verification agree.
"""

from __future__ import annotations

import json
import sys

from runtime_guest import attempt, emit, use_triton_interpreter

VOCAB = 2048  # two of gumbel_sample's 1024-wide blocks
K = 8
ROWS = 256
TEMPERATURES = [0.0, 0.3, 1.0, 1.7]


def make_rows(torch, seed: int):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.stack(
        [torch.randperm(VOCAB, generator=generator)[:K] for _ in range(ROWS)]
    )
    scores = torch.randn(ROWS, K, generator=generator) * 2.0
    seeds = torch.randint(0, 2**62, (ROWS,), generator=generator, dtype=torch.int64)
    positions = torch.randint(0, 100_000, (ROWS,), generator=generator, dtype=torch.int64)
    temperature = torch.tensor(
        [TEMPERATURES[i % len(TEMPERATURES)] for i in range(ROWS)], dtype=torch.float32
    )
    return ids, scores, seeds, positions, temperature


def reference_tokens(torch, ids, scores, seeds, positions, temperature, use_fp64):
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample

    logits = torch.full((ROWS, VOCAB), float("-inf"), dtype=torch.float32)
    logits.scatter_(1, ids, scores)
    return gumbel_sample(
        logits,
        torch.arange(ROWS, dtype=torch.int32),
        temperature,
        seeds,
        positions,
        apply_temperature=True,
        use_fp64=use_fp64,
    )


def candidate_kernel():
    """A launcher for `gumbel_noised_argmax` over K candidates per row."""
    from vllm.triton_utils import tl, triton
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_noised_argmax

    # A jit function resolves names through its module's globals, not the
    # enclosing scope.
    globals().update(tl=tl, gumbel_noised_argmax=gumbel_noised_argmax)

    @triton.jit
    def _pick(scores_ptr, ids_ptr, seeds_ptr, pos_ptr, temp_ptr, out_ptr,
              K: tl.constexpr, BLOCK_K: tl.constexpr, USE_FP64: tl.constexpr):
        row = tl.program_id(0)
        offsets = tl.arange(0, BLOCK_K)
        mask = offsets < K
        scores = tl.load(scores_ptr + row * K + offsets, mask=mask,
                         other=float("-inf")).to(tl.float32)
        ids = tl.load(ids_ptr + row * K + offsets, mask=mask, other=0)
        seed = tl.load(seeds_ptr + row)
        pos = tl.load(pos_ptr + row)
        temp = tl.load(temp_ptr + row).to(tl.float32)
        _, index = gumbel_noised_argmax(scores, ids, mask, seed, pos, temp,
                                        USE_FP64=USE_FP64)
        tl.store(out_ptr + row, tl.load(ids_ptr + row * K + index))

    def pick(torch, ids, scores, seeds, positions, temperature, use_fp64):
        out = torch.empty(ROWS, dtype=torch.int64)
        _pick[(ROWS,)](scores.contiguous(), ids.contiguous(), seeds, positions,
                       temperature, out, K=K, BLOCK_K=triton.next_power_of_2(K),
                       USE_FP64=use_fp64)
        return out

    return pick


def agreement(a, b) -> float:
    return float((a == b).float().mean())


def main(seed: int) -> None:
    use_triton_interpreter()
    import torch

    result = {}
    pick = attempt(candidate_kernel)
    result["import"] = {k: v for k, v in pick.items() if k != "value"}
    ids, scores, seeds, positions, temperature = make_rows(torch, seed)
    greedy = temperature == 0.0
    argmax = ids.gather(1, scores.argmax(dim=1, keepdim=True)).squeeze(1)
    for use_fp64 in (False, True):
        name = "fp64" if use_fp64 else "fp32"
        want = reference_tokens(torch, ids, scores, seeds, positions, temperature,
                                use_fp64)
        case = {
            "reference_greedy_is_argmax": agreement(want[greedy], argmax[greedy]),
            # How often noise moves the reference off the argmax: a check that
            # agrees on rows where noise never matters would prove little.
            "reference_sampled_off_argmax": 1.0 - agreement(want[~greedy],
                                                            argmax[~greedy]),
        }
        if pick["ok"]:
            outcome = attempt(lambda: pick["value"](
                torch, ids, scores, seeds, positions, temperature, use_fp64))
            if outcome["ok"]:
                got = outcome["value"]
                case.update(
                    agreement=agreement(got, want),
                    greedy_agreement=agreement(got[greedy], want[greedy]),
                    sampled_agreement=agreement(got[~greedy], want[~greedy]),
                    greedy_is_argmax=agreement(got[greedy], argmax[greedy]),
                )
                # Keyed one position off, the draws should mostly disagree:
                # the match above is the noise, not a tie with the argmax.
                shifted = pick["value"](torch, ids, scores, seeds, positions - 1,
                                        temperature, use_fp64)
                case["shifted_position_sampled_agreement"] = agreement(
                    shifted[~greedy], want[~greedy])
            else:
                case["error"] = outcome["error"]
        result[name] = case
    emit(result)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
