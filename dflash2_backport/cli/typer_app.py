"""The typer application, built from the commands' own declarations.

Built only for a command line the plain reader leaves to typer (help, a
typo, a missing value, `verify`, `--version`): each command is handed to
typer as a function of the same name, help and parameters whose
annotations carry `typer.Option`s made from its `declared.Option`s.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, get_type_hints

import typer

from .declared import Option


def build(commands: list[Callable[..., Any]], options: Callable[..., Any], **settings: Any) -> typer.Typer:
    """A Typer with `commands` and the group's `options` callback."""
    app = typer.Typer(**settings)
    app.callback()(_for_typer(options))
    for command in commands:
        app.command()(_for_typer(command))
    return app


def _for_typer(function: Callable[..., Any]) -> Callable[..., Any]:
    hints = get_type_hints(function, include_extras=True)
    signature = inspect.signature(function)
    parameters = [
        parameter.replace(annotation=_typer_hint(hints[parameter.name]))
        for parameter in signature.parameters.values()
    ]

    def command(**arguments: Any) -> Any:
        return function(**arguments)

    command.__name__ = function.__name__
    command.__qualname__ = function.__qualname__
    command.__doc__ = function.__doc__
    command.__module__ = function.__module__
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=None
    )
    command.__annotations__ = {p.name: p.annotation for p in parameters}
    return command


def _typer_hint(hint: Any) -> Any:
    metadata = getattr(hint, "__metadata__", ())
    declared = [m for m in metadata if isinstance(m, Option)]
    if not declared:
        return hint
    (option,) = declared
    return Annotated[hint.__origin__, option.for_typer()]
