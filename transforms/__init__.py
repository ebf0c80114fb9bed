"""The spec's edits, in upstream order: `EDITS` is the one list that
registers them.

Adding an edit takes three files and one line:

1. `transforms/<edit>.py`: its hunks (`Hunk`: where, 0.27.1's code, the
   backport's, why), its judge over Python's own parser (a `Judged` per hunk,
   with a `Site` that says where it is and what the writer needs), and its
   declaration (`Edit`: name, file, description, role, hunks, judge, writer).
   `gumbel.py` is a short one to copy.
2. `transforms/writers/<edit>.py`: a `Writer` whose `forward` and `backward`
   rewrite one hunk at its site, with libcst.
3. `tests/transforms/test_<edit>.py`: its CodemodTest tables.
4. Its declaration, one line in `DECLARATIONS` below ("module:NAME").

Everything else derives from `EDITS`, the declarations in that order: the files the tool reads and writes and
the order a commit writes them in (dflash2_backport.layout), `check`, `apply`
and `revert`, the JSON report, `--explain`, the README's table of edits and
the pre-commit hook's file pattern (both tested against it), and the test
trees. A new target file changes the hook's pattern in
.pre-commit-hooks.yaml; the test that compares them prints the new one.

Nothing here imports libcst: `check` judges with Python's parser alone, and
only a command that rewrites a file loads the writers.
"""

from __future__ import annotations

from collections.abc import Sequence

import importlib

from .edit import Edit, Judged, Role
from .source import Source
from .vocabulary import Direction, State


#: The edits, in upstream order, as "module:NAME" of their declarations.
DECLARATIONS = (
    "causality:CAUSALITY",
    "subclass_seams:SUBCLASS_SEAMS",
    "registry:REGISTRY",
    "vocab_parallel_topk:VOCAB_PARALLEL_TOPK",
    "gumbel:GUMBEL",
    "speculator_selection:SPECULATOR_SELECTION",
    "speculator_selection:V2_RUNNER_FORCING",
    "draft_logit_cache:DRAFT_LOGIT_CACHE",
    "dflash_input_guards:DFLASH_INPUT_GUARDS",
    "draft_aot_schedule:DRAFT_AOT_SCHEDULE",
    "draft_noise_salt:GUMBEL_STREAMS",
    "draft_noise_salt:DRAFT_SAMPLING",
    "draft_noise_salt:DSPARK_SAMPLING",
    "prefix_block_drop:PREFIX_BLOCK_DROP",
)


def _declared(name: str) -> Edit:
    module, attribute = name.split(":")
    edit = getattr(importlib.import_module(f".{module}", __name__), attribute)
    assert isinstance(edit, Edit), name
    return edit


EDITS: tuple[Edit, ...] = tuple(_declared(name) for name in DECLARATIONS)


def target_files(role: Role | None = None) -> tuple[str, ...]:
    """The files the edits touch, in the order of `EDITS`; with `role`, those
    of that role (a file any switch touches is a switch)."""
    switches = {e.path for e in EDITS if e.role is Role.SWITCH}
    files = dict.fromkeys(e.path for e in EDITS)
    if role is Role.SWITCH:
        return tuple(f for f in files if f in switches)
    if role is Role.SEAM:
        return tuple(f for f in files if f not in switches)
    return tuple(files)


def edits_in(path: str) -> tuple[Edit, ...]:
    return tuple(e for e in EDITS if e.path == path)


def judge_file(
    path: str, source: Source | str, direction: Direction
) -> list[tuple[Edit, dict[str, Judged]]]:
    """Each edit of the file with its hunks judged. Given text, raises
    SyntaxError or ValueError where Python cannot parse it."""
    if isinstance(source, str):
        source = Source(source)
    return [(edit, edit.judged(source, direction)) for edit in edits_in(path)]


def misjudged(
    text: str, judged: Sequence[tuple[Edit, dict[str, Judged]]], direction: Direction
) -> str | None:
    """What is wrong with a rewrite, judged as the bytes about to be written
    (`judged`: the file before it). The bytes must parse, and each hunk the
    writers rewrote must now read as the direction leaves it (applied after
    apply, pending after revert); every other hunk as it did before. None
    when all is right."""
    try:
        source = Source(text)
    except SyntaxError as error:
        return f"the patched file would not parse ({error.msg}, line {error.lineno})"
    except ValueError as error:
        return f"the patched file would not parse ({error})"
    for edit, before in judged:
        after = edit.judged(source, Direction.APPLY)
        for name, hunk in after.items():
            was = before[name]
            rewritten = was.state is direction.rewrites and was.site is not None
            expected = direction.leaves if rewritten else was.state
            if hunk.state is not expected:
                said = f": {hunk.reason}" if hunk.reason else ""
                return (
                    f"{edit.name}/{name} reads {hunk.state} once rewritten, not "
                    f"{expected}{said}"
                )
    return None


__all__ = [
    "EDITS",
    "Direction",
    "Edit",
    "Judged",
    "Role",
    "State",
    "edits_in",
    "judge_file",
    "misjudged",
    "target_files",
]
