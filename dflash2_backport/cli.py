"""The `dflash2-backport` command line.

Exit codes: 0 nothing left to do (or, for apply and revert, done; for verify,
every check passed); 1 `check` found edits pending, or `apply
--fail-if-changed` changed files; 2 drift or an error: nothing was written
(for verify: a check failed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .errors import BackportError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: Rich markup would eat "[default: ...]" and label flags <bool>.
    rich_markup_mode=None,
    help="Backport DFlash2 speculative decoding to vLLM 0.27.1 (and 0.27.0).",
)

Python = Annotated[
    Optional[Path],
    typer.Option(
        "--python",
        metavar="PATH",
        help="the interpreter that runs vLLM: patch the vllm it imports "
        "[default: the interpreter running this tool]",
        show_default=False,
    ),
]
SitePackages = Annotated[
    Optional[Path],
    typer.Option(
        "--site-packages",
        metavar="PATH",
        help="a site-packages (or dist-packages) directory holding an installed vLLM",
        show_default=False,
    ),
]
Root = Annotated[
    Optional[Path],
    typer.Option(
        "--root",
        metavar="PATH",
        help="a vLLM source tree: the directory that contains vllm/",
    ),
]
Diff = Annotated[bool, typer.Option("--diff", help="print the unified diff of the changes")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON object instead of text")]
Force = Annotated[
    bool,
    typer.Option("--force", help="patch a vLLM of unknown version on the structural checks alone"),
]


FailIfChanged = Annotated[
    bool,
    typer.Option(
        "--fail-if-changed",
        help="exit 1 when files were changed, as pre-commit fixers do",
    ),
]


@app.command()
def apply(
    python: Python = None,
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    json_output: Json = False,
    force: Force = False,
    fail_if_changed: FailIfChanged = False,
) -> None:
    """Make the seven edits to seven vLLM files and install the two DFlash2
    modules (three new files), all or nothing."""
    raise typer.Exit(
        _run("apply", site_packages, root, diff, json_output, force, fail_if_changed,
             python=python)
    )


@app.command()
def check(
    python: Python = None,
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    json_output: Json = False,
    force: Force = False,
) -> None:
    """Dry run: report each edit's state; exit 0 done, 1 pending, 2 refused."""
    raise typer.Exit(
        _run("check", site_packages, root, diff, json_output, force, python=python)
    )


@app.command()
def revert(
    python: Python = None,
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    json_output: Json = False,
    force: Force = False,
) -> None:
    """Undo the seven edits and remove the three new files, all or nothing."""
    raise typer.Exit(
        _run("revert", site_packages, root, diff, json_output, force, python=python)
    )


def _run(
    command: str,
    site_packages: Path | None,
    root: Path | None,
    diff: bool,
    json_output: bool,
    force: bool,
    fail_if_changed: bool = False,
    python: Path | None = None,
) -> int:
    from .report import Report
    from .target import locate, triage

    report = Report(command, json_output)
    try:
        target = locate(site_packages, root, python)
        report.target = target
        verdict = triage(target, force)
        if verdict.refusal:
            return report.error(verdict.refusal)
        if verdict.upstream:
            return report.upstream()
        # Imported late: the checks above need no parser, and a target that
        # upstream already serves is answered without loading libcst.
        from .engine import make_plan, write
        from .record import record_of

        plan = make_plan(
            target.root,
            need_changes=diff or command != "check",
            direction="revert" if command == "revert" else "apply",
            record_file=record_of(target.root) if target.kind == "site-packages" else None,
        )
        report.plan = plan
        if diff:
            report.diff = plan.diff()
        if plan.refused:
            return report.refused()
        if command != "check" and plan.pending:
            report.written = write(plan)
        return report.finished(fail_if_changed)
    except BackportError as error:
        return report.error(str(error))


@app.command()
def verify(
    python: Python = None,
    json_output: Json = False,
) -> None:
    """Prove at run time, on the CPU, that vLLM resolves, configures and
    dispatches DFlash2: exit 0 when every check passes, 2 otherwise."""
    from .target import locate
    from .verify import render, run

    try:
        target = locate(None, None, python)
        interpreter = target.python or str(python or sys.executable)
        raise typer.Exit(render(run(interpreter), interpreter, json_output))
    except BackportError as error:
        if json_output:
            import json

            print(json.dumps({"command": "verify", "passed": False, "error": str(error)}))
        else:
            print(f"dflash2-backport: error: {error}", file=sys.stderr)
        raise typer.Exit(2) from None


def _version(value: bool) -> None:
    if value:
        from . import __version__

        print(f"dflash2-backport {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="print the version and exit",
        ),
    ] = False,
) -> None:
    """Backport DFlash2 speculative decoding to vLLM 0.27.1 (and 0.27.0)."""


def main() -> None:
    app(prog_name="dflash2-backport")


if __name__ == "__main__":
    sys.exit(main())
