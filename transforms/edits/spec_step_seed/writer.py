"""Writes the per-step seed: `spec_step_seed` after `tl_rand32` in gumbel.py,
and its import and block verification's draw in the rejection sampler, over
0.27.1's statements where the two differ (framework/writing/by_difference.py); backwards,
0.27.1's."""

from __future__ import annotations

from .judge import BLOCK_UNIFORM, STEP_SEED
from ...framework.writing.by_difference import StatementRunWriter


class StepSeed(StatementRunWriter):
    EDIT = STEP_SEED


class BlockUniform(StatementRunWriter):
    EDIT = BLOCK_UNIFORM
