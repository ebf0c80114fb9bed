"""One `check`, `apply` or `revert`, from the options that name its target to
the outcome it ends with.

The command line parses its options into a `RunOptions` (options.py),
calls `run` and prints what it returns; everything between (finding and triaging the tree,
the lock, an interrupted commit, the plan, the commit) is here and in
`transact.py`. Every way a run can end becomes one `Outcome`: 0 and 1 as
the command line documents them, 2 with one message for anything that
stops the tool.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Protocol

from ..utils.errors import READ_ONLY_MOUNT_REMEDY, BackportError, Interrupted
from . import outcome
from .options import RunOptions
from .outcome import Outcome

if TYPE_CHECKING:
    from ..vllm_tree.triage import Target
    from .plan import Plan


class Watcher(Protocol):
    """What a run tells its caller as it goes, so that whatever ends it is
    reported with all that was known by then (the command line's `Report`)."""

    target: Target | None
    plan: Plan | None
    diff: str | None

    def waiting(self, message: str) -> None: ...


def run(options: RunOptions, watcher: Watcher) -> Outcome:
    """The run, as one outcome; raises nothing but what ends the process."""
    try:
        return _run(options, watcher)
    except BackportError as error:
        return outcome.failed(str(error))
    except Interrupted as error:
        return outcome.interrupted(error)
    except OSError as error:
        where = error.filename or (watcher.target.root if watcher.target else "dflash2-backport")
        return outcome.failed(_os_error_line(where, error, options.command))
    except Exception as error:  # noqa: BLE001 - a bug: said plainly, never a traceback
        return outcome.crashed(error)


def _run(options: RunOptions, watcher: Watcher) -> Outcome:
    from ..vllm_tree.triage import Triage, locate, triage

    target = locate(options.site_packages, options.root, options.python)
    watcher.target = target
    verdict = triage(target, options.force)
    if verdict.triage is Triage.REFUSE:
        return outcome.failed(verdict.reason)
    if verdict.triage is Triage.UPSTREAM_SHIPS:
        return outcome.upstream_ships(target)
    # Imported late: a target refused or served by upstream is answered
    # without loading the judge.
    from . import transact

    return transact.on_tree(target, options, watcher)


def _os_error_line(where: object, error: OSError, command: str) -> str:
    """An error of the system, with what to do where there is something."""
    line = f"{where}: {error.strerror or error}; nothing was written"
    if error.errno in (errno.EACCES, errno.EPERM):
        may = "read it" if command == "check" else "read and write it"
        return f"{line}; run as a user who may {may}"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{line}; free space on its file system, then run the command again"
    if error.errno == errno.EROFS:
        return f"{line}; {READ_ONLY_MOUNT_REMEDY}"
    return line
