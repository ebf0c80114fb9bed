"""A target the tool cannot work on is one line saying what is wrong with it.

Each case runs the console script as a user would, standing in a pristine
0.27.1 tree: an empty path (an unset variable, `--root "$SRC"`) once meant
that tree, and `apply` patched it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.vllm_tree.test_interpreter import TOOL
from tests.trees import make_site, snapshot

pytestmark = pytest.mark.wheels


def drop_version(metadata: Path) -> None:
    metadata.write_text(
        "".join(x for x in metadata.read_text().splitlines(True) if not x.startswith("Version:"))
    )


# Each: (what is done to the tree first, the command line, the start of the
# one line, after "dflash2-backport: error: "). {site}, {file} and {metadata}
# stand for the tree, a regular file beside it and its dist-info's METADATA.
EMPTY = "Invalid value for '{option}': an empty path; give the path itself"
CASES = {
    "--root and an empty word": (None, ["apply", "--root", ""],
                                 "`dflash2-backport apply`: " + EMPTY.format(option="--root")),
    "--root=": (None, ["apply", "--root="],
                "`dflash2-backport apply`: " + EMPTY.format(option="--root")),
    "--site-packages and an empty word": (
        None, ["apply", "--site-packages", ""],
        "`dflash2-backport apply`: " + EMPTY.format(option="--site-packages")),
    "--site-packages=": (None, ["revert", "--site-packages="],
                         "`dflash2-backport revert`: " + EMPTY.format(option="--site-packages")),
    "--python and an empty word": (None, ["check", "--python", ""],
                                   "`dflash2-backport check`: " + EMPTY.format(option="--python")),
    "verify --python=": (None, ["verify", "--python="],
                         "`dflash2-backport verify`: " + EMPTY.format(option="--python")),
    "--root naming a file": (None, ["apply", "--root", "{file}"],
                             "{file}: not a directory; pass --root a directory"),
    "--site-packages naming a file": (
        None, ["check", "--site-packages", "{file}"],
        "{file}: not a directory; pass --site-packages a directory"),
    "--root naming nothing": (None, ["check", "--root", "{site}/nowhere"],
                              "{site}/nowhere: no such directory; pass --root a directory"),
    "METADATA without a Version: line": (
        drop_version, ["apply", "--site-packages", "{site}"],
        "{metadata}: expected a Version: header, found none among its headers; "
        "reinstall vLLM to restore its metadata, or add --force"),
    "METADATA empty": (
        lambda metadata: metadata.write_bytes(b""), ["check", "--site-packages", "{site}"],
        "{metadata}: expected a Version: header, found an empty file; reinstall vLLM"),
    "no METADATA": (
        lambda metadata: metadata.unlink(), ["check", "--site-packages", "{site}"],
        "{metadata}: expected a Version: header, found no such file; reinstall vLLM"),
    "no dist-info at all": (
        lambda metadata: shutil.rmtree(metadata.parent),
        ["check", "--site-packages", "{site}"],
        "{site}: no vllm-*.dist-info here, so this is no installed vLLM; "
        "for a source tree, pass --root"),
}


@pytest.mark.parametrize(("prepare", "arguments", "start"), CASES.values(), ids=CASES.keys())
def test_a_target_the_tool_cannot_work_on_is_one_line_saying_what_is_wrong(
    tmp_path: Path, prepare, arguments: list[str], start: str
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    (metadata,) = site.glob("vllm-*.dist-info/METADATA")
    (tmp_path / "file").write_text("not a tree\n")
    if prepare is not None:
        prepare(metadata)
    before = snapshot(site)
    names = {"site": site, "file": tmp_path / "file", "metadata": metadata}
    result = subprocess.run([TOOL, *(a.format(**names) for a in arguments)], cwd=site,
                            capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("dflash2-backport: error: " + start.format(**names)), line
    assert snapshot(site) == before
