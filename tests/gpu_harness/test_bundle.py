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

from tests.vllm_tree.test_interpreter import tool
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


@pytest.mark.parametrize(
    "total,first,limit,sizes",
    [
        (10, 4, 5, [4, 5, 1]),
        (10, 0, 5, [5, 5]),
        (3, 4, 5, [3]),
        (10, 4, 6, [4, 6]),
        (70, 31, 61, [31, 39]),
    ],
    ids=["three", "no-room-first", "fits-in-first", "exact", "dsl-as-built"],
)
def test_a_stream_is_cut_to_fill_the_first_part_then_whole_parts(total, first, limit, sizes):
    assert build_bundle().piece_sizes(total, first, limit) == sizes


def run_assemble(pieces: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    """setup_device.sh's own `assemble_pieces` function, taken from the script."""
    script = (SCRIPTS / "setup_device.sh").read_text()
    function = script[script.index("assemble_pieces() {"):]
    function = function[: function.index("\n}\n") + 3]
    return subprocess.run(["bash", "-c", f'{function}assemble_pieces "$@"', "assemble",
                           str(pieces), str(dest)], capture_output=True, text=True)


def cut_tar(tmp_path: Path, first: int, limit: int) -> tuple[Path, list[Path]]:
    """A small xz'd tar cut by the builder as it cuts the CuTe DSL; the pieces
    gathered in one folder, as setup_device.sh gathers them."""
    source = tmp_path / "src"
    (source / "pkg" / "sub").mkdir(parents=True)
    (source / "pkg" / "__init__.py").write_text("VALUE = 7\n")
    (source / "pkg" / "sub" / "blob.bin").write_bytes(bytes(range(256)) * 300)
    stream = tmp_path / "dsl.tar.xz"
    subprocess.run(["tar", "-cJf", str(stream), "-C", str(source), "pkg"], check=True)
    pieces = build_bundle().split_stream(stream, tmp_path / "out", first, limit)
    gathered = tmp_path / "pieces"
    gathered.mkdir()
    for piece in [*pieces, tmp_path / "out" / "new" / "cute-dsl.json"]:
        (gathered / piece.name).write_bytes(piece.read_bytes())
    return gathered, pieces


def test_the_dsl_pieces_travel_in_parts_and_unpack_together_once_all_are_there(tmp_path):
    gathered, pieces = cut_tar(tmp_path, first=200, limit=300)
    assert [p.parent.name for p in pieces][:2] == ["new", "dsl-1"]
    assert len(pieces) >= 3
    last = pieces[-1].name
    held = (gathered / last).read_bytes()
    (gathered / last).unlink()
    waiting = run_assemble(gathered, tmp_path / "site")
    assert (waiting.returncode, waiting.stdout.strip()) == (0, f"CuTe DSL: waiting for {last}")
    assert not (tmp_path / "site" / ".dsl-complete").exists()

    (gathered / last).write_bytes(held)
    done = run_assemble(gathered, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "pkg" / "__init__.py").read_text() == "VALUE = 7\n"
    assert (tmp_path / "site" / "pkg" / "sub" / "blob.bin").read_bytes() == bytes(range(256)) * 300
    assert (tmp_path / "site" / ".dsl-complete").exists()


def test_pieces_that_do_not_make_the_stream_that_was_cut_are_refused(tmp_path):
    gathered, pieces = cut_tar(tmp_path, first=0, limit=10**6)
    assert [p.parent.name for p in pieces] == ["dsl-1"]
    listing = gathered / "cute-dsl.json"
    listing.write_text(listing.read_text().replace('"sha256": "', '"sha256": "0'))
    refused = run_assemble(gathered, tmp_path / "site")
    assert refused.returncode != 0
    assert "the pieces do not make the stream that was cut" in refused.stderr
    assert not (tmp_path / "site" / ".dsl-complete").exists()
