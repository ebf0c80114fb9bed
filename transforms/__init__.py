"""The edits: the DFlash2 PR's, as the spec writes them, in upstream order,
then the upstream fixes the DFlash2 path depends on (an edit whose `fix`
names upstream's PR and release). `EDITS` is the one list that registers
them; `apply --only-pr` makes the PR's alone (vocabulary.EditSet).

The package has three parts: this module and `catalogue.py`, what the tool
reads of the edits; `framework/`, what every edit is built from; and
`edits/`, one folder per edit and the one ordered list of them.

Adding an edit takes a folder, its tests and one line:

1. `edits/<edit>/judge.py`: its hunks (`Hunk`: where, 0.27.1's code, the
   backport's, why), its judge over Python's own parser (a `Judged` per hunk,
   with a `Site` that says where it is and what the writer needs), and its
   declaration (`Edit`: name, file, description, role, hunks, judge, writer).
   `edits/gumbel/` is a short one to copy.
2. `edits/<edit>/writer.py`: a `Writer` whose `forward` and `backward`
   rewrite one hunk at its site, with libcst.
3. `tests/transforms/edits/test_<edit>.py`: its CodemodTest tables.
4. Its declaration, one line in `DECLARATIONS` of `edits/__init__.py`
   ("folder:NAME").

An upstream fix is an edit like the others, declared with `fix=Fix(pr,
release)`. Its hunks stand on 0.27.1's code, never on a PR edit's result:
every edit is judged on the file as it is and rewritten in one pass, each in
its own direction (`apply --only-pr` undoes the fixes while it applies the
PR's edits), so a hunk whose "before" were another edit's "after" could
neither be found before that edit is made nor undone without it.

Everything else derives from `EDITS`, the declarations in that order: the
files the tool reads and writes and the order a commit writes them in
(dflash2_backport.vllm_tree.layout), `check`, `apply` and `revert`, the JSON
report, `--explain`, the README's table of edits and
the pre-commit hook's file pattern (both tested against it), and the test
trees. A new target file changes the hook's pattern in
.pre-commit-hooks.yaml; the test that compares them prints the new one.

Nothing here imports libcst: `check` judges with Python's parser alone, and
only a command that rewrites a file loads the writers.
"""

from __future__ import annotations

from collections.abc import Sequence

from .framework.edit import Edit, Judged, Role
from .framework.source import Source
from .framework.vocabulary import Direction, EditSet, Fix, Goal, State
from .edits import DECLARATIONS, EDITS


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
    path: str, source: Source | str, goal: Goal
) -> list[tuple[Edit, dict[str, Judged]]]:
    """Each edit of the file with its hunks judged, each in the direction
    the goal asks of it. Given text, raises SyntaxError or ValueError where
    Python cannot parse it."""
    if isinstance(source, str):
        source = Source(source)
    return [(edit, edit.judged(source, goal.of(edit))) for edit in edits_in(path)]


def directions(path: str, goal: Goal) -> str:
    """The directions the goal asks of the file's edits, in their order: all
    that the file's verdicts depend on besides its bytes and the judges."""
    return ",".join(goal.of(edit).value for edit in edits_in(path))


def misjudged(text: str, judged: Sequence[tuple[Edit, dict[str, Judged]]], goal: Goal) -> str | None:
    """What is wrong with a rewrite, judged as the bytes about to be written
    (`judged`: the file before it). The bytes must parse, and each hunk the
    writers rewrote must now read as its edit's direction leaves it (applied
    after apply, pending after revert); every other hunk as it did before.
    None when all is right."""
    try:
        source = Source(text)
    except SyntaxError as error:
        return f"the patched file would not parse ({error.msg}, line {error.lineno})"
    except ValueError as error:
        return f"the patched file would not parse ({error})"
    for edit, before in judged:
        direction = goal.of(edit)
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
    "DECLARATIONS",
    "EDITS",
    "Direction",
    "Edit",
    "EditSet",
    "Fix",
    "Goal",
    "Judged",
    "Role",
    "State",
    "directions",
    "edits_in",
    "judge_file",
    "misjudged",
    "target_files",
]
