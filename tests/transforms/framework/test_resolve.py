"""A writer rewrites only what its judge judged: the path must still lead to
a statement of the kind, name and meaning the judge saw there."""

import pytest

from dflash2_backport.transforms.edits.gumbel.judge import GUMBEL
from dflash2_backport.transforms.framework.source import Source
from dflash2_backport.transforms.framework.vocabulary import Direction, State
from dflash2_backport.transforms.framework.writing import SiteMoved, rewrite

from .._cases import swap
from tests.transforms.edits.test_gumbel import PENDING

ANCHOR = "def gumbel_block_argmax("

# what happens to the file between judging and writing -> whether it is written
CHANGES = {
    "nothing": (PENDING, True),
    "a function added above the anchor: found by its name": (
        swap(PENDING, "\n@triton.jit\n" + ANCHOR, "\ndef other():\n    pass\n\n\n@triton.jit\n" + ANCHOR),
        True,
    ),
    "the anchor's body changed": (
        swap(PENDING, "    return value, idx\n", "    return idx, value\n"),
        False,
    ),
    "the anchor renamed": (swap(PENDING, ANCHOR, "def gumbel_block_argmax2("), False),
}


@pytest.mark.parametrize("changed, written", CHANGES.values(), ids=CHANGES.keys())
def test_a_writer_rewrites_only_what_was_judged(changed: str, written: bool) -> None:
    source = Source(PENDING)
    judged = GUMBEL.pinned(source, GUMBEL.judged(source, Direction.APPLY))
    assert judged[GUMBEL.hunks[0].name].state is State.PENDING
    if written:
        out = rewrite(changed.encode(), [(GUMBEL, judged)], Direction.APPLY)
        assert b"def gumbel_noised_argmax(" in out
    else:
        with pytest.raises(SiteMoved):
            rewrite(changed.encode(), [(GUMBEL, judged)], Direction.APPLY)
