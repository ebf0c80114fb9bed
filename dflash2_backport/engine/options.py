"""What a `check`, `apply` or `revert` is asked to do: the command line's
options, parsed, as `run.run` takes them.

Light to import: the command line builds one before anything of the edits
is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from ..transforms.framework.vocabulary import EditSet

Command = Literal["check", "apply", "revert"]


class RunOptions(NamedTuple):
    """What a run is asked to do, as the command line gave it. A named tuple:
    a frozen dataclass costs every command more to define."""

    command: Command
    site_packages: Path | None = None
    root: Path | None = None
    python: Path | None = None
    #: Run on a vLLM of unknown version on the structural checks alone.
    force: bool = False
    #: Compute the patch of what the command writes (`--diff`).
    diff: bool = False
    #: The diff's earlier spelling, `--diff-modules`: the report says
    #: which was given.
    diff_modules: bool = False
    fail_if_changed: bool = False
    only_pr: bool = False
    #: The command a pending `check` names as the one that makes the edits,
    #: where it is not this tool's own `apply` (a pre-commit hook's).
    fix_command: str | None = None

    @property
    def edit_set(self) -> EditSet:
        from ..transforms.framework.vocabulary import EditSet

        if self.command == "revert":
            return EditSet.NONE
        return EditSet.PR if self.only_pr else EditSet.ALL

    @property
    def wants_diff(self) -> bool:
        return self.diff or self.diff_modules

    def target_options(self) -> tuple[str, ...]:
        """The options that chose the target, as given, for a hint to repeat."""
        given = [
            ("--python", self.python), ("--site-packages", self.site_packages),
            ("--root", self.root),
        ]
        options = [part for option, value in given if value is not None
                   for part in (option, str(value))]
        return (*options, "--force") if self.force else tuple(options)
