"""What the declarations tell people: `--explain EDIT`, and the README's
table of edits (which a test holds to `edits_table()`)."""

from __future__ import annotations

import textwrap

from . import EDITS
from .edit import Edit, Role

_ROLES = {
    Role.SEAM: "adds only what nothing reaches yet; written before the switches",
    Role.SWITCH: "leads vLLM to DFlash2; written after the modules and the seams",
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


def _explained(edit: Edit) -> str:
    lines = [f"{edit.name}: {edit.description}", f"  file: {edit.path} ({_ROLES[edit.role]})"]
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


def edits_table() -> str:
    """The README's table: an edit a row, its files under `vllm/`, and why."""
    rows = ["| edit | file under `vllm/` | why |", "|---|---|---|"]
    previous = None
    for name in names():
        declarations = [e for e in EDITS if e.name == name]
        files = ", ".join(f"`{e.path.removeprefix('vllm/')}`" for e in declarations)
        whys = dict.fromkeys(h.why for e in declarations for h in e.hunks)
        rows.append(f"| `{name}` | {'same' if files == previous else files} | {' '.join(whys)} |")
        previous = files
    return "\n".join(rows) + "\n"
