"""Writes the draft noise stream: the salt, the drafting flag through
gumbel.py's sampler, and `is_drafting=True` where drafts are drawn, over
0.27.1's statements where the two differ (writers/rewrites.py); backwards,
0.27.1's."""

from __future__ import annotations

import libcst as cst

from ..draft_noise_salt import DRAFT_SAMPLING, DSPARK_SAMPLING, GUMBEL_STREAMS
from ..edit import Hunk, Site
from .protocol import Writer
from .rewrites import rewritten_run


def _forward(writer: Writer, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
    assert hunk.before is not None
    return rewritten_run(writer, tree, site, hunk.before, hunk.after)


def _backward(writer: Writer, tree: cst.Module, hunk: Hunk, site: Site) -> cst.Module:
    assert hunk.before is not None
    return rewritten_run(writer, tree, site, hunk.after, hunk.before)


class GumbelStreams(Writer):
    EDIT = GUMBEL_STREAMS
    forward = _forward
    backward = _backward


class DraftSampling(Writer):
    EDIT = DRAFT_SAMPLING
    forward = _forward
    backward = _backward


class DSparkSampling(Writer):
    EDIT = DSPARK_SAMPLING
    forward = _forward
    backward = _backward
