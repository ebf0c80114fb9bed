@triton.jit
def tl_rand32(seed, offset, includes_zero: tl.constexpr):
    u = tl.rand(seed, offset)
    if not includes_zero:
        u = tl.maximum(u, _TL_RAND_MIN)
    return u


@triton.jit
def spec_step_seed(seed, step):
    """The seed of a request's draws at one draft step: the step goes into the
    seed's high 32 bits, so that each step of a block draws on a stream of its
    own and a position drafted again at another step draws afresh."""
    return seed ^ (tl.cast(step, tl.int64) << 32)
