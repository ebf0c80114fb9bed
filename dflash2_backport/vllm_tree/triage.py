"""Where the vLLM tree is, which version it is, and whether it needs the backport.

Three kinds of target:

* "site-packages": an installed vLLM, whose `vllm-X.dist-info` beside it gives
  the version and whose RECORD is kept true to the files;
* "root": a fork's source tree (`--root`, a directory that contains `vllm/`),
  judged from the tree alone;
* "editable": a `pip install -e` of a source tree. The tree is patched like a
  "root"; the install's metadata in site-packages (dist-info, `.pth`, import
  hook) names the tree, not its files, so it is left alone.

Without `--site-packages` or `--root`, the interpreter that runs vLLM
(`--python`, default this tool's own) is asked where its `vllm` is.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from pathlib import Path

from ..utils.errors import BackportError
from ..utils.safe_files import read_regular
from .installer import upstream_ships_dflash2
from .locate import Found, ask, editable_source
from .record import dist_info

#: The releases whose code the edits are written for, each in its own form.
SUPPORTED_SERIES = ((0, 26), (0, 27))
FIRST_UPSTREAM = (0, 28, 0)


class TargetKind(str, enum.Enum):
    """Str-valued, so the JSON report prints the word."""

    SITE_PACKAGES = "site-packages"
    ROOT = "root"
    EDITABLE = "editable"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Target:
    root: Path
    kind: TargetKind
    version: str | None
    # The interpreter that was asked, when one was.
    python: str | None = None
    # An editable install's metadata, which stays as it is.
    dist_info: Path | None = None

    @property
    def label(self) -> str:
        version = f"vLLM {self.version}" if self.version else "vLLM (version unknown)"
        if self.kind is TargetKind.EDITABLE:
            return f"{version} at {self.root} (editable install: its source tree is patched)"
        return f"{version} at {self.root}"


def locate(
    site_packages: Path | None, root: Path | None, python: Path | None = None
) -> Target:
    given = [
        option
        for option, value in (
            ("--python", python), ("--site-packages", site_packages), ("--root", root)
        )
        if value is not None
    ]
    if len(given) > 1:
        together = f"both {given[0]} and {given[1]}" if len(given) == 2 else "all three"
        raise BackportError(f"give one of --python, --site-packages, --root, not {together}")
    if root is not None:
        tree = _vllm_parent(root, "--root")
        return Target(tree, TargetKind.ROOT, source_version(tree))
    if site_packages is not None:
        return _in_site_packages(site_packages)
    return _of_interpreter(python)


def _in_site_packages(site_packages: Path) -> Target:
    path = _resolved(site_packages, "--site-packages")
    if path.is_dir() and not (path / "vllm").is_dir():
        # An editable install leaves only metadata here; it names the tree.
        for dist_info in sorted(path.glob("vllm-*.dist-info")):
            source = editable_source(dist_info)
            if source is not None:
                return Target(
                    _editable_tree(source, dist_info),
                    TargetKind.EDITABLE,
                    _metadata_version(dist_info / "METADATA"),
                    dist_info=dist_info,
                )
    directory = _vllm_parent(site_packages, "--site-packages")
    return Target(directory, TargetKind.SITE_PACKAGES, installed_version(directory))


def _of_interpreter(python: Path | None) -> Target:
    found = ask(python)
    shown = str(python) if python is not None else found.python
    if found.package is None or not found.package.is_dir():
        hint = (
            "pass --python the interpreter that runs vLLM (e.g. /opt/venv/bin/python)"
            if python is None
            else "install vLLM there, or pass --python the interpreter that runs vLLM"
        )
        raise BackportError(f"{shown}: this interpreter cannot import vllm; {hint}")
    return from_found(found)


def from_found(found: Found) -> Target:
    """The target an interpreter's answer points at."""
    assert found.root is not None
    root = found.root.resolve()
    if found.editable and (found.dist_info is None or found.dist_info.parent != root):
        return Target(root, TargetKind.EDITABLE, found.version, found.python, found.dist_info)
    version = installed_version(root)
    if version is None:
        # A vllm/ with no metadata beside it is a source tree on the path
        # (PYTHONPATH, a bare .pth line): the tree decides, as with --root.
        return Target(root, TargetKind.ROOT, source_version(root), found.python)
    return Target(root, TargetKind.SITE_PACKAGES, version, found.python)


def _editable_tree(source: Path, dist_info: Path) -> Path:
    if not (source / "vllm").is_dir():
        raise BackportError(
            f"{dist_info}: an editable install of vLLM whose source tree {source} has "
            "no vllm/ package; reinstall vLLM, or pass --root the tree that has it"
        )
    return source.resolve()


def _resolved(path: Path, option: str) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop
        raise BackportError(
            f"{path}: cannot be resolved ({error}); pass {option} a directory"
        ) from None


def _vllm_parent(path: Path, option: str) -> Path:
    path = _resolved(path, option)
    if not path.is_dir():
        found = "not a directory" if path.exists() else "no such directory"
        raise BackportError(f"{path}: {found}; pass {option} a directory")
    if not (path / "vllm").is_dir():
        raise BackportError(
            f"{path}: no vllm/ package here; pass {option} the directory that contains vllm/"
        )
    return path


def installed_version(site_packages: Path) -> str | None:
    """vLLM's version from its .dist-info, or None when there is none."""
    info = dist_info(site_packages)
    return None if info is None else _metadata_version(info / "METADATA")


def _metadata_version(metadata: Path) -> str | None:
    # Read like a target: a FIFO here would block a plain open() forever.
    data = read_regular(metadata)
    if data is None:
        return None
    for line in data.splitlines():  # the headers end at the first blank line
        if not line.strip():
            break
        try:
            header = line.decode("utf-8")
        except UnicodeDecodeError:
            raise BackportError(
                f"{metadata}: not valid UTF-8; reinstall vLLM to restore its metadata"
            ) from None
        if header.startswith("Version:"):
            return header.partition(":")[2].strip()
    return None


# `__version__ = version = '0.27.1'`, as setuptools-scm and vcs-versioning
# write vllm/_version.py; annotations without a value do not match.
_VERSION_ASSIGNMENT = re.compile(
    r"""^(?:__version__|version)\b[^=\n]*=\s*(?:\w+\s*=\s*)*(['"])([^'"\n]+)\1""",
    re.MULTILINE,
)


def source_version(tree: Path) -> str | None:
    """The version a source tree's `vllm/_version.py` states, if it has one.

    Only for the report: a source tree is judged by its files, whatever it
    says it is."""
    try:
        data = read_regular(tree / "vllm" / "_version.py")
    except BackportError:  # a link or a FIFO: no version to show, no reason to stop
        return None
    if data is None:
        return None
    match = _VERSION_ASSIGNMENT.search(data.decode("utf-8", errors="replace"))
    return match.group(2) if match else None


def release(version: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


class Triage(enum.Enum):
    """What to do with a target before any edit is looked at."""

    PATCH = "patch"  # a 0.26 or 0.27 release, or a source tree: judge the edits
    UPSTREAM_SHIPS = "upstream-ships"  # upstream's own DFlash2: nothing to do
    REFUSE = "refuse"  # the tool will not touch this target


@dataclasses.dataclass(frozen=True)
class Verdict:
    triage: Triage
    reason: str = ""  # for REFUSE: why, and what to do


def triage(target: Target, force: bool) -> Verdict:
    # The feature, not a hunk, tells whether upstream ships DFlash2: 0.33.0
    # refactored the V2-runner forcing, so hunk-by-hunk judgement would call
    # it drift.
    if upstream_ships_dflash2(target.root):
        return Verdict(Triage.UPSTREAM_SHIPS)
    if target.kind is not TargetKind.SITE_PACKAGES or force:
        return Verdict(Triage.PATCH)
    if target.version is None:
        return Verdict(Triage.REFUSE, _unversioned(target.root))
    parsed = release(target.version)
    if parsed is not None and parsed[:2] in SUPPORTED_SERIES:
        return Verdict(Triage.PATCH)
    if parsed is not None and parsed >= FIRST_UPSTREAM:
        return Verdict(
            Triage.REFUSE,
            f"{target.root}: vLLM {target.version} should ship DFlash2 but its modules "
            "are missing; reinstall vLLM",
        )
    return Verdict(
        Triage.REFUSE,
        f"{target.root}: vLLM {target.version} is not a 0.26.x or 0.27.x release; "
        "pass --force to rely on the structural checks alone",
    )


def _unversioned(site_packages: Path) -> str:
    """Why an installed vLLM has no version, and what to do about it."""
    info = dist_info(site_packages)
    if info is None:
        import shlex

        return (
            f"{site_packages}: no vllm-*.dist-info here, so this is no installed vLLM; "
            f"for a source tree, pass --root {shlex.quote(str(site_packages))} instead; for "
            "an install whose metadata is lost, add --force to rely on the structural "
            "checks alone"
        )
    # The dist-info is there: what lacks the version is its METADATA.
    metadata = info / "METADATA"
    data = read_regular(metadata)
    if data is None:
        found = "no such file"
    elif not data.strip():
        found = "an empty file"
    else:
        found = "none among its headers"
    return (
        f"{metadata}: expected a Version: header, found {found}; reinstall vLLM to "
        "restore its metadata, or add --force to rely on the structural checks alone"
    )
