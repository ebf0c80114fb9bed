"""The production layout: the official vLLM image's system Python, vLLM in a
`dist-packages` directory, installed by uv.

uv installs by hard-linking each file from its cache, so a tool that wrote
into a file in place would also rewrite uv's cached copy, and every later
install of vLLM from that cache would come out patched (and RECORD-wrong).
Here vLLM 0.27.1 is really installed by uv (pinned in requirements-dev.txt)
with `--link-mode hardlink`, into a dist-packages directory that a venv's
`.pth` line puts on the path, as Debian's Python has it on its own.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm_tree.test_interpreter import PY_DIR, bare_venv, tool
from tests.trees import INSTALLED, TARGETS
from tests.wheels import vllm_wheel

pytestmark = [pytest.mark.wheels, pytest.mark.installs]

UV = Path(sys.executable).with_name("uv")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def uv_install(tmp_path: Path):
    """(python, dist-packages, uv cache) with vLLM hard-linked from the cache;
    all of it removed afterwards (the cache alone is 700 MB)."""
    assert UV.exists(), f"{UV} missing: `make .venv/.dev-installed` installs uv"
    python, site = bare_venv(tmp_path / "venv")
    dist = tmp_path / "usr" / "local" / "lib" / PY_DIR / "dist-packages"
    cache = tmp_path / "uv-cache"
    subprocess.run(
        [str(UV), "pip", "install", "--quiet", "--offline", "--no-deps",
         "--link-mode", "hardlink", "--python", str(python), "--target", str(dist),
         str(vllm_wheel("0.27.1"))],
        check=True, env={**os.environ, "UV_CACHE_DIR": str(cache)},
    )
    (site / "system.pth").write_text(f"{dist}\n")
    yield python, dist, cache
    for directory in (cache, dist, tmp_path / "venv"):
        shutil.rmtree(directory, ignore_errors=True)


def cache_copies(cache: Path, files: list[Path]) -> dict[Path, Path]:
    """Each installed file's twin in uv's cache: the path with its inode."""
    wanted = {f.stat().st_ino: f for f in files}
    found = {}
    for directory, _, names in os.walk(cache):
        for name in names:
            path = Path(directory, name)
            inode = path.lstat().st_ino
            if inode in wanted:
                found[wanted[inode]] = path
    return found


def test_apply_breaks_uvs_hard_links_and_leaves_its_cache_untouched(uv_install) -> None:
    python, dist, cache = uv_install
    targets = [dist / relative for relative in TARGETS]
    untouched = dist / "vllm" / "__init__.py"
    twins = cache_copies(cache, [*targets, untouched])
    # The premise: uv did hard-link every file the edits touch.
    assert set(twins) == {*targets, untouched}
    assert all(path.stat().st_nlink >= 2 for path in targets)
    cached = {path: digest(path) for path in twins.values()}

    applied = tool("apply", "--python", python)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert applied.stdout.splitlines()[0] == f"vLLM 0.27.1 at {dist.resolve()}"

    for target in targets:
        assert target.stat().st_nlink == 1, target
        assert digest(target) != cached[twins[target]], target
    assert {path: digest(path) for path in twins.values()} == cached
    assert untouched.stat().st_ino == twins[untouched].stat().st_ino
    assert all((dist / relative).is_file() for relative in INSTALLED)
    assert tool("check", "--python", python).returncode == 0

    reverted = tool("revert", "--python", python)
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert {target: digest(target) for target in targets} == {
        target: cached[twins[target]] for target in targets
    }
    assert {path: digest(path) for path in twins.values()} == cached


def test_site_packages_option_takes_a_dist_packages_directory(uv_install) -> None:
    _, dist, _ = uv_install
    result = tool("check", "--site-packages", dist)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == f"vLLM 0.27.1 at {dist.resolve()}"
