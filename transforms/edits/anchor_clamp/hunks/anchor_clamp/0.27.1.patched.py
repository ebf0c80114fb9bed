def dflash_anchors_in_vocab(
    anchor_token_ids: torch.Tensor, vocab_size: int
) -> torch.Tensor:
    """Anchor (bonus) token ids clamped into a draft's vocabulary.

    A request still in chunked prefill anchors its draft block on its next
    prompt token, which can lie past the draft's vocabulary (a multimodal
    placeholder, say). A draft that looks the anchor up in tables of its own
    must keep it in range; that request's draft is discarded anyway.
    """
    return anchor_token_ids.clamp(0, vocab_size - 1)
