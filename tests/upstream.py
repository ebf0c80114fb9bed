"""Upstream vLLM's own test files, from the source distribution on PyPI.

The sdist holds `tests/`; the wheel does not. pip would build the package's
metadata to download an sdist (installing torch and cmake for it), so the
archive is fetched straight from the index's JSON listing, checked against
its SHA-256, cached beside the wheels, and only the test files asked for are
extracted. Never committed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import urllib.request
from pathlib import Path

from tests.wheels import CACHE, cache_lock

INDEX = "https://pypi.org/simple/vllm/"


def vllm_sdist(version: str) -> Path:
    """`vllm-VERSION.tar.gz`, downloaded once."""
    directory = CACHE / "sdists"
    archive = directory / f"vllm-{version}.tar.gz"
    if archive.exists():
        return archive
    with cache_lock("sdists"):
        if not archive.exists():
            _download(archive)
    return archive


def _download(archive: Path) -> None:
    directory = archive.parent
    request = urllib.request.Request(
        INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    (entry,) = [f for f in files if f["filename"] == archive.name]
    directory.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    digest = hashlib.sha256()
    with urllib.request.urlopen(entry["url"], timeout=300) as response, open(partial, "wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != entry["hashes"]["sha256"]:
        partial.unlink()
        raise RuntimeError(f"{archive.name}: SHA-256 does not match the index")
    partial.replace(archive)


def upstream_tests(version: str, *relative: str) -> Path:
    """A directory holding upstream's `tests/RELATIVE` files of `version`
    (and each package's `__init__.py` and `conftest.py` on the way, so that
    pytest collects them as upstream does). Returns the directory that
    contains `tests/`."""
    target = CACHE / "upstream-tests" / version
    wanted = {f"tests/{r}" for r in relative}
    # Under the lock: another process may be writing the files asked for.
    with cache_lock("upstream-tests"):
        missing = {w for w in wanted if not (target / w).exists()}
        if missing:
            _extract(vllm_sdist(version), target, missing)
    return target


def _extract(archive_path: Path, target: Path, missing: set[str]) -> None:
    prefix = f"vllm-{target.name}/"
    with tarfile.open(archive_path) as archive:
        for member in archive.getmembers():
            name = member.name.removeprefix(prefix)
            parents = {str(Path(w).parent) for w in missing}
            helper = Path(name).name in ("__init__.py", "conftest.py") and any(
                p == str(Path(name).parent) or p.startswith(f"{Path(name).parent}/")
                for p in parents
            )
            if member.isfile() and (name in missing or helper):
                destination = target / name
                destination.parent.mkdir(parents=True, exist_ok=True)
                with archive.extractfile(member) as source, open(destination, "wb") as out:
                    shutil.copyfileobj(source, out)
