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
    """Every way a run can end becomes one outcome: 0 and 1 as documented,
    2 with one message for anything that stops the tool."""
    from . import interrupts, outcome
    from .errors import Interrupted
    from .report import Report

    interrupts.install()
    report = Report(command, json_output)
    try:
        result = _execute(report, command, site_packages, root, diff, force, fail_if_changed)
    except BackportError as error:
        result = outcome.failed(str(error))
    except Interrupted as error:
        result = outcome.interrupted(error)
    except OSError as error:
        where = error.filename or (report.target.root if report.target else "dflash2-backport")
        result = outcome.failed(f"{where}: {error.strerror or error}; nothing was written")
    except Exception as error:  # noqa: BLE001 - a bug: said plainly, never a traceback
        result = outcome.crashed(error)
    return report.render(result)


def _execute(
    report,
    command: str,
    site_packages: Path | None,
    root: Path | None,
    diff: bool,
    force: bool,
    fail_if_changed: bool,
):
    from . import outcome
    from .target import locate, triage

    target = locate(site_packages, root)
    report.target = target
    verdict = triage(target, force)
    if verdict.refusal:
        return outcome.failed(verdict.refusal)
    if verdict.upstream:
        return outcome.upstream_ships(target)
    # Imported late: the checks above need no parser, and a target that
    # upstream already serves is answered without loading the judge.
    from .commit import commit, finish_interrupted, interrupted_message, read_intent
    from .engine import make_plan
    from .lock import TreeLock, timeout_from_environment, writer_active
    from .record import record_of
    from .verdicts import Direction

    direction = Direction.REVERT if command == "revert" else Direction.APPLY
    record_file, note = (
        record_of(target.root) if target.kind == "site-packages" else (None, None)
    )
    notes = (note,) if note else ()

    def plan_now(notes: tuple[str, ...]):
        plan = make_plan(
            target.root,
            need_changes=diff or command != "check",
            direction=direction,
            record_file=record_file,
            notes=notes,
        )
        report.plan = plan
        if diff:
            report.diff = plan.diff()
        return plan

    if command == "check":
        # A dry run writes nothing, not even a lock file; it only says
        # whether a writer is at work or was interrupted.
        intent = read_intent(target.root)
        if intent is not None:
            holder = writer_active(target.root)
            if holder is not None:
                return outcome.failed(
                    f"{target.root}: {holder} is writing this tree now; "
                    "run check again once it has finished"
                )
            return outcome.failed(interrupted_message(target.root, intent))
        plan = plan_now(notes)
        return outcome.refused(command, plan) if plan.refused else outcome.finished(command, plan, [])

    written: list[str] = []
    with TreeLock(target.root, command) as lock:
        lock.acquire(timeout_from_environment(), report.waiting)
        finished = finish_interrupted(target.root)
        plan = plan_now(notes + ((finished,) if finished else ()))
        if plan.refused:
            return outcome.refused(command, plan)
        if plan.pending:
            written = commit(target.root, command, plan.changes)
    return outcome.finished(command, plan, written, fail_if_changed)


def main() -> None:
    app(prog_name="dflash2-backport")


if __name__ == "__main__":
    sys.exit(main())
