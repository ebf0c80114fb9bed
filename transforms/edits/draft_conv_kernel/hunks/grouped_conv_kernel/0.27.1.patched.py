@triton.jit
def _dflash2_grouped_conv_kernel(
    x_ptr,  # [num_tokens, channels]
    delta_ptr,  # [num_tokens, taps, num_groups], any strides
    base_ptr,  # [taps, channels]
    out_ptr,  # [num_tokens, channels]
    x_row_stride,
    delta_row_stride,
    delta_tap_stride,
    base_tap_stride,
    out_row_stride,
    channels,
    block_size,
    GROUP_SIZE: tl.constexpr,
    TAPS: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # 64-bit offsets: rows times channels may pass 2**31 in a large batch.
    row = tl.program_id(0).to(tl.int64)
    lanes = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_row = lanes < channels
    groups = lanes // GROUP_SIZE
    slot = row % block_size
    total = tl.zeros([BLOCK_C], dtype=tl.float32)
    for tap in tl.static_range(TAPS):
        # Tap t reads the row t slots earlier, and only within the same
        # draft block: never another request's rows.
        live = in_row & (slot >= tap)
        weight = tl.load(
            base_ptr + tap * base_tap_stride + lanes, mask=live, other=0.0
        ).to(tl.float32) + tl.load(
            delta_ptr + row * delta_row_stride + tap * delta_tap_stride + groups,
            mask=live,
            other=0.0,
        ).to(tl.float32)
        earlier = tl.load(
            x_ptr + (row - tap) * x_row_stride + lanes, mask=live, other=0.0
        ).to(tl.float32)
        total += weight * earlier
    tl.store(out_ptr + row * out_row_stride + lanes, total, mask=in_row)


def dflash2_grouped_conv(
    hidden_states: torch.Tensor,
    delta: torch.Tensor,
    base: torch.Tensor,
    block_size: int,
    group_size: int,
) -> torch.Tensor:
    """A DFlash2 draft's grouped convolution, in one kernel.

    Tap `t` of row `r` adds `(base[t] + delta[r, t]) * hidden_states[r - t]`
    while row `r - t` lies in the same draft block of `block_size` rows, each
    group of `group_size` channels sharing its `delta`; the sum is taken in
    float32 and rounded once to the input's dtype.
    """
    # The kernel steps through rows by their strides and channels one by one.
    hidden_states, delta, base = (
        t if t.stride(-1) == 1 else t.contiguous() for t in (hidden_states, delta, base)
    )
    num_tokens, channels = hidden_states.shape
    output = torch.empty_like(hidden_states)
    if num_tokens == 0:
        return output
    # Below 128 rows (a few requests' draft blocks), half the channels a
    # program: twice the programs, so that a small step still fills the SMs.
    block_c = min(512 if num_tokens < 128 else 1024, triton.next_power_of_2(channels))
    _dflash2_grouped_conv_kernel[(num_tokens, triton.cdiv(channels, block_c))](
        hidden_states,
        delta,
        base,
        output,
        hidden_states.stride(0),
        delta.stride(0),
        delta.stride(1),
        base.stride(0),
        output.stride(0),
        channels,
        block_size,
        GROUP_SIZE=group_size,
        TAPS=base.shape[0],
        BLOCK_C=block_c,
        num_warps=4,
    )
    return output


def _dflash2_grouped_conv_shape(
    hidden_states: torch.Tensor,
    delta: torch.Tensor,
    base: torch.Tensor,
    block_size: int,
    group_size: int,
) -> torch.Tensor:
    return torch.empty_like(hidden_states)


direct_register_custom_op(
    op_name="dflash2_grouped_conv",
    op_func=dflash2_grouped_conv,
    fake_impl=_dflash2_grouped_conv_shape,
    tags=(torch.Tag.needs_fixed_stride_order,),
)
