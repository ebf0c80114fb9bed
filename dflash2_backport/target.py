"""Where the vLLM tree is, which version it is, and whether it needs the backport.

Two kinds of target: an installed vLLM (a site-packages directory, whose
`vllm-X.dist-info` gives the version) and a fork's source tree (`--root`, a
directory that contains `vllm/`, judged from the tree alone).
"""

from __future__ import annotations

import dataclasses
import re
import sysconfig
from pathlib import Path

from .errors import BackportError
from .installer import upstream_ships_dflash2
from .record import dist_info

SUPPORTED_SERIES = (0, 27)
FIRST_UPSTREAM = (0, 28, 0)


@dataclasses.dataclass(frozen=True)
class Target:
    root: Path
    kind: str  # "site-packages" or "root"
    version: str | None

    @property
    def label(self) -> str:
        version = f"vLLM {self.version}" if self.version else "vLLM (version unknown)"
        return f"{version} at {self.root}"


def locate(site_packages: Path | None, root: Path | None) -> Target:
    if site_packages is not None and root is not None:
        raise BackportError("give --site-packages or --root, not both")
    if root is not None:
        return Target(_vllm_parent(root, "--root"), "root", None)
    if site_packages is None:
        site_packages = Path(sysconfig.get_paths()["purelib"])
    directory = _vllm_parent(site_packages, "--site-packages")
    return Target(directory, "site-packages", installed_version(directory))


def _vllm_parent(path: Path, option: str) -> Path:
    try:
        path = path.expanduser().resolve()
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop
        raise BackportError(f"{path}: cannot be resolved ({error}); pass {option} a directory") from None
    if not path.is_dir():
        raise BackportError(f"{path}: no such directory; pass {option} a directory")
    if not (path / "vllm").is_dir():
        raise BackportError(
            f"{path}: no vllm/ package here; pass {option} the directory that contains vllm/"
        )
    return path


def installed_version(site_packages: Path) -> str | None:
    """vLLM's version from its .dist-info, or None when there is none."""
    info = dist_info(site_packages)
    if info is None:
        return None
    metadata = info / "METADATA"
    try:
        with metadata.open(encoding="utf-8") as lines:
            for line in lines:
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
                if not line.strip():
                    break
    except UnicodeDecodeError:
        raise BackportError(
            f"{metadata}: not valid UTF-8; reinstall vLLM to restore its metadata"
        ) from None
    except OSError:
        pass
    return None


def release(version: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What to do with a target before any edit is looked at."""

    upstream: bool  # upstream vLLM ships DFlash2: nothing to do
    refusal: str | None = None  # why the tool will not touch this target


def triage(target: Target, force: bool) -> Verdict:
    # The feature, not a hunk, tells whether upstream ships DFlash2: 0.33.0
    # refactored the V2-runner forcing, so hunk-by-hunk judgement would call
    # it drift.
    if upstream_ships_dflash2(target.root):
        return Verdict(upstream=True)
    if target.kind == "root" or force:
        return Verdict(upstream=False)
    if target.version is None:
        return Verdict(
            False,
            f"{target.root}: no vllm-*.dist-info found, so the vLLM version is unknown; "
            "pass --force to rely on the structural checks alone",
        )
    parsed = release(target.version)
    if parsed is not None and parsed[:2] == SUPPORTED_SERIES:
        return Verdict(upstream=False)
    if parsed is not None and parsed >= FIRST_UPSTREAM:
        return Verdict(
            False,
            f"{target.root}: vLLM {target.version} should ship DFlash2 but its modules "
            "are missing; reinstall vLLM",
        )
    return Verdict(
        False,
        f"{target.root}: vLLM {target.version} is not a 0.27.x release; "
        "pass --force to rely on the structural checks alone",
    )
