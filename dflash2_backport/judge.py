"""Run the codemods over the target files, on two cores when there are two.

Parsing is most of the cost of a cold `check`. Once libcst and the codemods
are loaded, the files are split by size into two shares; a forked worker
parses and judges one share while this process does the other, and sends
back its verdicts (and, when asked, the patched bytes). Without fork, or with DFLASH2_BACKPORT_JOBS=1, one
process does it all; the results are the same either way.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import traceback
from pathlib import Path

from .errors import BackportError
from .verdicts import EditReport, State


@dataclasses.dataclass(frozen=True)
class FileVerdict:
    path: str
    original: bytes
    edits: list[EditReport]
    patched: bytes | None  # None when no hunk is pending or bytes were not asked for


def judge(root: Path, want_bytes: bool, direction: str = "apply") -> list[FileVerdict]:
    """Every target file's verdicts, in the codemods' (upstream) order.

    `direction` "revert" runs the codemods' inverses: the verdicts are the
    same, and the patched bytes are the file with applied hunks undone.
    """
    if _jobs() < 2:
        return _in_upstream_order(_judge_share(root, want_bytes, direction, 0, 1))
    # Import before forking: the worker inherits the loaded parser and
    # codemods instead of spending a second core on loading them again.
    import libcst  # noqa: F401

    from . import transforms  # noqa: F401

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(read_end)
        try:
            payload: tuple = ("ok", _judge_share(root, want_bytes, direction, 1, 2))
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
        mine = _judge_share(root, want_bytes, direction, 0, 2)
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
    return _in_upstream_order(mine + value)


def _in_upstream_order(verdicts: list[FileVerdict]) -> list[FileVerdict]:
    order = {path: index for index, path in enumerate(_files())}
    return sorted(verdicts, key=lambda verdict: order[verdict.path])


def _jobs() -> int:
    if not hasattr(os, "fork"):
        return 1
    configured = os.environ.get("DFLASH2_BACKPORT_JOBS")
    if configured and configured.isdigit():
        return int(configured)
    return min(2, os.cpu_count() or 1)


def _files() -> dict[str, list]:
    from .transforms import CODEMODS

    by_file: dict[str, list] = {}
    for codemod_class in CODEMODS:
        by_file.setdefault(codemod_class.PATH, []).append(codemod_class)
    return by_file


def _share(root: Path, files: list[str], index: int, count: int) -> list[str]:
    """Files of share `index` of `count`, balanced by size (largest first)."""
    loads = [0] * count
    shares: list[list[str]] = [[] for _ in range(count)]

    def size(path: str) -> int:
        try:
            return (root / path).stat().st_size
        except OSError:
            return 0

    for path in sorted(files, key=lambda p: (-size(p), p)):
        lightest = loads.index(min(loads))
        shares[lightest].append(path)
        loads[lightest] += size(path)
    return shares[index]


def _judge_share(
    root: Path, want_bytes: bool, direction: str, index: int, count: int
) -> list[FileVerdict]:
    import libcst as cst

    from .transforms import EditRefused

    by_file = _files()
    verdicts = []
    for relative in _share(root, list(by_file), index, count):
        path = root / relative
        original = _read(path)
        try:
            tree = cst.parse_module(original)
        except cst.ParserSyntaxError as error:
            raise BackportError(
                f"{path}: does not parse (line {error.raw_line}: {error.message}); "
                "fix the file first"
            ) from None
        edits = []
        for codemod_class in by_file[relative]:
            codemod = codemod_class(revert=direction == "revert")
            try:
                tree = codemod.transform_module(tree)
            except EditRefused:
                pass
            edits.append(
                EditReport(
                    codemod.EDIT, relative, codemod.DESCRIPTION, tuple(codemod.verdicts)
                )
            )
        rewritten = State.PENDING if direction == "apply" else State.APPLIED
        touched = any(h.state is rewritten for e in edits for h in e.hunks)
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
