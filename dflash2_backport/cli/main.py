"""The `dflash2-backport` command line.

Exit codes: 0 nothing left to do (or, for apply and revert, done; for verify,
every check passed); 1 `check` found edits pending, or `apply
--fail-if-changed` changed files; 2 drift or an error: nothing was written
(for verify: a check failed).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import sys
from pathlib import Path
from typing import Annotated, Optional

from ..engine.options import RunOptions
from ..utils.errors import BackportError
from .declared import Option

#: The typer application's settings; it is built from the commands below
#: only for a line that is not plain (`app`, at the end).
APP_SETTINGS = dict(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: Rich markup would eat "[default: ...]" and label flags <bool>.
    rich_markup_mode=None,
    help="Backport DFlash2 speculative decoding to vLLM 0.27.1, 0.27.0 and 0.26.0.",
)


def _path(value: str) -> Path:
    """A path option's value. An empty one, as an unset variable gives
    (`--root "$SRC"`), would be the current directory to Path, and the tree
    the shell stands in would be patched."""
    if not value:
        import typer  # typer is parsing the line

        raise typer.BadParameter(
            "an empty path; give the path itself (`.` for the current directory)"
        )
    return Path(value)


def _python(does: str):
    """--python, worded for what the command does with that vLLM."""
    return Annotated[
        Optional[Path],
        Option(
            "--python",
            metavar="PATH",
            parser=_path,
            help=f"the interpreter that runs vLLM: {does} "
            "[default: the interpreter running this tool]",
            show_default=False,
        ),
    ]


def _force(does: str):
    return Annotated[
        bool,
        Option(
            "--force",
            help=f"{does} a vLLM of unknown version on the structural checks alone",
        ),
    ]


# Each command's help says what it does to that vLLM, and only that.
PythonToPatch = _python("patch the vllm it imports")
PythonToCheck = _python("check the vllm it imports")
PythonToRevert = _python("revert the vllm it imports")
PythonToVerify = _python("verify the vllm it imports")
ForcePatch = _force("patch")
ForceCheck = _force("check")
ForceRevert = _force("revert")
SitePackages = Annotated[
    Optional[Path],
    Option(
        "--site-packages",
        metavar="PATH",
        parser=_path,
        help="a site-packages (or dist-packages) directory holding an installed vLLM",
        show_default=False,
    ),
]
Root = Annotated[
    Optional[Path],
    Option(
        "--root",
        metavar="PATH",
        parser=_path,
        help="a vLLM source tree: the directory that contains vllm/",
    ),
]
Diff = Annotated[
    bool,
    Option(
        "--diff",
        help="print the changes as a patch on stdout (new files whole, as git "
        "writes them: `git apply` or `patch -p1` makes them), and the report on stderr",
    ),
]
# The new files are always in the diff now, whole: this earlier spelling of
# that is still accepted, and means --diff.
DiffModules = Annotated[bool, Option("--diff-modules", hidden=True)]
Json = Annotated[bool, Option("--json", help="print one JSON object instead of text")]
FailIfChanged = Annotated[
    bool,
    Option(
        "--fail-if-changed",
        help="exit 1 when files were changed, as pre-commit fixers do",
    ),
]
OnlyPr = Annotated[
    bool,
    Option(
        "--only-pr",
        help="exactly the DFlash2 PR's edits, as vLLM 0.28.0 has them: the upstream "
        "fixes are left out, and undone where present",
    ),
]
# The check hook's entry gives it: the hint then names the pre-commit command
# that runs the apply hook, since pre-commit's users do not have this tool on
# PATH.
FromPreCommit = Annotated[bool, Option("--from-pre-commit", hidden=True)]
PRE_COMMIT_FIX = "pre-commit run --hook-stage manual dflash2-backport-apply --all-files"
OnlyPrCheck = Annotated[
    bool,
    Option(
        "--only-pr",
        help="check against the DFlash2 PR's edits alone, as `apply --only-pr` leaves them",
    ),
]


def apply(
    python: PythonToPatch = None,
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    diff_modules: DiffModules = False,
    json_output: Json = False,
    force: ForcePatch = False,
    fail_if_changed: FailIfChanged = False,
    only_pr: OnlyPr = False,
) -> None:
    """Make the DFlash2 PR's edits and the upstream fixes it depends on, and
    install the two DFlash2 modules (three new files), all or nothing."""
    options = RunOptions(
        "apply", site_packages=site_packages, root=root, python=python, force=force,
        diff=diff, diff_modules=diff_modules, fail_if_changed=fail_if_changed,
        only_pr=only_pr,
    )
    raise SystemExit(_run(options, json_output))


def check(
    python: PythonToCheck = None,
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    diff_modules: DiffModules = False,
    json_output: Json = False,
    force: ForceCheck = False,
    only_pr: OnlyPrCheck = False,
    from_pre_commit: FromPreCommit = False,
) -> None:
    """Dry run of apply: report each edit's state; exit 0 done, 1 pending, 2 refused."""
    options = RunOptions(
        "check", site_packages=site_packages, root=root, python=python, force=force,
        diff=diff, diff_modules=diff_modules, only_pr=only_pr,
        fix_command=PRE_COMMIT_FIX if from_pre_commit else None,
    )
    raise SystemExit(_run(options, json_output))


def revert(
    python: PythonToRevert = None,
    site_packages: SitePackages = None,
    root: Root = None,
    diff: Diff = False,
    diff_modules: DiffModules = False,
    json_output: Json = False,
    force: ForceRevert = False,
) -> None:
    """Undo every edit (the fixes too) and remove the three new files, all or
    nothing."""
    options = RunOptions(
        "revert", site_packages=site_packages, root=root, python=python, force=force,
        diff=diff, diff_modules=diff_modules,
    )
    raise SystemExit(_run(options, json_output))


def _run(options: RunOptions, json_output: bool) -> int:
    """The run, printed: its exit code."""
    from ..engine.run import run
    from ..utils import interrupts
    from .report import Report

    report = Report(options.command, json_output, diff_only_on_stdout=options.wants_diff)
    with interrupts.stopping_on_signals():
        return report.render(run(options, report))


class Dtype(str, enum.Enum):
    """`verify --gpu --dtype`: those vLLM serves a dense model in."""

    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


def verify(
    python: PythonToVerify = None,
    json_output: Json = False,
    gpu: Annotated[
        bool,
        Option(
            "--gpu",
            help="run vLLM's real engine on this machine's CUDA GPU instead: "
            "with and without a DFlash2 draft, as `vllm serve` starts it",
        ),
    ] = False,
    target: Annotated[
        Optional[Path],
        Option(
            "--target",
            metavar="PATH",
            help="(--gpu) your target model's directory instead of a small "
            "one written for the run; needs --draft",
            show_default=False,
        ),
    ] = None,
    draft: Annotated[
        Optional[Path],
        Option(
            "--draft",
            metavar="PATH",
            help="(--gpu) your DFlash2 draft's directory; needs --target",
            show_default=False,
        ),
    ] = None,
    attention_backend: Annotated[
        Optional[str],
        Option(
            "--attention-backend",
            metavar="NAME",
            help="(--gpu) the attention backend of both engines, e.g. TRITON_ATTN "
            "[default: vLLM's choice]",
            show_default=False,
        ),
    ] = None,
    dtype: Annotated[
        Optional[Dtype],
        Option(
            "--dtype",
            help="(--gpu) the engines' dtype; float32 holds the greedy outputs with "
            "and without the draft equal, the others to near-ties "
            "[default: bfloat16, or what your --target declares]",
            show_default=False,
            case_sensitive=False,
        ),
    ] = None,
) -> None:
    """Prove at run time that vLLM resolves, configures and dispatches DFlash2:
    on the CPU, or with --gpu in the real engine on this machine's GPU. Exit 0
    when every check passes, 2 otherwise."""
    from ..utils import interrupts

    # A signal ends the probes (and any engine they started) before the
    # command stops, and the temporary directory with them.
    with interrupts.stopping_on_signals():
        _verify(python, json_output, gpu, target, draft, attention_backend,
                dtype.value if dtype else None)


def _verify(python, json_output, gpu, target, draft, attention_backend, dtype) -> None:
    from ..utils.errors import Interrupted

    try:
        # Inside: a signal while it loads stops the command like any other.
        from ..vllm_tree.triage import locate

        if not gpu and (target or draft or attention_backend or dtype):
            raise BackportError(
                "--target, --draft, --attention-backend and --dtype need --gpu")
        if (target is None) != (draft is None):
            raise BackportError("--target and --draft go together: name both checkpoints")
        if target is not None:
            from ..verification.gpu_verify import checkpoint_dir

            target, draft = checkpoint_dir(target, "--target"), checkpoint_dir(draft, "--draft")
        located = locate(None, None, python)
        interpreter = located.python or str(python or sys.executable)
        # A hint repeats the interpreter as it was given.
        options = ("--python", str(python)) if python is not None else ()
        if gpu:
            from ..verification.gpu_verify import hint, run_gpu

            verification = run_gpu(interpreter, target, draft, attention_backend, dtype)
        else:
            from ..verification.verify import hint, run

            verification = run(interpreter)
        from ..verification.verify import render

        verification = dataclasses.replace(verification, hint=hint(options))

        raise SystemExit(render(verification, interpreter, json_output))
    except (BackportError, Interrupted) as error:
        if json_output:
            import json

            print(json.dumps({"command": "verify", "passed": False, "error": str(error)}))
        else:
            print(f"dflash2-backport: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _version(value: bool) -> None:
    import typer  # an eager option's callback: typer is parsing the line

    if value:
        from .. import __version__
        from ..build_info import version_line

        print(version_line(__version__))
        raise typer.Exit(0)


def _explain(name: Optional[str]) -> None:
    import typer  # an eager option's callback: typer is parsing the line

    if name is None:
        return
    from ..transforms import catalogue

    text = catalogue.explain(name)
    if text is None:
        print(
            f"dflash2-backport: error: no edit is called {name!r}; the edits are "
            + ", ".join(catalogue.names()),
            file=sys.stderr,
        )
        raise typer.Exit(2)
    print(text, end="")
    raise typer.Exit(0)


def _options(
    version: Annotated[
        bool,
        Option(
            "--version",
            callback=_version,
            is_eager=True,
            help="print the version and exit",
        ),
    ] = False,
    explain: Annotated[
        Optional[str],
        Option(
            "--explain",
            metavar="EDIT",
            callback=_explain,
            is_eager=True,
            help="say what an edit changes, where and why, and exit",
        ),
    ] = None,
) -> None:
    """Backport DFlash2 speculative decoding to vLLM 0.27.1, 0.27.0 and 0.26.0."""


PROG = "dflash2-backport"
# The commands a pre-commit hook or a deployment script runs many times.
_PLAIN_COMMANDS = ("check", "apply", "revert")


def _plain_call(argv: list[str]):
    """(command, its arguments) for a command line that only names one of
    _PLAIN_COMMANDS and options it declares, each once; else None.

    Such a line is what hooks and scripts run over and over, and it needs no
    parser: read against the command's own declarations here, it is answered
    without importing typer (a third of a cached `check`) or building its
    command, which from typer 0.29 on imports pydantic and builds a validator
    for every option, several times that cost (scripts/bench.py measures
    both). Anything else (help, a typo, a missing value, another command)
    goes to typer."""
    import inspect
    from typing import get_type_hints

    if not argv or argv[0] not in _PLAIN_COMMANDS:
        return None
    command = globals()[argv[0]]
    options: dict[str, tuple[str, bool]] = {}  # "--root" -> ("root", takes a value)
    for name, hint in get_type_hints(command, include_extras=True).items():
        declared = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Option)]
        if name == "return" or len(declared) != 1:
            continue
        for spelling in declared[0].spellings:
            options[spelling] = (name, hint.__origin__ is not bool)
    arguments = {
        name: parameter.default
        for name, parameter in inspect.signature(command).parameters.items()
    }
    given: set[str] = set()
    rest = iter(argv[1:])
    for word in rest:
        spelling, equals, value = word.partition("=")
        if spelling not in options or spelling in given:
            return None
        given.add(spelling)
        name, takes_value = options[spelling]
        if not takes_value:
            if equals:
                return None
            arguments[name] = True
            continue
        if not equals:
            value = next(rest, None)
        if not value:  # missing, or empty: typer says what is wrong
            return None
        arguments[name] = Path(value)
    return command, arguments


def _usage_errors() -> tuple[type, ...]:
    """The usage error classes of the click that this typer uses: its own
    copy from typer 0.28 on, click itself before."""
    import importlib

    found = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(module).UsageError)
        except ImportError:
            continue
    return tuple(found)


def usage_line(error, argv: list[str]) -> str:
    """A usage error as one line: the command, what is wrong, what to do."""
    context = getattr(error, "ctx", None)
    where = context.command_path if context is not None else PROG
    if where == PROG and argv and argv[0] in (
        c.name or c.callback.__name__ for c in _app().registered_commands
    ):
        # An option's missing value is reported against the group.
        where = f"{PROG} {argv[0]}"
    message = " ".join(error.format_message().split()).rstrip(".")
    return (
        f"{PROG}: error: `{where}`: {message}; run `{where} --help` to see what it takes"
    )


def main() -> None:
    argv = sys.argv[1:]
    plain = _plain_call(argv)
    if plain is not None:
        command, arguments = plain
        command(**arguments)
        sys.exit(0)
    if not argv:
        _app()(prog_name=PROG)  # the help, as click shows it with no command
        return
    try:
        code = _app()(prog_name=PROG, standalone_mode=False)
    except _usage_errors() as error:
        print(usage_line(error, argv), file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


@functools.cache
def _app():  # type: ignore[no-untyped-def]
    from . import typer_app

    return typer_app.build([apply, check, revert, verify], _options, **APP_SETTINGS)


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    # `app`, built on first use: `from dflash2_backport.cli.main import app`.
    if name == "app":
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
