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
DiffModules = Annotated[
    bool,
    typer.Option(
        "--diff-modules",
        help="with the diff, print the new files whole (else one line each)",
    ),
]
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
    diff_modules: DiffModules = False,
    json_output: Json = False,
    force: Force = False,
    fail_if_changed: FailIfChanged = False,
) -> None:
    """Make the seven edits to seven vLLM files and install the two DFlash2
    modules (three new files), all or nothing."""
    raise typer.Exit(
        _run("apply", site_packages, root, diff, json_output, force, fail_if_changed,
             python=python, diff_modules=diff_modules)
    )


@app.command()
def check(
    python: Python = None,
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    diff_modules: DiffModules = False,
    json_output: Json = False,
    force: Force = False,
) -> None:
    """Dry run: report each edit's state; exit 0 done, 1 pending, 2 refused."""
    raise typer.Exit(
        _run("check", site_packages, root, diff, json_output, force, python=python,
             diff_modules=diff_modules)
    )


@app.command()
def revert(
    python: Python = None,
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    diff_modules: DiffModules = False,
    json_output: Json = False,
    force: Force = False,
) -> None:
    """Undo the seven edits and remove the three new files, all or nothing."""
    raise typer.Exit(
        _run("revert", site_packages, root, diff, json_output, force, python=python,
             diff_modules=diff_modules)
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
    diff_modules: bool = False,
) -> int:
    """Every way a run can end becomes one outcome: 0 and 1 as documented,
    2 with one message for anything that stops the tool."""
    from . import interrupts, outcome
    from .errors import Interrupted
    from .report import Report

    interrupts.install()
    report = Report(command, json_output)
    try:
        result = _execute(
            report, command, site_packages, root, python, diff or diff_modules, diff_modules,
            force, fail_if_changed,
        )
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
    python: Path | None,
    diff: bool,
    diff_modules: bool,
    force: bool,
    fail_if_changed: bool,
):
    from . import outcome
    from .target import TargetKind, Triage, locate, triage

    target = locate(site_packages, root, python)
    report.target = target
    verdict = triage(target, force)
    if verdict.triage is Triage.REFUSE:
        return outcome.failed(verdict.reason)
    if verdict.triage is Triage.UPSTREAM_SHIPS:
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
        record_of(target.root) if target.kind is TargetKind.SITE_PACKAGES else (None, None)
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
            from .diff import unified

            report.diff = unified(plan, modules_whole=diff_modules)
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


def _explain(name: Optional[str]) -> None:
    if name is None:
        return
    from .edits import catalogue

    text = catalogue().explain(name)
    if text is None:
        print(
            f"dflash2-backport: error: no edit is called {name!r}; the edits are "
            + ", ".join(catalogue().names()),
            file=sys.stderr,
        )
        raise typer.Exit(2)
    print(text, end="")
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
    explain: Annotated[
        Optional[str],
        typer.Option(
            "--explain",
            metavar="EDIT",
            callback=_explain,
            is_eager=True,
            help="say what an edit changes, where and why, and exit",
        ),
    ] = None,
) -> None:
    """Backport DFlash2 speculative decoding to vLLM 0.27.1 (and 0.27.0)."""


def main() -> None:
    app(prog_name="dflash2-backport")


if __name__ == "__main__":
    sys.exit(main())
