"""Judge the target files, and rewrite those a command changes.

1. Every file is read.
2. A file judged before, in this content, with its edits in these
   directions and by these judges, is answered from the verdict cache.
3. Any other must be valid in its declared encoding (a PEP 263 cookie, else
   UTF-8), and each edit's judge (Python's own parser) judges it. `check`,
   `apply` and `revert` judge alike; libcst is not loaded. Each edit is
   judged in the direction the command's edit set asks of it: `apply
   --only-pr` judges the PR's edits to apply and the fixes to undo, in one
   pass over each file.
4. When the command writes and nothing drifted anywhere, each file with
   hunks to rewrite goes to the libcst writers, and the bytes they return
   are judged once more, as the bytes about to be written: they must parse,
   and every hunk rewritten must read applied where its edit was applied,
   pending where it was undone (a bug otherwise, and nothing is written).
   Two or more files are rewritten by a pool of processes forked once libcst
   is loaded, one per core up to two (DFLASH2_BACKPORT_JOBS sets it); one
   file, or one core, is rewritten here.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import signal
import sys
from pathlib import Path

from .. import transforms
from ..transforms import EDITS
from ..transforms.framework.source import Source
from ..transforms.framework.vocabulary import EditReport, Goal, State
from ..utils.errors import BackportError
from ..utils.safe_files import decode_source, read_regular
from . import verdict_cache

#: Each edit of one file with its judged hunks, as the judges give them.
Judgement = list[tuple[transforms.Edit, dict[str, transforms.Judged]]]
JUDGES_DIRECTORY = Path(transforms.__file__).parent


@dataclasses.dataclass(frozen=True)
class JudgedFile:
    path: str
    original: bytes
    edits: list[EditReport]
    #: None when no hunk is to be rewritten or bytes were not asked for.
    patched: bytes | None


def judge(root: Path, want_bytes: bool, goal: Goal, use_cache: bool = True) -> list[JudgedFile]:
    """Every target file's verdicts, in upstream order, each edit judged in
    the direction `goal` asks of it; with `want_bytes`, and where nothing
    drifted, the rewritten bytes of the files that change."""
    paths = transforms.target_files()
    originals = {path: _read(root / path) for path in paths}
    judges = verdict_cache.judges_digest(JUDGES_DIRECTORY)

    reports: dict[str, list[EditReport]] = {}
    judged: dict[str, tuple[Source, Judgement]] = {}
    for path in paths:
        data = originals[path]
        # A remembered file was decoded when it was judged: its bytes are
        # the key.
        # The file's verdicts depend on the directions of its own edits
        # only: a file of PR edits alone is judged alike for `apply` and
        # `apply --only-pr`, and shares its cache entry.
        key = transforms.directions(path, goal)
        edits = verdict_cache.lookup(judges, key, path, data) if use_cache else None
        if edits is None:
            judged[path] = _judged(root, path, decode_source(root / path, data), goal)
            edits = [edit.report(hunks) for edit, hunks in judged[path][1]]
            if use_cache:
                verdict_cache.store(judges, key, path, data, edits)
        reports[path] = edits

    refused = any(e.state is State.DRIFT for edits in reports.values() for e in edits)
    to_write = [
        path
        for path in paths
        if want_bytes and not refused and any(e.has(goal.of(e).rewrites) for e in reports[path])
    ]
    for path in to_write:
        if path not in judged:  # answered from the cache: the sites are wanted now
            text = decode_source(root / path, originals[path])
            judged[path] = _judged(root, path, text, goal)
    patched = _rewritten(root, {p: (originals[p], *judged[p]) for p in to_write}, goal)
    return [JudgedFile(p, originals[p], reports[p], patched.get(p)) for p in paths]


def _judged(root: Path, path: str, text: str, goal: Goal) -> tuple[Source, Judgement]:
    try:
        source = Source(text)
        return source, transforms.judge_file(path, source, goal)
    except SyntaxError as error:
        where = f"line {error.lineno}: " if error.lineno else ""
        raise BackportError(
            f"{root / path}: does not parse ({where}{error.msg}); fix the file first"
        ) from None
    except ValueError as error:  # a NUL byte, before Python 3.12
        raise BackportError(f"{root / path}: does not parse ({error}); fix the file first") from None


# -- rewriting ------------------------------------------------------------------


def _rewritten(
    root: Path, files: dict[str, tuple[bytes, Source, Judgement]], goal: Goal
) -> dict[str, bytes]:
    """Each file's rewrite, largest file first."""
    if not files:
        return {}
    # libcst and the writers load here, before any worker forks: the workers
    # inherit them instead of each spending a core on loading them again.
    writers = _writers()
    for edit in EDITS:
        writers.writer_for(edit)
    order = sorted(files, key=lambda p: (-len(files[p][0]), p))
    jobs = []
    for path in order:
        data, source, judged = files[path]
        judgement = [(edit, edit.pinned(source, hunks)) for edit, hunks in judged]
        regions = writers.plan(source, judgement, goal)
        jobs.append((str(root), path, data, _by_index(judgement), regions, goal))
    workers = min(_jobs(), len(jobs))
    if workers < 2:
        return {job[1]: _write(*job) for job in jobs}
    # Loaded only to write: a check never starts a process.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from ..utils import interrupts

    context = multiprocessing.get_context("fork")
    # A signal waits the second or two the pool takes: raised inside the
    # executor's machinery, it left the command waiting forever for its
    # workers. Nothing has been written yet either way.
    with interrupts.held(), ProcessPoolExecutor(
        workers, mp_context=context, initializer=_worker_start, initargs=(os.getpid(),)
    ) as pool:
        futures = [pool.submit(_write, *job) for job in jobs]
        try:
            return {job[1]: future.result() for job, future in zip(jobs, futures)}
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _by_index(judgement: Judgement) -> list[tuple[int, dict]]:
    # Sent to a worker by position in EDITS: an edit's declaration holds its
    # judge and hunks, which the worker has already.
    return [(EDITS.index(edit), hunks) for edit, hunks in judgement]


def _writers():  # type: ignore[no-untyped-def]
    return importlib.import_module(".framework.writing", transforms.__name__)


def _worker_start(command: int) -> None:
    """A worker leaves SIGINT, SIGTERM and SIGHUP to the command, which
    stops cleanly and waits for it, and dies with the command: killed with
    SIGKILL, the command would otherwise leave workers that wait forever for
    work that never comes, holding the tree's lock, which they inherited."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    _die_with_parent()
    if os.getppid() != command:  # the command died before the line above
        os._exit(1)


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL))
    except (OSError, AttributeError):
        pass  # no prctl to be had: the worker outlives a SIGKILLed command


def _write(
    root: str,
    path: str,
    data: bytes,
    judged: list[tuple[int, dict]],
    regions: object,
    goal: Goal,
) -> bytes:
    """The file rewritten (the regions its hunks touch, where they can be
    parsed alone), and checked as it will be written."""
    writers = _writers()
    file = Path(root) / path
    judgement = [(EDITS[index], hunks) for index, hunks in judged]
    try:
        patched = writers.rewrite(data, judgement, goal, regions)
    except writers.Unparsable as error:
        raise BackportError(f"{file}: does not parse ({error}); fix the file first") from None
    except writers.SiteMoved as error:
        raise BackportError(f"{file}: {error}; nothing was written; please report this") from None
    problem = transforms.misjudged(decode_source(file, patched), judgement, goal)
    if problem is not None:
        raise BackportError(f"{file}: {problem}; nothing was written; please report this")
    return patched


def _jobs() -> int:
    if not hasattr(os, "fork"):
        return 1
    configured = os.environ.get("DFLASH2_BACKPORT_JOBS")
    if configured and configured.isdigit():
        return int(configured)
    return min(2, os.cpu_count() or 1)


def _read(path: Path) -> bytes:
    # Never through a link nor blocking on a FIFO put there since the paths
    # were checked.
    data = read_regular(path)
    if data is None:
        raise BackportError(f"{path}: missing; this does not look like a vLLM 0.27 tree")
    return data
