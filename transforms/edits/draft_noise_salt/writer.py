"""Writes the draft noise stream: the salt, the drafting flag through
gumbel.py's sampler, and `is_drafting=True` where drafts are drawn, over
0.27.1's statements where the two differ (framework/writing/by_difference.py); backwards,
0.27.1's."""

from __future__ import annotations

from .judge import DRAFT_SAMPLING, DSPARK_SAMPLING, GUMBEL_STREAMS
from ...framework.writing.by_difference import StatementRunWriter


class GumbelStreams(StatementRunWriter):
    EDIT = GUMBEL_STREAMS


class DraftSampling(StatementRunWriter):
    EDIT = DRAFT_SAMPLING


class DSparkSampling(StatementRunWriter):
    EDIT = DSPARK_SAMPLING
