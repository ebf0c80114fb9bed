"""The commands' options as they declare them, without typer.

`Option` takes what `typer.Option` takes and keeps it: the plain command
lines hooks and scripts run are read against these records alone
(main._plain_call), and typer is loaded, and each record made into its
`typer.Option`, only for a line they leave to it (typer_app.py). typer's
import is a third of a cached `check`.
"""

from __future__ import annotations

from typing import Any


class Option:
    """An option's declaration: `typer.Option`'s arguments, as given."""

    def __init__(self, *spellings: str, **settings: Any) -> None:
        self.spellings = spellings
        self.settings = settings

    def for_typer(self):  # type: ignore[no-untyped-def]
        import typer

        return typer.Option(*self.spellings, **self.settings)
