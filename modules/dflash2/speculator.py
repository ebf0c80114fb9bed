# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
# Backported to vLLM 0.27.1 by dflash2-backport.
"""DFlash2 speculator for the V2 model runner of vLLM 0.27.1.

One draft forward proposes the whole block; the draft head's top-K candidates
at every position and the selector's edge scores between consecutive
positions then go to a small Triton walk that picks one path, greedily or by
Gumbel-max sampling.

What 0.27.1 dictates here, unlike later vLLM:

* The rejection sampler reads `draft_logits` as they are, so for a sampled
  request the cache holds the temperature-applied scores the walk sampled
  from (later vLLM caches raw scores and divides on load).
* 0.27.1 fills `sample_idx_mapping` with 0 before CUDA-graph capture, and the
  capture's warm-up runs execute the kernels. This speculator keeps padding
  rows at -1 instead, so they never write into request slot 0's cache.
* A sampled draft draws its Gumbel noise on a stream of its own where vLLM
  has one (gumbel.py's `_DRAFT_NOISE_SALT`, from 0.29.0 and from this
  project's draft-noise-salt fix): drawn from the stream verification
  resamples with after a rejection, it would bias the output. Where vLLM
  has none, the walk draws as 0.28.0's does.
* Each draft step of the walk draws on a seed of its own where vLLM has
  `spec_step_seed` (gumbel.py, from 0.33.0 and from this project's
  spec-step-seed fix): a position drafted again after a block that block
  verification truncated would otherwise reuse the noise of a proposal that
  already took part in a decision. Where vLLM has none, every step draws on
  the request's seed, as 0.28.0's walk does.
"""

from typing import Any

import torch

from vllm.config import VllmConfig
from vllm.config.compilation import CUDAGraphMode
from vllm.logger import init_logger
from vllm.triton_utils import HAS_TRITON, tl, triton
from vllm.v1.worker.gpu.sample import gumbel
from vllm.v1.worker.gpu.sample.gumbel import gumbel_noised_argmax
from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator

logger = init_logger(__name__)


def _draft_noise_salt() -> int:
    """What vLLM adds to a draft's sampling position so that its noise is not
    verification's (a Triton constexpr there), or 0 where it adds nothing."""
    salt = getattr(gumbel, "_DRAFT_NOISE_SALT", 0)
    return int(getattr(salt, "value", salt))


# Read once, at import: the file is the same whichever edits the tree carries.
_DRAFT_POSITION_SALT = (
    tl.constexpr(_draft_noise_salt()) if HAS_TRITON else _draft_noise_salt()
)

# The seed of a draft step's draw: vLLM's own where it mixes the step in,
# else the request's seed for every step, as 0.28.0's walk draws.
_step_seed = getattr(gumbel, "spec_step_seed", None)
if _step_seed is None:

    @triton.jit
    def _step_seed(seed, step):
        return seed


@triton.jit
def _selector_walk_kernel(
    scores_ptr,  # [num_reqs, num_steps, top_k (previous), top_k (current)]
    candidate_ptr,  # [num_reqs, num_steps, top_k]
    sample_pos_ptr,  # [num_reqs * num_steps]
    req_state_ptr,  # [num_reqs * num_steps]
    temperature_ptr,  # [max_num_reqs]
    seeds_ptr,  # [max_num_reqs]
    tokens_ptr,  # [num_reqs, num_steps]
    realized_scores_ptr,  # [num_reqs, num_steps, top_k]
    num_steps: tl.constexpr,
    top_k: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SAMPLE_PROBABILISTIC: tl.constexpr,
    USE_FP64: tl.constexpr,
):
    # One program walks one request's block, position by position: the scores
    # at a position depend on the candidate chosen at the previous one.
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK_K)
    req_state = tl.load(req_state_ptr + row * num_steps)
    live = req_state >= 0
    mask = (lanes < top_k) & live
    if SAMPLE_PROBABILISTIC:
        temperature = tl.load(temperature_ptr + req_state, mask=live, other=0.0)
    else:
        temperature = 0.0
    seed = tl.load(seeds_ptr + req_state, mask=live, other=0)

    previous = 0
    for step in range(num_steps):
        flat = row * num_steps + step
        # The edge row of the candidate chosen one position earlier; at
        # position 0 every row is the anchor's, so row 0 will do.
        scores = tl.load(
            scores_ptr + (flat * top_k + previous) * top_k + lanes,
            mask=mask,
            other=float("-inf"),
        ).to(tl.float32)
        if temperature != 0.0:
            # Divided here, in fp32, exactly as 0.27.1's own Gumbel sampler
            # divides, so that the distribution cached below is bit for bit
            # the one this draw samples from.
            scores = scores / temperature
        candidates = tl.load(
            candidate_ptr + flat * top_k + lanes, mask=mask, other=0
        )
        # sample_pos holds the drafted token's position Q. A draw at Q is
        # keyed by the predecessor's position, Q - 1, and the token id keys
        # the noise within it, as over the vocabulary; the salt then moves a
        # draft's draw off the stream verification resamples with (adding it
        # here is the draw 0.29.0's IS_DRAFTING=True makes).
        position = tl.load(sample_pos_ptr + flat) - 1 + _DRAFT_POSITION_SALT
        _, index = gumbel_noised_argmax(
            scores,
            candidates,
            mask,
            _step_seed(seed, step),
            position,
            temperature,
            USE_FP64=USE_FP64,
            APPLY_TEMPERATURE=False,
        )
        if SAMPLE_PROBABILISTIC:
            tl.store(realized_scores_ptr + flat * top_k + lanes, scores, mask=mask)
        token = tl.load(candidate_ptr + flat * top_k + index, mask=live, other=0)
        tl.store(tokens_ptr + flat, token, mask=live)
        previous = index


@triton.jit
def _cache_draft_logits_kernel(
    draft_logits_ptr,  # [max_num_reqs, num_steps, vocab_size]
    cached_candidate_ptr,  # [max_num_reqs, num_steps, top_k]
    candidate_ptr,  # [num_reqs * num_steps, top_k]
    scores_ptr,  # [num_reqs * num_steps, top_k]
    req_state_ptr,  # [num_reqs * num_steps]
    draft_logits_stride_0,
    draft_logits_stride_1,
    num_steps: tl.constexpr,
    top_k: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # The cache is a sparse distribution: -inf everywhere except the K
    # candidate columns of the last draft. Each write must therefore clear the
    # previous draft's columns, which `cached_candidate_ptr` remembers.
    flat = tl.program_id(0)
    req_state = tl.load(req_state_ptr + flat)
    if req_state < 0:
        return
    # int64: max_num_reqs * num_steps * vocab_size passes 2**31 at real sizes.
    req_state = req_state.to(tl.int64)
    step = flat % num_steps
    lanes = tl.arange(0, BLOCK_K)
    in_k = lanes < top_k

    slot_ids_ptr = cached_candidate_ptr + (req_state * num_steps + step) * top_k
    row_ptr = (
        draft_logits_ptr
        + req_state * draft_logits_stride_0
        + step * draft_logits_stride_1
    )
    old_ids = tl.load(slot_ids_ptr + lanes, mask=in_k, other=-1)
    new_ids = tl.load(candidate_ptr + flat * top_k + lanes, mask=in_k, other=-1)
    values = tl.load(scores_ptr + flat * top_k + lanes, mask=in_k)

    # Clear only the columns that the new draft does not rewrite: a clear and
    # a write of the same column from two lanes would race.
    matches = tl.sum(
        ((old_ids[:, None] == new_ids[None, :]) & in_k[None, :]).to(tl.int32),
        axis=1,
    )
    stale = in_k & (matches == 0)
    tl.store(row_ptr + old_ids, float("-inf"), mask=stale)
    tl.store(row_ptr + new_ids, values, mask=in_k)
    tl.store(slot_ids_ptr + lanes, new_ids, mask=in_k)


class DFlash2Speculator(DFlashSpeculator):
    _speculator_name = "DFlash2"

    def __init__(self, vllm_config: VllmConfig, device: torch.device):
        super().__init__(vllm_config, device)
        draft_config = self.draft_model_config.hf_config.dflash_config
        self.selector_top_k = int(draft_config["selector_top_k"])
        # Query slot of each request's anchor (bonus) token.
        self._anchor_indices = (
            torch.arange(self.max_num_reqs, dtype=torch.int64, device=device)
            * self.num_query_per_req
        )
        # The scores each walk step chose from, as cached (temperature applied).
        self._selector_scores = torch.empty(
            self.max_num_reqs,
            self.num_speculative_steps,
            self.selector_top_k,
            dtype=torch.float32,
            device=device,
        )
        # Which columns of draft_logits[slot, step] currently hold a score.
        self._cached_candidate_ids = torch.zeros(
            self._selector_scores.shape, dtype=torch.int64, device=device
        )

    # 0.27.1's base allocates this buffer with zeros, i.e. every unused row
    # aimed at slot 0. Making it inert on assignment, rather than after
    # super().__init__(), holds whoever allocates it and whenever: a base
    # constructor stubbed out in a test need not provide it at all.
    @property
    def sample_idx_mapping(self) -> torch.Tensor:
        return self._sample_idx_mapping

    @sample_idx_mapping.setter
    def sample_idx_mapping(self, buffer: torch.Tensor) -> None:
        buffer.fill_(-1)
        self._sample_idx_mapping = buffer

    def draft_logits_spec(self, vllm_config: VllmConfig) -> tuple[torch.dtype, float]:
        # fp32, so the rejection sampler reads the values the walk sampled
        # from; -inf, because only the K candidate columns are ever written
        # and an unwritten 0.0 would be a real candidate to the sampler.
        return torch.float32, float("-inf")

    def capture(self) -> None:
        # As DFlashSpeculator.capture, except that padding rows are -1 rather
        # than 0: the warm-up runs of the capture execute the walk and the
        # cache write, and with 0 every padding row would write into slot 0,
        # leaving columns there that its remembered ids do not cover and so no
        # later draft clears.
        logger.info("Capturing model for %s speculator...", self._speculator_name)
        self.sample_indices.zero_()
        self.sample_pos.zero_()
        self.sample_idx_mapping.fill_(-1)
        assert self.query_cudagraph_manager is not None
        self.query_cudagraph_manager.capture(
            self._generate_draft,
            self.input_buffers,
            self.block_tables,
            self.attn_groups,
            self.kv_cache_config,
            self.max_model_len,
            causal=self._group_causal,
            progress_bar_desc=f"Capturing {self._speculator_name.lower()} CUDA graphs",
        )

    def _sample_path(
        self,
        candidate_ids: torch.Tensor,
        scores: torch.Tensor,
        num_reqs: int,
    ) -> None:
        """Walk one path per request into draft_tokens.

        Greedy unless the draft samples (draft_logits is allocated); then each
        request samples at its own temperature, 0 meaning greedy.
        """
        _selector_walk_kernel[(num_reqs,)](
            scores.contiguous(),
            candidate_ids.contiguous(),
            self.sample_pos,
            self.sample_idx_mapping,
            self.temperature,
            self.seeds,
            self.draft_tokens,
            self._selector_scores,
            num_steps=self.num_speculative_steps,
            top_k=self.selector_top_k,
            BLOCK_K=triton.next_power_of_2(self.selector_top_k),
            SAMPLE_PROBABILISTIC=self.draft_logits is not None,
            USE_FP64=self.use_fp64_gumbel,
            num_warps=1,
        )

    def _cache_draft_logits(self, candidate_ids: torch.Tensor, num_sample: int) -> None:
        """Store the walked distributions where 0.27.1's rejection sampler reads them."""
        draft_logits = self.draft_logits
        assert draft_logits is not None
        _cache_draft_logits_kernel[(num_sample,)](
            draft_logits,
            self._cached_candidate_ids,
            candidate_ids.contiguous(),
            self._selector_scores,
            self.sample_idx_mapping,
            draft_logits.stride(0),
            draft_logits.stride(1),
            num_steps=self.num_speculative_steps,
            top_k=self.selector_top_k,
            BLOCK_K=triton.next_power_of_2(self.selector_top_k),
            num_warps=1,
        )

    def _generate_draft(
        self,
        num_reqs: int,
        num_tokens_padded: int,
        attn_metadata: dict[str, Any] | None,
        slot_mappings: dict[str, torch.Tensor] | None,
        num_tokens_across_dp: torch.Tensor | None,
        cudagraph_runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE,
    ) -> None:
        last_hidden_states = self._run_model(
            num_tokens_padded,
            attn_metadata,
            slot_mappings,
            num_tokens_across_dp,
            cudagraph_runtime_mode,
        )
        num_steps = self.num_speculative_steps
        num_sample = num_reqs * num_steps
        hidden_states = last_hidden_states[self.sample_indices[:num_sample]]
        candidate_ids, unary_logits = self.model.compute_candidates(hidden_states)
        candidate_ids = candidate_ids.view(num_reqs, num_steps, self.selector_top_k)
        unary_logits = unary_logits.view(num_reqs, num_steps, self.selector_top_k)
        anchor_token_ids = self.input_buffers.input_ids[self._anchor_indices[:num_reqs]]
        scores = self.model.model.candidate_selector(
            candidate_ids,
            unary_logits,
            hidden_states.view(num_reqs, num_steps, -1),
            anchor_token_ids,
        )
        self._sample_path(candidate_ids, scores, num_reqs)
        if self.draft_logits is not None:
            self._cache_draft_logits(candidate_ids, num_sample)
