# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
# Backported to vLLM 0.27.1 by dflash2-backport.
"""DFlash2 draft model for Qwen3 targets.

DFlash2 keeps DFlash's block-parallel drafter and adds two things:

* a grouped dynamic depthwise convolution around the attention and MLP of
  every decoder layer, mixing each query slot with the earlier slots of the
  same draft block;
* a candidate selector: the draft head proposes its top-K tokens at every
  block position, and a low-rank bilinear score between consecutive positions
  lets the speculator walk one coherent path through those candidates.

The model reuses the DFlash1 layer, model and wrapper through their
`decoder_layer_cls` / `model_cls` seams, so only what differs lives here.
Parameter names, shapes and dtypes follow the upstream DFlash2 checkpoint
format.
"""

import torch
import torch.nn.functional as F
from torch import nn

from vllm.compilation.backends import set_model_tag
from vllm.compilation.decorators import support_torch_compile
from vllm.config import CacheConfig, VllmConfig
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from . import qwen3_dflash
from .qwen3_dflash import (
    DFlashQwen3DecoderLayer,
    DFlashQwen3ForCausalLM,
    DFlashQwen3Model,
)
from .utils import WeightsMapper, maybe_prefix

# The anchor clamp of vLLM 0.34.0, where the tree holds it: this tool's
# anchor-clamp fix defines it in qwen3_dflash.py, and `apply --only-pr`
# leaves it out, so that the selector indexes its codebook as 0.28.0's does.
# Read once, at import: the file is the same whichever edits the tree carries.
_anchors_in_vocab = getattr(qwen3_dflash, "dflash_anchors_in_vocab", None)
# The convolution as one Triton kernel, as from vLLM 0.31.0, where the tree
# holds it (this tool's draft-conv-kernel fix registers it as a custom op in
# qwen3_dflash.py); elsewhere, and on the CPU, the torch form below, which is
# 0.28.0's.
_conv_kernel_registered = hasattr(qwen3_dflash, "dflash2_grouped_conv")


def _grouped_conv(
    hidden_states: torch.Tensor,
    delta: torch.Tensor,
    base: torch.Tensor,
    block_size: int,
    num_groups: int,
    group_size: int,
    taps: int,
) -> torch.Tensor:
    """Causal depthwise convolution confined to each draft block.

    Rows are laid out request by request, `block_size` query slots each, so a
    row's slot within its block is its index modulo `block_size`. Tap `t`
    mixes in the row `t` slots earlier only while that row is in the same
    block: the convolution must never see another request's tokens. Each
    channel's weight is the static `base` kernel plus a per-token, per-group
    `delta` predicted from the token itself.

    hidden_states: [num_tokens, num_groups * group_size]
    delta:         [num_tokens, taps, num_groups]
    base:          [taps, num_groups * group_size]
    """
    if _conv_kernel_registered and hidden_states.is_cuda:
        return torch.ops.vllm.dflash2_grouped_conv(
            hidden_states, delta, base, block_size, group_size
        )
    num_tokens = hidden_states.shape[0]
    grouped = hidden_states.unflatten(-1, (num_groups, group_size))
    # [num_tokens, taps, num_groups, group_size]
    weights = base.view(1, taps, num_groups, group_size) + delta.unsqueeze(-1)

    slot = torch.arange(num_tokens, device=hidden_states.device)
    if block_size & (block_size - 1) == 0:
        # A mask instead of a modulo when it is exact: integer division is
        # the slow path on GPUs and this runs in every layer, twice.
        slot = slot & (block_size - 1)
    else:
        slot = slot % block_size

    output = weights[:, 0] * grouped
    for tap in range(1, taps):
        # Shift down by `tap` rows, zeros in front; slicing after the pad keeps
        # the shape right even when a batch has fewer rows than taps.
        earlier = F.pad(grouped, (0, 0, 0, 0, tap, 0))[:num_tokens]
        in_block = (slot >= tap).view(-1, 1, 1)
        output += weights[:, tap] * earlier * in_block
    return output.flatten(-2)


class DFlashGroupedConv(nn.Module):
    """The two convolutions that wrap one sublayer (attention or MLP).

    One projection of the sublayer's input predicts the dynamic kernels of
    both sides, so the output side (`finish`) reuses the coefficients that the
    input side (`prepare`) computed, as the checkpoint was trained.
    """

    def __init__(
        self,
        hidden_size: int,
        taps: int,
        group_size: int,
        block_size: int,
        params_dtype: torch.dtype,
        prefix: str,
    ) -> None:
        super().__init__()
        if hidden_size % group_size != 0:
            raise ValueError(
                f"conv_group_size={group_size} must divide hidden_size={hidden_size}."
            )
        self.block_size = block_size
        self.taps = taps
        self.group_size = group_size
        self.num_groups = hidden_size // group_size
        # [side (input, output), taps, hidden_size]
        self.base_kernel = nn.Parameter(
            torch.empty(2, taps, hidden_size, dtype=params_dtype),
            requires_grad=False,
        )
        self.kernel_projection = ReplicatedLinear(
            hidden_size,
            2 * taps * self.num_groups,
            bias=False,
            params_dtype=params_dtype,
            quant_config=None,
            prefix=maybe_prefix(prefix, "kernel_projection"),
            return_bias=False,
        )

    def _convolve(
        self, hidden_states: torch.Tensor, delta: torch.Tensor, side: int
    ) -> torch.Tensor:
        return _grouped_conv(
            hidden_states,
            delta,
            self.base_kernel[side],
            self.block_size,
            self.num_groups,
            self.group_size,
            self.taps,
        )

    def prepare(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Convolve the sublayer's input; return it and the output side's kernels."""
        deltas = self.kernel_projection(hidden_states).view(
            hidden_states.shape[0], 2, self.taps, self.num_groups
        )
        return self._convolve(hidden_states, deltas[:, 0], 0), deltas[:, 1]

    def finish(
        self, hidden_states: torch.Tensor, coefficients: torch.Tensor
    ) -> torch.Tensor:
        """Convolve the sublayer's output with the kernels `prepare` returned."""
        return self._convolve(hidden_states, coefficients, 1)


class DFlash2Qwen3DecoderLayer(DFlashQwen3DecoderLayer):
    def __init__(
        self,
        vllm_config: VllmConfig,
        *,
        config,
        layer_idx: int,
        cache_config: CacheConfig | None = None,
        quant_config: QuantizationConfig | None = None,
        prefix: str = "",
    ) -> None:
        super().__init__(
            vllm_config,
            config=config,
            layer_idx=layer_idx,
            cache_config=cache_config,
            quant_config=quant_config,
            prefix=prefix,
        )
        draft_config = config.dflash_config
        speculative_config = vllm_config.speculative_config
        assert speculative_config is not None
        # The convolution window is one request's query block: the bonus token
        # followed by one mask token per speculative step.
        block_size = 1 + speculative_config.num_speculative_tokens
        conv_args = {
            "hidden_size": config.hidden_size,
            "taps": int(draft_config["conv_kernel_size"]),
            "group_size": int(draft_config["conv_group_size"]),
            "block_size": block_size,
            "params_dtype": vllm_config.model_config.dtype,
        }
        self.attention_conv = DFlashGroupedConv(
            **conv_args, prefix=maybe_prefix(prefix, "attention_conv")
        )
        self.mlp_conv = DFlashGroupedConv(
            **conv_args, prefix=maybe_prefix(prefix, "mlp_conv")
        )

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is not None:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        else:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)

        hidden_states, kernels = self.attention_conv.prepare(hidden_states)
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states)
        hidden_states = self.attention_conv.finish(hidden_states, kernels)

        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)

        hidden_states, kernels = self.mlp_conv.prepare(hidden_states)
        hidden_states = self.mlp(hidden_states)
        hidden_states = self.mlp_conv.finish(hidden_states, kernels)
        return hidden_states, residual


def _score_edges(
    predecessor_table: torch.Tensor,
    successor_table: torch.Tensor,
    candidate_ids: torch.Tensor,
    unary_logits: torch.Tensor,
    hidden: torch.Tensor,
    anchor_token_ids: torch.Tensor,
    top_k: int,
) -> torch.Tensor:
    """Score every (predecessor, candidate) pair at every block position.

    score[b, l, p, c] = unary[b, l, c]
                        + <pred[prev_l[p]] * hidden[b, l], succ[cand_l[c]]>

    where prev_l is position l-1's candidate list, and for l = 0 the anchor
    (bonus) token repeated `top_k` times, so every row of position 0 is the
    same and a walk may start from any of them.

    candidate_ids, unary_logits: [batch, steps, top_k]
    hidden:                      [batch, steps, rank]
    anchor_token_ids:            [batch]
    returns:                     [batch, steps, top_k, top_k]

    A request in chunked prefill anchors on its next prompt token, which can
    lie past the draft's vocabulary; where the tree has the anchor clamp, it
    keeps the codebook lookup in range (that request's draft is discarded).
    """
    if _anchors_in_vocab is not None:
        anchor_token_ids = _anchors_in_vocab(
            anchor_token_ids, predecessor_table.shape[0]
        )
    anchors = anchor_token_ids.view(-1, 1, 1).expand(-1, 1, top_k)
    previous_ids = torch.cat((anchors, candidate_ids[:, :-1]), dim=1)
    # [batch, steps, top_k, rank]
    predecessors = predecessor_table[previous_ids] * hidden.unsqueeze(2)
    successors = successor_table[candidate_ids]
    pairwise = torch.matmul(predecessors, successors.transpose(-1, -2))
    return unary_logits.unsqueeze(2) + pairwise


@support_torch_compile
class CandidateSelector(nn.Module):
    """Low-rank bilinear transition scores between consecutive candidates.

    Each vocabulary entry has a predecessor and a successor code of `rank`
    dimensions; the draft's hidden state at the position, projected to
    `rank`, gates the pairing.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        rank: int,
        top_k: int,
        params_dtype: torch.dtype,
        prefix: str,
    ) -> None:
        super().__init__()
        self.top_k = top_k
        self.predecessor_codebook = nn.Parameter(
            torch.empty(vocab_size, rank, dtype=params_dtype), requires_grad=False
        )
        self.successor_codebook = nn.Parameter(
            torch.empty(vocab_size, rank, dtype=params_dtype), requires_grad=False
        )
        self.hidden_projection = ReplicatedLinear(
            hidden_size,
            rank,
            bias=False,
            params_dtype=params_dtype,
            quant_config=None,
            prefix=maybe_prefix(prefix, "hidden_projection"),
            return_bias=False,
        )

    def forward(
        self,
        candidate_ids: torch.Tensor,
        unary_logits: torch.Tensor,
        hidden_states: torch.Tensor,
        anchor_token_ids: torch.Tensor,
    ) -> torch.Tensor:
        return _score_edges(
            self.predecessor_codebook,
            self.successor_codebook,
            candidate_ids,
            unary_logits,
            self.hidden_projection(hidden_states),
            anchor_token_ids,
            self.top_k,
        )


class DFlash2Qwen3Model(DFlashQwen3Model):
    decoder_layer_cls = DFlash2Qwen3DecoderLayer

    # Later vLLM also accepts the aux-hidden-state encoder under the names
    # some DFlash checkpoints give it; 0.27.1's DFlash model does not, and a
    # DFlash2 checkpoint must load here wherever it loads upstream.
    hf_to_vllm_mapper = DFlashQwen3Model.hf_to_vllm_mapper | WeightsMapper(
        orig_to_new_substr={
            "encoder.output_norm_enc.": "hidden_norm.",
            "encoder.fc.": "fc.",
        }
    )

    def __init__(
        self,
        *,
        vllm_config: VllmConfig,
        start_layer_id: int = 0,
        prefix: str = "",
    ) -> None:
        super().__init__(
            vllm_config=vllm_config,
            start_layer_id=start_layer_id,
            prefix=prefix,
        )
        draft_config = self.config.dflash_config
        self.input_embedding_scale = float(
            draft_config.get("input_embedding_scale", 1.0)
        )
        # A model tag of its own: under the draft head's tag the selector would
        # share (and clobber) the head's torch.compile cache entry.
        with set_model_tag("dflash2_candidate_selector"):
            self.candidate_selector = CandidateSelector(
                hidden_size=self.config.hidden_size,
                vocab_size=self.config.vocab_size,
                rank=int(draft_config["selector_rank"]),
                top_k=int(draft_config["selector_top_k"]),
                params_dtype=vllm_config.model_config.dtype,
                prefix=maybe_prefix(prefix, "candidate_selector"),
            )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().embed_input_ids(input_ids) * self.input_embedding_scale


class DFlash2Qwen3ForCausalLM(DFlashQwen3ForCausalLM):
    model_cls = DFlash2Qwen3Model

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        draft_config = self.config.dflash_config
        softcap = float(draft_config.get("final_logit_softcapping") or 0.0)
        # Candidate scores get the checkpoint's own output scaling, which the
        # DFlash1 logits processor (target-style `logit_scale`) does not know.
        self.candidate_logits_processor = LogitsProcessor(
            vllm_config.model_config.get_vocab_size(),
            scale=float(draft_config.get("output_multiplier", 1.0)),
            soft_cap=softcap if softcap > 0.0 else None,
        )

    def compute_candidates(
        self, hidden_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-K candidate ids (int64) and their float32 scores per position."""
        return self.candidate_logits_processor.get_top_k_tokens(
            self.lm_head, hidden_states, self.model.candidate_selector.top_k
        )


EntryClass = DFlash2Qwen3ForCausalLM
