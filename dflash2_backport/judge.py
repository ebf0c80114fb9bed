"""Judge the target files, each as cheaply as its answer allows.

1. Every file is read and must be valid in its declared encoding (a PEP 263
   cookie, else UTF-8).
2. A file judged before, in this content and by these codemods, is answered
   from the verdict cache.
3. Otherwise the quick judge (`transforms/_quick.py`, Python's own parser)
   judges it, in the apply direction; where it is sure of every hunk, that
   is the answer, and libcst is never loaded.
4. A file that must be rewritten, that drifted, or that the quick judge is
   unsure of goes to the libcst codemods, on two cores when there are two:
   once libcst and the codemods are loaded, a forked worker parses and
   judges a share of the files (split by size) while this process does the
   rest. Without fork, or with DFLASH2_BACKPORT_JOBS=1, one process does it.

Where the quick judge and a codemod both judged a hunk, they must agree; a
disagreement is a bug in one of them and stops the command. Where only the
quick judge ran (nothing to rewrite), its answer stands: the codemods' unit
tables hold it to their verdicts case by case.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pickle
import traceback
from pathlib import Path

from . import verdict_cache
from .errors import BackportError
from .safe_files import decode_source
from .verdicts import Direction, EditReport, HunkVerdict, State

# The codemods live in the repository's top-level transforms/, which the
# wheel and the editable install map to dflash2_backport.transforms; this is
# the one place the engine reaches them. A source checkout on sys.path that
# was never installed has only the top-level package. The quick judge and
# the codemods are imported from it when first needed, so that a cached
# answer loads neither.
try:
    from .transforms import hunks
    from . import transforms
except ModuleNotFoundError as missing:
    if missing.name != f"{__package__}.transforms":
        raise
    import transforms  # type: ignore[no-redef]
    from transforms import hunks  # type: ignore[no-redef]

CODEMODS_DIRECTORY = Path(transforms.__file__).parent


@dataclasses.dataclass(frozen=True)
class FileVerdict:
    path: str
    original: bytes
    edits: list[EditReport]
    #: None when no hunk is to be rewritten or bytes were not asked for.
    patched: bytes | None


def judge(
    root: Path, want_bytes: bool, direction: Direction, use_cache: bool = True
) -> list[FileVerdict]:
    """Every target file's verdicts, in upstream order.

    Reverting, the verdicts are those of the codemods' inverses and the
    patched bytes are the file with its applied hunks undone.
    """
    paths = list(dict.fromkeys(edit.path for edit in hunks.EDITS))
    originals = {path: _read(root / path) for path in paths}
    for path in paths:
        decode_source(root / path, originals[path])
    codemods = verdict_cache.codemods_digest(CODEMODS_DIRECTORY)

    done: dict[str, FileVerdict] = {}
    quick: dict[str, dict[str, dict[str, State | None]]] = {}
    to_rewrite: list[str] = []
    for path in paths:
        data = originals[path]
        edits = (
            verdict_cache.lookup(codemods, direction, path, data) if use_cache else None
        )
        if edits is None and direction is Direction.APPLY:
            quick[path] = _quick_verdicts(path, data)
            edits = _sure(path, quick[path])
            if edits is not None and use_cache:
                verdict_cache.store(codemods, direction, path, data, edits)
        if edits is not None and not (
            want_bytes and any(e.has(direction.rewrites) for e in edits)
        ):
            done[path] = FileVerdict(path, data, edits, None)
        else:
            to_rewrite.append(path)

    rewrite = {path: originals[path] for path in to_rewrite}
    for verdict in _with_codemods(root, rewrite, want_bytes, direction):
        if direction is Direction.APPLY:
            if verdict.path not in quick:
                quick[verdict.path] = _quick_verdicts(verdict.path, verdict.original)
            _agree(root / verdict.path, quick[verdict.path], verdict.edits)
        if use_cache:
            verdict_cache.store(
                codemods, direction, verdict.path, verdict.original, verdict.edits
            )
        done[verdict.path] = verdict
    return [done[path] for path in paths]


# -- the quick judge --------------------------------------------------------


def _quick_verdicts(path: str, data: bytes) -> dict[str, dict[str, State | None]]:
    """Edit name -> hunk name -> quick verdict (None: unsure); empty when
    Python cannot parse the file."""
    quick = importlib.import_module("._quick", transforms.__name__)
    judged = quick.judge_file(path, data)
    if judged is None:
        return {}
    return {edit.name: verdicts for edit, verdicts in judged.items()}


def _sure(
    path: str, quick: dict[str, dict[str, State | None]]
) -> list[EditReport] | None:
    """The file's edit reports when the quick judge is sure of every hunk."""
    reports = []
    for edit in (e for e in hunks.EDITS if e.path == path):
        verdicts = quick.get(edit.name, {})
        states = [verdicts.get(h.name) for h in edit.hunks]
        if any(state is None for state in states):
            return None
        reports.append(
            EditReport(
                edit.name,
                path,
                edit.description,
                tuple(HunkVerdict(h.name, s) for h, s in zip(edit.hunks, states)),
            )
        )
    return reports


def _agree(
    path: Path,
    quick: dict[str, dict[str, State | None]],
    edits: list[EditReport],
) -> None:
    for edit in edits:
        for hunk in edit.hunks:
            known = quick.get(edit.edit, {}).get(hunk.hunk)
            if known is not None and known is not hunk.state:
                raise BackportError(
                    f"{path}: {edit.edit}/{hunk.hunk}: Python's parser judges it "
                    f"{known}, the codemod {hunk.state}; nothing was written; "
                    "please report this"
                )


# -- the codemods -----------------------------------------------------------


def _with_codemods(
    root: Path, files: dict[str, bytes], want_bytes: bool, direction: Direction
) -> list[FileVerdict]:
    if not files:
        return []
    if _jobs() < 2 or len(files) < 2:
        return _judge_share(root, files, want_bytes, direction, 0, 1)
    # Import before forking: the worker inherits the loaded parser and
    # codemods instead of spending a second core on loading them again.
    import libcst  # noqa: F401

    transforms.CODEMODS  # noqa: B018

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(read_end)
        try:
            payload: tuple = (
                "ok",
                _judge_share(root, files, want_bytes, direction, 1, 2),
            )
        except BackportError as error:
            payload = ("error", str(error))
        except BaseException:  # noqa: BLE001 - reported by the parent
            payload = ("crash", traceback.format_exc())
        try:
            with os.fdopen(write_end, "wb") as pipe:
                pickle.dump(payload, pipe)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        mine = _judge_share(root, files, want_bytes, direction, 0, 2)
    finally:
        with os.fdopen(read_end, "rb") as pipe:
            received = pipe.read()
        os.waitpid(pid, 0)
    if not received:
        raise RuntimeError("the worker process died without an answer")
    kind, value = pickle.loads(received)
    if kind == "error":
        raise BackportError(value)
    if kind == "crash":
        raise RuntimeError(f"the worker process failed:\n{value}")
    return mine + value


def _jobs() -> int:
    if not hasattr(os, "fork"):
        return 1
    configured = os.environ.get("DFLASH2_BACKPORT_JOBS")
    if configured and configured.isdigit():
        return int(configured)
    return min(2, os.cpu_count() or 1)


def _share(files: dict[str, bytes], index: int, count: int) -> list[str]:
    """Files of share `index` of `count`, balanced by size (largest first)."""
    loads = [0] * count
    shares: list[list[str]] = [[] for _ in range(count)]
    for path in sorted(files, key=lambda p: (-len(files[p]), p)):
        lightest = loads.index(min(loads))
        shares[lightest].append(path)
        loads[lightest] += len(files[path])
    return shares[index]


def _judge_share(
    root: Path,
    files: dict[str, bytes],
    want_bytes: bool,
    direction: Direction,
    index: int,
    count: int,
) -> list[FileVerdict]:
    import libcst as cst

    verdicts = []
    for relative in _share(files, index, count):
        path = root / relative
        original = files[relative]
        try:
            tree = cst.parse_module(original)
        except cst.ParserSyntaxError as error:
            raise BackportError(
                f"{path}: does not parse (line {error.raw_line}: {error.message}); "
                "fix the file first"
            ) from None
        edits = []
        for codemod_class in transforms.CODEMODS:
            if codemod_class.PATH != relative:
                continue
            outcome = codemod_class(direction=direction).outcome(tree)
            if outcome.tree is not None:  # None: drift, in the verdicts
                tree = outcome.tree
            edits.append(
                EditReport(
                    codemod_class.EDIT,
                    relative,
                    codemod_class.DESCRIPTION,
                    outcome.verdicts,
                )
            )
        touched = any(e.has(direction.rewrites) for e in edits)
        patched = tree.bytes if touched and want_bytes else None
        verdicts.append(FileVerdict(relative, original, edits, patched))
    return verdicts


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise BackportError(
            f"{path}: missing; this does not look like a vLLM 0.27 tree"
        ) from None
    except IsADirectoryError:
        raise BackportError(f"{path}: is a directory, expected a Python file") from None
    except OSError as error:
        raise BackportError(f"{path}: cannot read ({error.strerror})") from None
