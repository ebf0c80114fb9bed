"""The `dflash2-backport` command line.

Exit codes: 0 nothing left to do (or, for apply and revert, done); 1 `check`
found edits pending, or `apply --fail-if-changed` changed files; 2 drift or an
error: nothing was written.
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
    help="Backport DFlash2 speculative decoding to vLLM 0.27.1.",
)

SitePackages = Annotated[
    Optional[Path],
    typer.Option(
        "--site-packages",
        help="site-packages holding an installed vLLM [default: this interpreter's]",
        show_default=False,
    ),
]
Root = Annotated[
    Optional[Path],
    typer.Option("--root", help="a vLLM source tree: the directory that contains vllm/"),
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
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    json_output: Json = False,
    force: Force = False,
    fail_if_changed: FailIfChanged = False,
) -> None:
    """Apply the seven edits and install the DFlash2 modules, all or nothing."""
    raise typer.Exit(
        _run("apply", site_packages, root, diff, json_output, force, fail_if_changed)
    )


@app.command()
def check(
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    json_output: Json = False,
    force: Force = False,
) -> None:
    """Dry run: report each edit's state; exit 0 done, 1 pending, 2 refused."""
    raise typer.Exit(_run("check", site_packages, root, diff, json_output, force))


@app.command()
def revert(
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    json_output: Json = False,
    force: Force = False,
) -> None:
    """Undo the edits and remove the installed modules, all or nothing."""
    raise typer.Exit(_run("revert", site_packages, root, diff, json_output, force))


def _run(
    command: str,
    site_packages: Path | None,
    root: Path | None,
    diff: bool,
    json_output: bool,
    force: bool,
    fail_if_changed: bool = False,
) -> int:
    from .report import Report
    from .target import locate, triage

    report = Report(command, json_output)
    try:
        target = locate(site_packages, root)
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


def main() -> None:
    app(prog_name="dflash2-backport")


if __name__ == "__main__":
    sys.exit(main())
