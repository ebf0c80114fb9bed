"""A real install travels as wheels cut into parts, one part per transfer.

scripts/gpu/build_real_install.py lays the wheels end to end, one stream per
region, and real_install_parts.py cuts each stream into parts; on the GPU
host, each transfer's parts are taken in, in whatever order they come, and
writes out each wheel once all its parts are there (real_install_setup.sh).
These tests cut made-up wheels small and put them back together in several
orders, through the module and through the setup script, without a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts" / "gpu"


def load(name: str):
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


parts = load("real_install_parts")


@pytest.mark.parametrize("total,limit,expected", [
    (0, 10, []), (1, 10, [1]), (10, 10, [10]), (11, 10, [10, 1]), (25, 10, [10, 10, 5]),
])
def test_a_stream_is_cut_into_full_parts_and_a_last_one(total, limit, expected):
    assert parts.piece_sizes(total, limit) == expected


def make_wheels(folder: Path, sizes: dict[str, tuple[int, str, str]]) -> list[dict]:
    """Files of random bytes, each: (size, region, kind)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    wheels = []
    for name, (size, region, kind) in sizes.items():
        path = folder / name
        path.write_bytes(bytes(rng.getrandbits(8) for _ in range(size)))
        project, version = name.split("-")[:2]
        wheels.append({"path": str(path), "region": region, "kind": kind,
                       "project": project, "version": version})
    return wheels


WHEELS = {  # a wheel larger than a part, wheels sharing parts, one per region
    "torch-2.13.0-py3-none-any.whl": (2500, "a", "carried"),
    "small-1.0-py3-none-any.whl": (30, "a", "carried"),
    "mid-2.0-py3-none-any.whl": (700, "a", "carried"),
    "vllm-0.28.0-py3-none-any.whl": (1500, "b", "carried"),
    "numpy-2.3.5-py3-none-any.whl": (400, "machine", "machine"),
    "cufft-12.0.0.61-py3-none-any.whl": (100, "machine", "assumed"),
}
INSTALLS = {
    "first": {"wheels": ["torch-2.13.0-py3-none-any.whl", "small-1.0-py3-none-any.whl",
                         "mid-2.0-py3-none-any.whl", "numpy-2.3.5-py3-none-any.whl",
                         "cufft-12.0.0.61-py3-none-any.whl"],
              "requirements": {"numpy": "<2.4,>=1.22", "cufft": "==12.0.0.61.*"},
              "specs": ["torch"]},
    "second": {"wheels": ["torch-2.13.0-py3-none-any.whl", "vllm-0.28.0-py3-none-any.whl"],
               "requirements": {}, "specs": ["vllm"]},
}


@pytest.fixture()
def bundle(tmp_path):
    wheels = make_wheels(tmp_path / "pool", WHEELS)
    manifest = parts.cut(wheels, ["a", "b", "machine"], tmp_path / "parts", 1000, INSTALLS)
    return tmp_path, wheels, manifest


def test_each_region_starts_a_part_and_no_part_is_over_the_limit(bundle):
    _, _, manifest = bundle
    assert [(p["name"], p["region"], p["bytes"]) for p in manifest["parts"]] == [
        ("p01", "a", 1000), ("p02", "a", 1000), ("p03", "a", 1000), ("p04", "a", 230),
        ("p05", "b", 1000), ("p06", "b", 500), ("p07", "machine", 500)]


def test_every_part_carries_the_whole_manifest(bundle):
    tmp_path, _, manifest = bundle
    for part in manifest["parts"]:
        folder = tmp_path / "parts" / part["name"]
        assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", f"{part['name']}.bin"]
        assert json.loads((folder / "manifest.json").read_text())["build"] == manifest["build"]


def carry(tmp_path: Path, name: str) -> Path:
    """One transfer's copy of the checkout: only the carried part is there."""
    arrived = tmp_path / "device" / name
    if arrived.exists():
        shutil.rmtree(arrived)
    shutil.copytree(tmp_path / "parts" / name, arrived)
    return arrived


@pytest.mark.parametrize("seed", range(6))
def test_parts_in_any_order_give_back_every_wheel_as_soon_as_its_parts_are_in(bundle, seed):
    tmp_path, wheels, manifest = bundle
    store = parts.Store(tmp_path / f"store-{seed}")
    order = [p["name"] for p in manifest["parts"]]
    random.Random(seed).shuffle(order)
    arrived = set()
    for name in order:
        assert store.adopt(carry(tmp_path, name)).startswith(f"{name}: collected")
        arrived.add(name)
        store.extract()
        for wheel in manifest["wheels"]:
            holders = {p["name"] for p in parts.parts_of(manifest, wheel)}
            assert store.wheel_out(wheel) == (holders <= arrived), (wheel["file"], arrived)
        # a part is dropped once every wheel it holds is out
        for part in manifest["parts"]:
            held = [w for w in manifest["wheels"] if part in parts.parts_of(manifest, w)]
            spent = all(store.wheel_out(w) for w in held)
            assert (store.parts / f"{part['name']}.bin").is_file() == (
                part["name"] in arrived and not spent)
    for wheel in wheels:
        out = store.wheels / Path(wheel["path"]).name
        assert out.read_bytes() == Path(wheel["path"]).read_bytes()
    assert not list(store.parts.iterdir())


def test_a_part_that_comes_again_is_left_as_it_is(bundle):
    tmp_path, _, manifest = bundle
    store = parts.Store(tmp_path / "store")
    for name in ("p05", "p06"):
        store.adopt(carry(tmp_path, name))
    store.extract()
    assert store.adopt(carry(tmp_path, "p05")) == "p05: already here"
    assert store.adopt(carry(tmp_path, "p01")).startswith("p01: collected")
    assert store.adopt(carry(tmp_path, "p01")) == "p01: already here"


def test_a_damaged_part_or_one_of_another_build_is_refused(bundle, tmp_path):
    base, wheels, manifest = bundle
    store = parts.Store(base / "store")
    store.adopt(carry(base, "p02"))
    damaged = carry(base, "p01")
    data = bytearray((damaged / "p01.bin").read_bytes())
    data[10] ^= 1
    (damaged / "p01.bin").write_bytes(bytes(data))
    with pytest.raises(SystemExit, match="not the part the manifest lists"):
        store.adopt(damaged)
    other = parts.cut(wheels, ["a", "b", "machine"], base / "other", 900, INSTALLS)
    assert other["build"] != manifest["build"]
    with pytest.raises(SystemExit, match="empty it first"):
        store.adopt(base / "other" / "p03")


def test_an_install_waits_only_for_the_wheels_the_machine_does_not_satisfy(bundle):
    tmp_path, _, manifest = bundle
    pytest.importorskip("packaging")
    store = parts.Store(tmp_path / "store")
    store.adopt(carry(tmp_path, "p05"))
    machine = {"numpy": "2.5.2", "cufft": "12.0.0.61"}
    missing = store.missing("first", machine)
    assert missing["parts"] == ["p01", "p02", "p03", "p04", "p07"]
    assert "cufft-12.0.0.61-py3-none-any.whl" not in missing["wheels"]
    assert "numpy-2.3.5-py3-none-any.whl" in missing["wheels"]  # 2.5.2 is not <2.4
    satisfied = {"numpy": "2.3.1", "cufft": "12.0.0.61"}
    assert store.missing("first", satisfied)["parts"] == ["p01", "p02", "p03", "p04"]
    assert store.missing("first", {})["parts"] == ["p01", "p02", "p03", "p04", "p07"]
    for name in ("p01", "p02", "p03", "p04"):
        store.adopt(carry(tmp_path, name))
    store.extract()
    assert store.missing("first", satisfied) == {"wheels": [], "parts": []}
    links = store.link("first")
    assert sorted(p.name for p in links.iterdir()) == [
        "mid-2.0-py3-none-any.whl", "small-1.0-py3-none-any.whl", "torch-2.13.0-py3-none-any.whl"]
    assert store.missing("second", satisfied)["parts"] == ["p06"]


@pytest.mark.parametrize("version,specifier,expected", [
    ("2.5.2", "<2.4,>=1.22", False), ("2.3.5", "<2.4,>=1.22", True), ("1.0", "", True),
    ("13.1.0.3", "==13.1.1.3.*", False), ("12.0.0.61", "==12.0.0.61.*", True),
])
def test_a_machine_version_satisfies_the_specifiers_or_not(version, specifier, expected):
    pytest.importorskip("packaging")
    assert parts.satisfies(version, specifier) is expected


def sizes_of(wheels):
    return {w["path"]: Path(w["path"]).stat().st_size for w in wheels}


def test_a_region_that_would_end_in_a_few_bytes_hands_them_to_the_one_before(tmp_path):
    wheels = make_wheels(tmp_path, {
        "big-1-x.whl": (1800, "a", "carried"),
        "b1-1-x.whl": (1000, "b", "carried"), "b2-1-x.whl": (5, "b", "carried"),
        "b3-1-x.whl": (20, "b", "carried"),
    })
    moved = parts.rebalance(wheels, ["a", "b"], sizes_of(wheels), 1000)
    assert [(Path(w["path"]).name, w["region"]) for w in moved] == [
        ("big-1-x.whl", "a"), ("b2-1-x.whl", "a"), ("b3-1-x.whl", "a"), ("b1-1-x.whl", "b")]
    manifest = parts.cut(moved, ["a", "b"], tmp_path / "parts", 1000, {})
    assert [p["bytes"] for p in manifest["parts"]] == [1000, 825, 1000]


def test_no_wheel_moves_when_the_region_before_has_no_room(tmp_path):
    wheels = make_wheels(tmp_path, {
        "big-1-x.whl": (1990, "a", "carried"),
        "b1-1-x.whl": (1000, "b", "carried"), "b2-1-x.whl": (20, "b", "carried"),
    })
    assert parts.rebalance(wheels, ["a", "b"], sizes_of(wheels), 1000) == wheels


def test_the_builder_reads_what_the_closure_asks_of_each_package():
    pytest.importorskip("packaging")
    builder = load("build_real_install")
    environment = {"python_version": "3.12", "sys_platform": "linux",
                   "platform_machine": "x86_64", "platform_system": "Linux"}
    entries = [
        {"project": "vllm", "requires": ['numba==0.65.0', 'six>=1.16.0; python_version > "3.11"',
                                         'fastapi[standard]<0.137', 'pandas; extra == "bench"',
                                         "torch==2.13.0"]},
        {"project": "torch", "requires": [
            'cuda-toolkit[cublas]==13.0.3; platform_system == "Linux"']},
        {"project": "cuda-toolkit", "requires": [
            "nvidia-cublas==13.1.1.3.*; extra == 'cublas'",
            "nvidia-npp==13.0.1.2.*; extra == 'npp'"]},
        {"project": "fastapi", "requires": ['uvicorn>=0.12; extra == "standard"']},
        {"project": "numba", "requires": ["numpy<2.5,>=1.22"]},
    ]
    found = builder.requirements_on(entries, environment)
    assert found == {"numba": "==0.65.0", "six": ">=1.16.0", "fastapi": "<0.137",
                     "torch": "==2.13.0", "cuda-toolkit": "==13.0.3",
                     "nvidia-cublas": "==13.1.1.3.*", "uvicorn": ">=0.12",
                     "numpy": "<2.5,>=1.22"}


@pytest.mark.parametrize("project,version,expected", [
    # 0.27.x's torch and what it pins at other versions than the image's
    ("torch", "2.13.0", "carried"), ("triton", "3.7.1", "carried"),
    ("nvidia-cublas", "13.1.1.3", "carried"), ("torchvision", "0.28.0", "carried"),
    # 0.26.0's: the image's very versions
    ("torch", "2.11.0", "machine"), ("triton", "3.6.0", "machine"),
    ("nvidia-cudnn-cu13", "9.19.0.56", "machine"), ("torchvision", "0.26.0", "machine"),
    # the image has it at a version the device checks; the image lacks it
    ("numpy", "2.3.5", "machine"), ("vllm", "0.26.0", "carried"),
    # pinned alike by both torches
    ("nvidia-cufft", "12.0.0.61", "assumed"),
])
def test_a_wheel_the_image_has_at_that_very_version_is_left_to_the_machine(
    project, version, expected
):
    assert load("build_real_install").kind(project, version) == expected


def test_a_build_names_its_releases_and_each_ones_torch(tmp_path):
    wheels = make_wheels(tmp_path / "pool", {"vllm-0.26.0-x.whl": (10, "0.26.0", "carried"),
                                             "vllm-0.27.1-x.whl": (10, "0.27.1", "carried")})
    installs = {
        "tool": {"wheels": [], "requirements": {}, "specs": ["dflash2-backport"]},
        "vllm-0.27.1": {"wheels": ["vllm-0.27.1-x.whl"], "requirements": {},
                        "specs": ["torch===2.13.0", "vllm==0.27.1"]},
        "vllm-0.26.0": {"wheels": ["vllm-0.26.0-x.whl"], "requirements": {},
                        "specs": ["torch==2.11.0", "vllm==0.26.0"]},
    }
    parts.cut(wheels, ["0.27.1", "0.26.0"], tmp_path / "parts", 1000, installs)
    store = tmp_path / "store"
    assert parts.main(["collect", "--store", str(store), str(tmp_path / "parts" / "p01")]) == 0

    def said(*argv: str) -> str:
        done = subprocess.run([sys.executable, str(SCRIPTS / "real_install_parts.py"), *argv,
                               "--store", str(store)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert said("versions").split() == ["0.27.1", "0.26.0"]
    assert said("specs", "--install", "vllm-0.26.0").splitlines() == [
        "torch==2.11.0", "vllm==0.26.0"]


def run_setup(tmp_path: Path, part: str | None) -> str:
    """real_install_setup.sh as it runs after a transfer: in a checkout where
    only the carried part is under .cache/real-install/parts."""
    checkout = tmp_path / "checkout"
    if checkout.exists():
        shutil.rmtree(checkout)
    folder = checkout / ".cache" / "real-install" / "parts"
    folder.mkdir(parents=True)
    if part:
        shutil.copytree(tmp_path / "parts" / part, folder / part)
    env = dict(os.environ, RI_STORE=str(tmp_path / "store"))
    env.pop("OUT", None)
    done = subprocess.run(["bash", str(SCRIPTS / "real_install_setup.sh")], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_setup_script_takes_in_whatever_part_each_transfer_brings(bundle):
    tmp_path, wheels, manifest = bundle
    order = ["p06", "p03", "p07", "p01", "p05", "p04", "p02"]
    outputs = [run_setup(tmp_path, name) for name in order]
    assert "p06: collected" in outputs[0]
    assert "second: waits for" in outputs[0]
    assert "wheels written out in this run: 1" in outputs[4]  # vllm, once p05 joins p06
    assert "second: every wheel it needs is here" not in outputs[3]
    assert "first: every wheel it needs is here" in outputs[-1]
    assert "second: every wheel it needs is here" in outputs[-1]
    # no install of this made-up build is the tool's or a vLLM version's
    assert "install started" not in "".join(outputs)
    store = tmp_path / "store" / "wheels"
    for wheel in wheels:
        assert (store / Path(wheel["path"]).name).read_bytes() == Path(wheel["path"]).read_bytes()
    again = run_setup(tmp_path, "p03")
    assert "p03: already here" in again
    assert (tmp_path / "store" / "results" / "machine.txt").is_file()


@pytest.mark.gpu
def test_the_real_install_runs_on_torch_2_13_with_flashattention_3():
    """On the GPU machine, after the real install (README, "A real install")."""
    venv = Path(os.environ.get("RI_STORE", "/tmp/ri")) / "venv-0.27.1"
    if not (venv / "bin" / "python").exists():
        pytest.skip("no real install here (real_install_setup.sh makes one)")
    done = subprocess.run([str(venv / "bin" / "python"), str(SCRIPTS / "real_install_probe.py")],
                          capture_output=True, text=True, timeout=600)
    found = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert found["torch"].startswith("2.13.0"), found
    assert found["fa3-version-vllm-picks"] == "3", found
    assert "FAILED" not in found["fa3-extension"], found
    error = float(found["fa3-call"].rsplit(" ", 1)[1])
    assert error < 0.05, found



FAKE_TOOL = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
"""
# real_install.sh's commands, in order, before verify --gpu
TOOL_RUNS = ["--version", "check --python PY", "apply --python PY", "check --python PY",
             "verify --python PY", "revert --python PY", "apply --python PY",
             "check --python PY"]


@pytest.mark.parametrize("verify_gpu,expected", [
    (None, TOOL_RUNS + ["verify --gpu --python PY"]),
    ("1", TOOL_RUNS + ["verify --gpu --python PY"]),
    ("0", TOOL_RUNS),
])
def test_the_tool_runs_end_in_verify_gpu_unless_it_is_left_out(
        tmp_path, verify_gpu, expected):
    tool = tmp_path / "dflash2-backport"
    tool.write_text(FAKE_TOOL)
    tool.chmod(0o755)
    calls, ready = tmp_path / "calls.txt", tmp_path / "venv.ready"
    py = tmp_path / "venv-0.27.1" / "bin" / "python"
    env = dict(os.environ, TOOL=str(tool), PY=str(py), CALLS=str(calls), READY=str(ready),
               RI_STORE=str(tmp_path / "store"), RESULTS=str(tmp_path / "results"))
    env.pop("RI_VERIFY_GPU", None)
    if verify_gpu is not None:
        env["RI_VERIFY_GPU"] = verify_gpu
    done = subprocess.run(["bash", str(SCRIPTS / "real_install.sh")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().replace(str(py), "PY").splitlines() == expected
    assert ready.exists()  # the venv is left patched, for the engines, either way
