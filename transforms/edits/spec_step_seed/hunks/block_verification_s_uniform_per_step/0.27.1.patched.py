step_seed = spec_step_seed(seed, i) if USE_BLOCK_VERIFICATION else seed
u = tl_rand32(step_seed, pos, includes_zero=False)
