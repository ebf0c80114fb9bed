"""Tests on the real vLLM trees."""

from __future__ import annotations

from typer.testing import CliRunner

from dflash2_backport.cli.main import app

_runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    """The tool run in this process: its exit code and what it printed."""
    result = _runner.invoke(app, list(args))
    return result.exit_code, result.output
