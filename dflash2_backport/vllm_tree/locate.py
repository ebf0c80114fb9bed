"""Where an interpreter finds vLLM, asked of that interpreter itself.

The tool is often installed apart from vLLM (pipx, another venv, a system
package), so its own sys.path says nothing about the vLLM a user runs. The
answer comes from a subprocess of the interpreter in question, which finds
the `vllm` package as `import vllm` would (user site, `.pth` files, import
hooks of editable installs, PYTHONPATH) but never imports it: importing vLLM
takes seconds and pulls in torch, and a broken vLLM must still be locatable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from ..utils.errors import BackportError

# Runs in the target interpreter with `-c`, so it must stand alone and keep to
# what Python 3.8 understands. The current directory is dropped from sys.path:
# a checkout of vLLM that the user happens to stand in is not what their
# interpreter imports from anywhere else.
_QUERY = r"""
import json, sys
if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]
import importlib.util
answer = {"executable": sys.executable, "version": list(sys.version_info[:3]),
          "package": None, "dist": None}
spec = importlib.util.find_spec("vllm")
if spec is not None:
    locations = list(spec.submodule_search_locations or [])
    answer["package"] = locations[0] if locations else spec.origin
try:
    from importlib import metadata
    dist = metadata.distribution("vllm")
except Exception:
    dist = None
def readable(path, name):
    # A FIFO would block the read forever. Left unread here: the tool reads
    # METADATA again itself, without blocking, and names what it finds.
    import os, stat
    try:
        return path is None or stat.S_ISREG(os.stat(os.path.join(str(path), name)).st_mode)
    except OSError:
        return True
if dist is not None:
    path = getattr(dist, "_path", None)
    answer["dist"] = {
        "version": dist.version if readable(path, "METADATA") else None,
        "path": str(path) if path is not None else None,
        "direct_url": (
            dist.read_text("direct_url.json") if readable(path, "direct_url.json") else None
        ),
    }
print(json.dumps(answer))
"""

_TIMEOUT = 60


@dataclasses.dataclass(frozen=True)
class Found:
    """What an interpreter reports about its `vllm`."""

    python: str
    package: Path | None  # the vllm/ directory `import vllm` would load
    dist_info: Path | None  # vllm's distribution metadata, wherever it is
    version: str | None  # from that metadata
    editable: bool  # direct_url.json says "editable": true

    @property
    def root(self) -> Path | None:
        """The directory that contains vllm/."""
        return None if self.package is None else self.package.parent


def ask(python: str | os.PathLike | None = None) -> Found:
    """Ask `python` (default: the interpreter running this tool) where vllm is."""
    # Imported here: a target given by path never asks, and a cached `check`
    # should not pay for them.
    import subprocess
    import tempfile

    executable = str(python) if python is not None else sys.executable
    shown = str(python) if python is not None else executable
    if python is not None:
        executable = _interpreter_path(executable, shown)
    with tempfile.TemporaryDirectory(prefix="dflash2-backport-") as cwd:
        try:
            # Bytes, decoded leniently below: a `.pth` file or sitecustomize
            # may print anything in any encoding before the answer, which is
            # ASCII (json.dumps escapes the rest).
            done = subprocess.run(
                [executable, "-c", _QUERY],
                capture_output=True,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                timeout=_TIMEOUT,
            )
        except OSError as error:
            raise BackportError(
                f"{shown}: cannot run it ({error.strerror}); pass --python a Python "
                "interpreter"
            ) from None
        except subprocess.TimeoutExpired:
            raise BackportError(
                f"{shown}: did not answer within {_TIMEOUT} s; check that it starts"
            ) from None
    stdout = done.stdout.decode("utf-8", errors="replace")
    stderr = done.stderr.decode("utf-8", errors="replace")
    answer = _parse(stdout)
    if done.returncode != 0 or answer is None:
        raise BackportError(_no_answer(shown, stderr))
    if not _well_formed(answer):
        # Something that prints JSON, not Python running the query above.
        raise BackportError(
            f"{shown}: not a Python interpreter (its answer is not the one Python gives "
            "to this tool's query); pass --python the Python that runs vLLM"
        )
    dist = answer.get("dist") or {}
    return Found(
        python=answer.get("executable") or executable,
        package=Path(answer["package"]) if answer.get("package") else None,
        dist_info=Path(dist["path"]) if dist.get("path") else None,
        version=dist.get("version"),
        editable=is_editable(dist.get("direct_url")),
    )


def _interpreter_path(given: str, shown: str) -> str:
    """The absolute path of the interpreter `--python` names: a bare name
    (`python3`) is the one on PATH, as in a shell; any other path is taken
    from the current directory, since the interpreter runs in another."""
    import shutil

    path = shutil.which(given) if os.sep not in given else None
    path = os.path.abspath(path or given)
    if os.path.isdir(path):
        inside = next(
            (os.path.join(shown, "bin", name) for name in ("python", "python3")
             if os.path.isfile(os.path.join(path, "bin", name))),
            None,
        )
        hint = (f"pass --python {inside}" if inside
                else "pass --python the Python interpreter that runs vLLM, not a directory")
        raise BackportError(f"{shown}: a directory, not an interpreter; {hint}")
    if not os.path.exists(path):
        raise BackportError(
            f"{shown}: no such interpreter; pass --python the path of the Python that "
            "runs vLLM (in its environment, `python -c 'import sys; "
            "print(sys.executable)'` prints it)"
        )
    return path


def _no_answer(shown: str, stderr: str) -> str:
    """Why an interpreter gave no answer, in one line of bounded length."""
    import re

    if "Traceback (most recent call last)" not in stderr and not re.search(
        r"^\w*Error\b", stderr, flags=re.MULTILINE
    ):
        # Not Python: what it printed is about our query, not about vLLM.
        return (f"{shown}: not a Python interpreter (it did not answer as one); "
                "pass --python the Python that runs vLLM")
    last = " ".join((stderr.strip().splitlines() or ["no output"])[-1].split())
    if len(last) > 160:
        last = last[:157] + "..."
    return (f"{shown}: could not ask it where vllm is ({last}); pass --python the "
            "Python 3 interpreter that runs vLLM")


def _parse(stdout: str) -> dict | None:
    # The last line: a sitecustomize or .pth file may print before the query,
    # and what it printed may not end in a newline.
    for line in reversed(stdout.strip().splitlines()):
        start = line.find("{")
        while start != -1:
            try:
                answer = json.loads(line[start:])
            except ValueError:
                start = line.find("{", start + 1)
                continue
            if isinstance(answer, dict) and "package" in answer:
                return answer
            break
    return None


def _well_formed(answer: dict) -> bool:
    """Whether `answer` has the shape _QUERY prints."""
    def text_or_none(value: object) -> bool:
        return value is None or isinstance(value, str)

    dist = answer.get("dist")
    return (
        text_or_none(answer.get("executable"))
        and text_or_none(answer.get("package"))
        and (
            dist is None
            or isinstance(dist, dict)
            and all(text_or_none(dist.get(key)) for key in ("version", "path", "direct_url"))
        )
    )


def is_editable(direct_url: str | None) -> bool:
    """Whether a direct_url.json (PEP 610) records an editable install."""
    if not direct_url:
        return False
    try:
        document = json.loads(direct_url)
    except ValueError:
        return False
    dir_info = document.get("dir_info") if isinstance(document, dict) else None
    return isinstance(dir_info, dict) and dir_info.get("editable") is True


def editable_source(dist_info: Path) -> Path | None:
    """The source directory of an editable install, from its direct_url.json."""
    from ..utils.safe_files import read_regular

    # Read like a target: a FIFO here would block a plain open() forever.
    data = read_regular(dist_info / "direct_url.json")
    text = None if data is None else data.decode("utf-8", errors="replace")
    if not is_editable(text):
        return None
    url = json.loads(text).get("url", "")
    if not url.startswith("file://"):
        return None
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(url).path))
