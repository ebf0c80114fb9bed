"""What the declarations tell people: `--explain EDIT`, and the README's
table of edits (which a test holds to `edits_table()`)."""

from __future__ import annotations

import textwrap

from . import EDITS, target_files
from .framework.edit import Edit, Role

#: When a commit writes a file, by the file's role (a file any switch
#: touches is a switch, whatever its other edits are).
_ROLES = {
    Role.SEAM: "a seam: written before the switches, taken out after them",
    Role.SWITCH: "a switch: written after the modules and the seams, taken out before them",
}


def names() -> list[str]:
    return list(dict.fromkeys(edit.name for edit in EDITS))


def explain(name: str) -> str | None:
    """What the edit changes, where and why, with the code; None for a name
    no edit has."""
    declarations = [edit for edit in EDITS if edit.name == name]
    if not declarations:
        return None
    return "\n".join(_explained(edit) for edit in declarations)


def _file_role(path: str) -> Role:
    return Role.SWITCH if path in target_files(Role.SWITCH) else Role.SEAM


def _set(edit: Edit) -> str:
    if edit.fix is None:
        return "the DFlash2 PR's own edit, as vLLM 0.28.0 has it (`apply --only-pr` makes it)"
    where = (
        "still open upstream" if edit.fix.release == "unreleased"
        else f"first in vLLM {edit.fix.release}"
    )
    reference = f"upstream {edit.fix.pr}, " if edit.fix.pr else ""
    return f"an upstream fix ({reference}{where}); `apply --only-pr` leaves it out"


def _explained(edit: Edit) -> str:
    lines = [
        f"{edit.name}: {edit.description}",
        f"  file: {edit.path} ({_ROLES[_file_role(edit.path)]})",
        f"  set: {_set(edit)}",
    ]
    for hunk in edit.hunks:
        lines += [
            "",
            f"  hunk: {hunk.name}",
            f"    where: {hunk.where}",
            *textwrap.wrap(hunk.why, 76, initial_indent="    why: ", subsequent_indent="      "),
        ]
        if hunk.before is not None:
            lines += ["    0.27.1 has:", _code(hunk.before)]
        lines += ["    the backport leaves:", _code(hunk.after)]
    return "\n".join(lines) + "\n"


def _code(source: str) -> str:
    return textwrap.indent(textwrap.dedent(source).strip("\n"), "      ")


def _upstream(declarations: list[Edit]) -> str:
    fixes = dict.fromkeys(e.fix for e in declarations)
    if fixes == {None: None}:
        return "DFlash2 PR, 0.28.0"
    return ", ".join(
        ", ".join(
            filter(None, [fix.pr, "still open" if fix.release == "unreleased" else fix.release])
        )
        for fix in fixes
        if fix is not None
    )


def edits_table() -> str:
    """The README's table: an edit a row, where upstream has it (the DFlash2
    PR, or a fix's PR and first release), its files under `vllm/`, and why."""
    rows = ["| edit | upstream | file under `vllm/` | why |", "|---|---|---|---|"]
    previous = None
    for name in names():
        declarations = [e for e in EDITS if e.name == name]
        files = ", ".join(f"`{e.path.removeprefix('vllm/')}`" for e in declarations)
        whys = dict.fromkeys(h.why for e in declarations for h in e.hunks)
        rows.append(
            f"| `{name}` | {_upstream(declarations)} | "
            f"{'same' if files == previous else files} | {' '.join(whys)} |"
        )
        previous = files
    return "\n".join(rows) + "\n"
