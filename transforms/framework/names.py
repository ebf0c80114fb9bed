"""What names a module or a class body binds, where each comes from, and
what reads them.

An edit that inserts code relying on a name must know the name exists when
that code runs, an edit that defines a name must know it shadows nothing, and
a revert that removes a name must know nothing else still reads it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Sequence

from .source import FUNCTIONS, Found, Path, Source

DEFINED_HERE = ""
#: The key under which a star import's module is recorded: it may bind anything.
STAR = "*"


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Starred):
        target = target.value
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for e in target.elts for n in _target_names(e)]
    return []


def one_name_a_line(tree: ast.Module) -> bool:
    """Whether the module's `from` imports name one name each, as isort's
    force-single-line (ruff's too) leaves them: an import the file's style
    would write so, and would split again were it written otherwise."""
    imports = [s for s in tree.body if isinstance(s, ast.ImportFrom) and s.module != "__future__"]
    return len(imports) > 1 and all(len(s.names) == 1 for s in imports)


def module_bindings(statements: Sequence[ast.stmt]) -> dict[str, list[str]]:
    """Names the module-level statements bind, each with every binding's origin.

    An import gives its dotted origin ("functools.cache"); a def, class or
    assignment gives DEFINED_HERE. Only statements that run whenever the
    module is imported count, plus `try` blocks (the optional import pattern):
    a name bound only under `if TYPE_CHECKING:` does not exist when a
    function's annotations or a class body are evaluated.
    """
    found: dict[str, list[str]] = {}

    def bind(name: str, origin: str) -> None:
        found.setdefault(name, []).append(origin)

    def visit(statements: Sequence[ast.stmt]) -> None:
        for s in statements:
            if isinstance(s, (ast.ClassDef, *FUNCTIONS)):
                bind(s.name, DEFINED_HERE)
            elif isinstance(s, ast.Try):
                visit(s.body)
                for handler in s.handlers:
                    visit(handler.body)
                visit(s.orelse)
                visit(s.finalbody)
            elif isinstance(s, ast.Import):
                for alias in s.names:
                    head = alias.name.split(".")[0]
                    if alias.asname:
                        bind(alias.asname, alias.name)
                    else:
                        bind(head, head)
            elif isinstance(s, ast.ImportFrom):
                module = "." * s.level + (s.module or "")
                for alias in s.names:
                    if alias.name == "*":
                        bind(STAR, module)
                    else:
                        bind(alias.asname or alias.name, f"{module}.{alias.name}")
            elif isinstance(s, ast.Assign):
                for target in s.targets:
                    for name in _target_names(target):
                        bind(name, DEFINED_HERE)
            elif isinstance(s, ast.AnnAssign | ast.AugAssign):
                for name in _target_names(s.target):
                    bind(name, DEFINED_HERE)

    visit(statements)
    return found


#: Expressions with scopes of their own (a comprehension's target is its own).
_OWN_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
#: Nodes that bind the name they carry.
_NAMED = (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)


def binders(module: ast.Module, name: str) -> list[ast.stmt]:
    """Every statement that binds `name` in the module's namespace, wherever
    it stands: under an `if`, a `try`, a loop or a `with` too (unlike
    `module_bindings`, which asks what exists whenever the module is
    imported), and a function that declares it `global`. For a definition
    that must be the only one."""
    found: list[ast.stmt] = []

    def visit(node: ast.AST, statement: ast.stmt) -> None:
        if isinstance(node, ast.stmt):
            statement = node
        if isinstance(node, (ast.ClassDef, *FUNCTIONS)):
            declares = isinstance(node, FUNCTIONS) and any(
                isinstance(n, ast.Global) and name in n.names for n in ast.walk(node)
            )
            if node.name == name or declares:
                found.append(node)
            # Decorators, defaults and bases run in the module;
            # the body is a scope of its own.
            outside: list[ast.AST] = [*node.decorator_list]
            if isinstance(node, ast.ClassDef):
                outside += [*node.bases, *node.keywords]
            if isinstance(node, FUNCTIONS):
                outside += [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
            for part in outside:
                visit(part, statement)
            return
        if isinstance(node, _OWN_SCOPES):
            return
        binds = (
            (isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load))
            or (isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) == name)
            or (isinstance(node, _NAMED) and node.name == name)
            or (isinstance(node, ast.MatchMapping) and node.rest == name)
        )
        if binds:
            found.append(statement)
        for child in ast.iter_child_nodes(node):
            visit(child, statement)

    for statement in module.body:
        visit(statement, statement)
    return found


def attribute_setters(root: ast.AST, attribute: str) -> list[ast.stmt]:
    """The statements under `root` that set or delete an attribute named
    `attribute` on anything (`builder.aot_schedule = False`, `setattr(x,
    "aot_schedule", v)`), each the innermost statement that does: for a
    setting that must be a fix's alone."""
    found: list[ast.stmt] = []

    def sets(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == attribute and not isinstance(node.ctx, ast.Load)
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == attribute
        )

    def visit(node: ast.AST, statement: ast.stmt | None) -> None:
        if isinstance(node, ast.stmt):
            statement = node
        if statement is not None and sets(node):
            found.append(statement)
        for child in ast.iter_child_nodes(node):
            visit(child, statement)

    visit(root, None)
    return found


def setters_besides(source: Source, attribute: str, owned: Iterable[Path]) -> list[ast.stmt]:
    """The module's statements that set `attribute` (`attribute_setters`),
    but those at or under the statements at `owned`: what sets it beside
    the code an edit owns, which must then be all that sets it."""
    inside = {id(n) for path in owned for n in ast.walk(source.at(path).node)}
    return [s for s in attribute_setters(source.tree, attribute) if id(s) not in inside]


def may_bind(bindings: dict[str, list[str]], name: str) -> bool:
    """Whether `name` exists, counting a star import as possibly binding it."""
    return name in bindings or STAR in bindings


def origin_words(origin: str) -> str:
    return "defined in this module" if origin == DEFINED_HERE else f"`{origin}`"


def class_bindings(cls: Found, name: str) -> list[Found]:
    """Class-body statements that bind `name`: assignments, methods, classes."""

    def binds(statement: ast.stmt) -> bool:
        if isinstance(statement, (ast.ClassDef, *FUNCTIONS)):
            return statement.name == name
        if isinstance(statement, ast.Assign):
            return any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
        if isinstance(statement, ast.AnnAssign):
            return isinstance(statement.target, ast.Name) and statement.target.id == name
        return False

    return [member for member in cls.statements() if binds(member.node)]  # type: ignore[arg-type]


# -- who reads a module-level name --------------------------------------------


class Readers:
    """Where a module reads its module-level names."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def of(self, name: str, leaving: Sequence[ast.AST] = ()) -> list[str]:
        """The module's definitions that read `name`, those in `leaving` (code
        the revert removes) left out: a method as `Class.method`, a read
        outside any definition by its statement."""
        left = {id(node) for root in leaving for node in ast.walk(root)}

        def reads(node: ast.AST) -> bool:
            return any(id(n) not in left for n in _module_reads(node, name))

        readers: list[str] = []
        for statement in self.source.tree.body:
            if not reads(statement):
                continue
            if isinstance(statement, ast.ClassDef):
                members = [
                    f"`{statement.name}.{member.name}`"
                    for member in statement.body
                    if isinstance(member, (ast.ClassDef, *FUNCTIONS)) and reads(member)
                ]
                readers += members or [f"`{statement.name}`"]
            elif isinstance(statement, FUNCTIONS):
                readers.append(f"`{statement.name}`")
            else:
                readers.append(self.source.describe(statement))
        return readers


def _module_reads(node: ast.AST, name: str) -> Iterator[ast.Name]:
    """The loads of `name` under `node` that reach the module's binding:
    those no function, lambda or comprehension on the way binds itself."""
    found: list[ast.Name] = []

    def visit(node: ast.AST, shadowed: bool) -> None:
        if isinstance(node, (*FUNCTIONS, ast.Lambda)):
            # Decorators, defaults and annotations run where the def stands.
            outside: list[ast.AST] = list(getattr(node, "decorator_list", []))
            arguments = node.args
            outside += arguments.defaults + [d for d in arguments.kw_defaults if d]
            if not isinstance(node, ast.Lambda):
                outside += [a.annotation for a in _parameters(arguments) if a.annotation]
                outside += [node.returns] if node.returns else []
            for part in outside:
                visit(part, shadowed)
            inner = _binds_locally(node, name, shadowed)
            for part in node.body if isinstance(node.body, list) else [node.body]:
                visit(part, inner)
        elif isinstance(node, ast.ClassDef):
            for part in [*node.decorator_list, *node.bases, *node.keywords]:
                visit(part, shadowed)
            # A name the class body binds shadows the module's in the body
            # itself, not in its methods.
            own = any(
                isinstance(t, ast.Name) and t.id == name and isinstance(t.ctx, ast.Store)
                for s in node.body
                if not isinstance(s, (ast.ClassDef, *FUNCTIONS))
                for t in ast.walk(s)
            )
            for part in node.body:
                inner = shadowed if isinstance(part, (ast.ClassDef, *FUNCTIONS)) else shadowed or own
                visit(part, inner)
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            first, *rest = node.generators
            visit(first.iter, shadowed)
            inner = shadowed or any(
                name in _target_names(g.target) for g in node.generators
            )
            visit(first.target, inner)
            for condition in first.ifs:
                visit(condition, inner)
            for generator in rest:
                visit(generator, inner)
            for part in (
                (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)
            ):
                visit(part, inner)
        elif isinstance(node, ast.Name):
            if node.id == name and isinstance(node.ctx, ast.Load) and not shadowed:
                found.append(node)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, shadowed)

    visit(node, False)
    return iter(found)


def _parameters(arguments: ast.arguments) -> list[ast.arg]:
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return every + [a for a in (arguments.vararg, arguments.kwarg) if a]


def _binds_locally(
    function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, name: str, outer: bool
) -> bool:
    """Whether `name` inside the function means a local (or an enclosing
    function's local, `outer`) rather than the module's binding."""
    if any(a.arg == name for a in _parameters(function.args)):
        return True
    body = function.body if isinstance(function.body, list) else [function.body]
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Global) and name in node.names:
            return False
        if isinstance(node, ast.Nonlocal) and name in node.names:
            return True
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, (ast.ClassDef, *FUNCTIONS)):
            if node.name == name:
                return True
            continue  # their bodies are scopes of their own
        if isinstance(node, ast.Import | ast.ImportFrom) and any(
            (a.asname or a.name.split(".")[0]) == name for a in node.names
        ):
            return True
        if isinstance(node, ast.ExceptHandler) and node.name == name:
            return True
        if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            continue
        pending.extend(ast.iter_child_nodes(node))
    return outer
