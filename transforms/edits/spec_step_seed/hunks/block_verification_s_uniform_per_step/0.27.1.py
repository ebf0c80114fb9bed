u = tl_rand32(seed, pos, includes_zero=False)
