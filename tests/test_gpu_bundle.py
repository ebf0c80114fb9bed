"""The GPU bundle carries 0.27.1 three ways in one tree and two small overlays.

scripts/gpu/build_bundle.py zips 0.27.1 after `apply` whole, and, for
`apply --only-pr` and for the wheel as it ships, only what differs from it
(files to write, and `.removed`, files to delete); setup_device.sh's
`overlay` makes each of those trees from a copy of the first.
"""

from __future__ import annotations

import importlib.util
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.test_interpreter import tool
from tests.trees import INSTALLED, TARGETS, make_site
from tests.wheels import REPOSITORY, vllm_source

SCRIPTS = REPOSITORY / "scripts" / "gpu"


def build_bundle():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("build_bundle", SCRIPTS / "build_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "base,target,writes,removed",
    [
        ({}, {}, {}, []),
        ({"a.py": b"1"}, {"a.py": b"1"}, {}, []),
        ({"a.py": b"1"}, {"a.py": b"2"}, {"a.py": b"2"}, []),
        ({"a.py": b"1"}, {"a.py": b"1", "b.py": b"new"}, {"b.py": b"new"}, []),
        ({"a.py": b"1", "z.py": b"", "b.py": b"x"}, {"a.py": b"1"}, {}, ["b.py", "z.py"]),
        ({"a.py": b""}, {"b.py": b""}, {"b.py": b""}, ["a.py"]),
    ],
    ids=["empty", "same", "changed", "added", "deleted-sorted", "renamed"],
)
def test_an_overlay_writes_what_differs_and_deletes_what_is_gone(base, target, writes, removed):
    assert build_bundle().overlay(base, target) == (writes, removed)


def run_overlay(zip_path: Path, base: Path, tree: Path) -> None:
    """setup_device.sh's own `overlay` function, taken from the script."""
    script = (SCRIPTS / "setup_device.sh").read_text()
    function = script[script.index("overlay() {"):]
    function = function[: function.index("\n}\n") + 3]
    subprocess.run(["bash", "-c", f'set -e\n{function}overlay "$@"', "overlay",
                    str(zip_path), str(base), str(tree)], check=True)


def python_files(tree: Path) -> dict[str, bytes]:
    return {p.relative_to(tree).as_posix(): p.read_bytes() for p in (tree / "vllm").rglob("*.py")}


@pytest.mark.wheels
def test_the_overlays_over_the_patched_tree_give_only_pr_and_pristine_0_27_1(tmp_path):
    bundle = build_bundle()
    touched = bundle.build_0271_trees(tmp_path / "out")
    assert set(TARGETS) | set(INSTALLED) == set(touched["closure"])
    base = tmp_path / "vt"
    with zipfile.ZipFile(tmp_path / "out" / "main" / "vllm-tree.zip") as patched:
        patched.extractall(base)
    stub = {name: text.encode() for name, text in bundle.STUB_FILES.items()}

    shipped = {**python_files(vllm_source("0.27.1")), **stub}
    only_pr = make_site("0.27.1", tmp_path / "only-pr-site")
    assert tool("apply", "--only-pr", "--site-packages", only_pr).returncode == 0
    expected = {"pristine": shipped, "only-pr": {**shipped, **python_files(only_pr)}}

    for name in ("only-pr", "pristine"):
        tree = tmp_path / name
        run_overlay(tmp_path / "out" / "main" / f"vllm-0.27.1-{name}.zip", base, tree)
        got = python_files(tree)
        assert sorted(got) == sorted(expected[name]), name
        assert [f for f in got if got[f] != expected[name][f]] == [], name
        assert not (tree / ".removed").exists()
    # the files `apply` installs are gone from the pristine tree, folders too
    assert not (tmp_path / "pristine/vllm/v1/worker/gpu/spec_decode/dflash2").exists()
