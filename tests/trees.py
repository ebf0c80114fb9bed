"""Scratch vLLM trees built from the real wheels, for tests and the benchmark."""

from __future__ import annotations

import shutil
from pathlib import Path

from dflash2_backport import transforms
from dflash2_backport.vllm_tree.layout import MODULE_FILES
from tests.wheels import vllm_source

#: The files the edits touch, in the order of their declarations, and the
#: files the installer adds.
TARGETS = transforms.target_files()
INSTALLED = MODULE_FILES


def make_site(version: str, destination: Path) -> Path:
    """A site-packages holding what the tool reads of vLLM `version`.

    The targets, the DFlash2 module paths where the release has them,
    vLLM's package file and its .dist-info: enough for the tool, and quick to
    copy for every test.
    """
    source = vllm_source(version)
    for relative in ("vllm/__init__.py", *TARGETS, *INSTALLED):
        if (source / relative).exists():
            (destination / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / relative, destination / relative)
    for dist_info in source.glob("vllm-*.dist-info"):
        shutil.copytree(dist_info, destination / dist_info.name)
    return destination


def snapshot(site: Path) -> dict[str, bytes]:
    """Every file under `site`, by relative path."""
    return {
        str(path.relative_to(site)): path.read_bytes()
        for path in sorted(site.rglob("*"))
        if path.is_file()
    }
