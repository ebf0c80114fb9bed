"""Fix: a DFlash2 draft's grouped convolution runs as one Triton kernel.

Target: vllm/model_executor/models/qwen3_dflash.py, two hunks.

imports
    Inserts, each on a line of its own,
        from vllm.triton_utils import tl, triton
        from vllm.utils.torch_utils import direct_register_custom_op
    where isort puts them among 0.27.1's `from vllm...` imports: right
    before the first whose module sorts after `vllm.utils.torch_utils`
    (`vllm.v1.attention.backend` in 0.26.0 to 0.27.1), or after the last;
    one name a line where the module's `from` imports name one each.
    Applied when the three names are imported from those modules, in
    whatever form; only a missing line is added. One of the names bound to
    something else is drift.

grouped conv kernel
    Must be there: what anchor-clamp anchors on (a module-level `def
    _get_dflash_fc_input_size`, or in vLLM 0.26.0 `def
    _resolve_layer_attention`) and the module-level name `torch`. Inserts,
    right before it, the kernel `_dflash2_grouped_conv_kernel`, its launcher
    `dflash2_grouped_conv(hidden_states, delta, base, block_size,
    group_size)`, the launcher's shape function for torch.compile, and the
    registration of the launcher as the custom op
    `torch.ops.vllm.dflash2_grouped_conv`. Applied when all four are there
    with this meaning; some of them, or one with another body, is drift.

Why: the DFlash2 draft convolves every layer's attention and MLP input and
output (four convolutions a layer, every step). Written in torch, as the
DFlash2 PR has it, Inductor fuses each into two kernels that build the
shifted copies; vLLM 0.31.0 made it one Triton kernel, opaque to Inductor
as a custom op, that reads each earlier row in place. On an H100 the
draft's convolutions took 113 us of a step one request at a time in
torch, 31 us in 0.34.0's kernel. This kernel is written here: one program
a row and block of channels, the taps summed in float32 and rounded once,
as Inductor does with the torch form. With 1,024 channels a program it took
48 us of a step on an H200 against 0.34.0's 29, one request at a time (16
rows, so 64 programs for 132 SMs); 0.34.0's launcher gives a program 512
channels below 128 rows, and so does this one.

Where: as for anchor-clamp, the installed DFlash2 model is the same bytes
in both edit sets, so the kernel stands in the DFlash1 model module it
builds on, and the DFlash2 model calls the custom op on CUDA tensors where
`qwen3_dflash.py` has `dflash2_grouped_conv`. With `apply --only-pr` it
is not there, and the model convolves in torch, as 0.28.0 does.

Reverted, the four statements go, and so do the import lines, each where
it stands alone with exactly these names; if other code in the module
reads what would go, that is drift: removing it would break the module.
"""

from __future__ import annotations

import ast
import dataclasses

from ..anchor_clamp.judge import ANCHOR, INLINE_ANCHOR, placed_before_anchor
from ...framework.edit import Edit, Fix, Judged, Role, Site, applied, drift, pending
from ...framework.hunk_files import HunkFiles, statements_of
from ...framework.judging import kept_while_used
from ...framework.meaning import same_meaning
from ...framework.names import Readers, module_bindings, one_name_a_line, origin_words
from ...framework.source import Found, Path, Source, shares_a_line

PATH = "vllm/model_executor/models/qwen3_dflash.py"
NAME = "dflash2_grouped_conv"

HUNKS = HunkFiles(__package__)
#: Each import line, by the names it binds and the module they come from.
IMPORT_LINES = {
    line: (statement.module, tuple(alias.name for alias in statement.names))
    for line, statement in (
        (line, ast.parse(line).body[0]) for line in HUNKS.patched("imports").splitlines()
    )
    if isinstance(statement, ast.ImportFrom) and statement.module
}
#: The same, one name a line, where the module imports so (isort's
#: force-single-line, which would split the lines above again).
SINGLE_IMPORT_LINES = {
    f"from {module} import {name}": (module, (name,))
    for module, names in IMPORT_LINES.values()
    for name in names
}
_EITHER_FORM = (*IMPORT_LINES, *SINGLE_IMPORT_LINES)
#: isort's place for the lines: before the first `from vllm...` import
#: whose module sorts after this one.
IMPORTS_SORT_AFTER = "vllm.utils.torch_utils"

#: The kernel, its launcher, the launcher's shape function and the
#: registration of the custom op: hunks/grouped_conv_kernel/.
KERNEL, LAUNCHER, SHAPE, REGISTRATION = statements_of(HUNKS.patched("grouped conv kernel"))

#: The launcher as earlier versions of this tool wrote it: 1,024 channels a
#: program at any number of rows. A tree they patched holds this edit. Only
#: its meaning is compared, so the comment above the line may stay.
LAUNCHER_EARLIER = LAUNCHER.replace("min(512 if num_tokens < 128 else 1024, ", "min(1024, ")

#: How messages name the registration, which defines no name of its own.
REGISTERED = f"direct_register_custom_op(op_name='{NAME}')"
#: The kernel hunk's statements, by the name each defines or registers.
STATEMENTS = {
    "_dflash2_grouped_conv_kernel": KERNEL,
    NAME: LAUNCHER,
    "_dflash2_grouped_conv_shape": SHAPE,
    REGISTERED: REGISTRATION,
}
#: Other forms of a statement that mean this edit, applied.
EARLIER = {NAME: (LAUNCHER_EARLIER,)}
_WHY = (
    "The DFlash2 draft's grouped convolution runs as one Triton kernel (a "
    "custom op, as from vLLM 0.31.0) instead of Inductor's fused torch form, "
    "which took 113 us of a step on an H100 against 0.34.0's kernel's 31 us."
)
IMPORTS_HUNK = HUNKS.hunk(
    "imports",
    "module level, among the `from vllm...` imports where isort puts them "
    f"(before the first whose module sorts after `{IMPORTS_SORT_AFTER}`)",
    _WHY,
)
KERNEL_HUNK = HUNKS.hunk(
    "grouped conv kernel",
    f"module level, right before `def {ANCHOR}` (in vLLM 0.26.0, before "
    f"`def {INLINE_ANCHOR}`)",
    _WHY,
)


@dataclasses.dataclass(kw_only=True, eq=False)
class Imports(Site):
    """Pending: the import to insert before (`before`), or the last
    `from vllm...` import to insert after; the lines missing."""

    before: bool
    missing: tuple[str, ...]


@dataclasses.dataclass(kw_only=True, eq=False)
class Statements(Site):
    """Applied: `path` and `more`, the statements undoing removes."""

    more: tuple[Path, ...] = ()


def judge(source: Source) -> dict[str, Judged]:
    bindings = module_bindings(source.tree.body)
    return {
        IMPORTS_HUNK.name: _imports(source, bindings),
        KERNEL_HUNK.name: _kernel(source),
    }


def _imports(source: Source, bindings: dict[str, list[str]]) -> Judged:
    missing, conflicts = [], []
    lines = SINGLE_IMPORT_LINES if one_name_a_line(source.tree) else IMPORT_LINES
    for line, (module, names) in lines.items():
        origins = {name: set(bindings.get(name, [])) for name in names}
        wrong = [
            f"`{name}` bound to {', '.join(sorted(origin_words(o) for o in found))}"
            for name, found in origins.items()
            if found and found != {f"{module}.{name}"}
        ]
        conflicts += wrong
        if not wrong and not all(origins.values()):
            missing.append(line)
    if conflicts:
        return drift(
            "`tl` and `triton` from vllm.triton_utils and `direct_register_custom_op` "
            "from vllm.utils.torch_utils, or those names unbound at module level",
            "; ".join(conflicts) + " (the kernel needs them from those modules)",
        )
    if not missing:
        return applied(_import_lines(source))
    vllm_imports = [
        found
        for found in source.module.statements()
        if isinstance(found.node, ast.ImportFrom)
        and found.node.level == 0
        and (found.node.module or "").split(".")[0] == "vllm"
        and not shares_a_line(source.tree.body, found.path[-1].index)
    ]
    if not vllm_imports:
        return drift("module-level `from vllm... import` lines to put the imports among", "none")
    later = [f for f in vllm_imports if (f.node.module or "") > IMPORTS_SORT_AFTER]  # type: ignore[attr-defined]
    anchor, before = (later[0], True) if later else (vllm_imports[-1], False)
    return pending(Imports(path=anchor.pinned(), before=before, missing=tuple(missing)))


def _own_imports(source: Source) -> list[Found]:
    """The import lines as the forward writes them (in either form), each
    standing alone: what undoing removes."""
    return [
        statement
        for statement in source.module.statements()
        if isinstance(statement.node, ast.ImportFrom)
        and not shares_a_line(source.tree.body, statement.path[-1].index)
        and any(same_meaning(statement.node, line) for line in _EITHER_FORM)
    ]


def _import_lines(source: Source) -> Statements | None:
    found = _own_imports(source)
    if not found:
        return None
    first, *more = (f.pinned() for f in found)
    return Statements(path=first, more=tuple(more))


def _registration(statement: ast.stmt) -> bool:
    """Whether the statement registers a custom op of this name."""
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    call = statement.value
    return (
        isinstance(call.func, ast.Name)
        and call.func.id == "direct_register_custom_op"
        and any(
            keyword.arg == "op_name"
            and isinstance(keyword.value, ast.Constant)
            and keyword.value.value == NAME
            for keyword in call.keywords
        )
    )


def kernel_statements(source: Source) -> dict[str, list[Found]]:
    """The module-level statements of the kernel hunk found, by name."""
    return {
        name: [s for s in source.module.statements() if _registration(s.node)]  # type: ignore[arg-type]
        if name == REGISTERED
        else source.module.defs(name)
        for name in STATEMENTS
    }


def _kernel(source: Source) -> Judged:
    found = kernel_statements(source)
    for name, statements in found.items():
        for statement in statements:
            node = statement.node
            # A call alone reads as an expression, as the registration's code does.
            code = node.value if isinstance(node, ast.Expr) else node
            if not any(
                same_meaning(code, form) for form in (STATEMENTS[name], *EARLIER.get(name, ()))
            ):
                return drift(
                    f"`{name}` as the fix writes it",
                    f"a different one at {source.describe(statement.node)}; "
                    "the backport will not overwrite it",
                )
    present = [name for name, statements in found.items() if statements]
    if len(present) == len(STATEMENTS):
        first, *more = (s.pinned() for statements in found.values() for s in statements)
        return applied(Statements(path=first, more=tuple(more)))
    if present:
        absent = [name for name in STATEMENTS if name not in present]
        return drift(
            "the kernel's four statements, or none of them",
            ", ".join(f"`{n}`" for n in present)
            + " without "
            + ", ".join(f"`{n}`" for n in absent),
        )
    return placed_before_anchor(source, "the kernel")


def before_undo(source: Source, to_undo: dict[str, Judged]) -> dict[str, Judged]:
    """Other module code that reads what the revert takes away would break."""
    leaving = [
        s.node for statements in kernel_statements(source).values() for s in statements
    ]
    imports = to_undo.get(IMPORTS_HUNK.name)
    if imports is not None and imports.site is not None:
        leaving += [f.node for f in _own_imports(source)]
    readers = Readers(source)
    refused: dict[str, Judged] = {}
    if KERNEL_HUNK.name in to_undo:
        refused |= kept_while_used(KERNEL_HUNK, NAME, readers.of(NAME, leaving), verb="called")
    if imports is not None and imports.site is not None:
        for _, names in IMPORT_LINES.values():
            for name in names:
                users = readers.of(name, leaving)
                if users:
                    refused |= kept_while_used(
                        IMPORTS_HUNK, name, users, what="its import"
                    )
    return refused


DRAFT_CONV_KERNEL = Edit(
    "draft-conv-kernel",
    PATH,
    "dflash2_grouped_conv: the DFlash2 draft's grouped convolution as one "
    "Triton kernel, a custom op, as from vLLM 0.31.0",
    Role.SEAM,
    (IMPORTS_HUNK, KERNEL_HUNK),
    judge,
    writer="draft_conv_kernel:DraftConvKernel",
    before_undo=before_undo,
    fix=Fix("", "0.31.0"),
)

# The hunk file parses, each statement on its own (statements_of): a typo
# fails at import, not in a user's tree.
assert LAUNCHER_EARLIER != LAUNCHER
assert "".join(line + "\n" for line in IMPORT_LINES) == IMPORTS_HUNK.after
assert "\n\n".join(STATEMENTS.values()) == KERNEL_HUNK.after
