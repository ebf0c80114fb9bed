_TL_RAND_MIN = tl.constexpr(4.6566127342e-10) if HAS_TRITON else 4.6566127342e-10

# Added to a draft's sampling positions, so that its Gumbel noise is never
# the noise verification resamples with after rejecting it: verification is
# a probability-ratio test, and a proposal correlated with the residual draw
# biases the output. Positions never come near 2**30.
_DRAFT_NOISE_SALT = tl.constexpr(1 << 30) if HAS_TRITON else (1 << 30)
