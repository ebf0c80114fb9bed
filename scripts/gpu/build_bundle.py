"""Build the files that let the patched vLLM 0.27.1 engine, upstream 0.28.0 and
the newest upstream release beside them run on a CUDA machine whose Python
has torch and triton but no vLLM and no network.

    .venv/bin/python scripts/gpu/build_bundle.py [--out .cache/gpu-bundle] [--new-version 0.34.0]
        [--transfer-mib 64]

Everything is made at run time from the vLLM wheels (downloaded once by
tests/wheels.py) and from PyPI, into a git-ignored folder; nothing of it is
ever committed. Parts, each small enough to travel on its own beside the
checkout in one transfer of at most --transfer-mib MiB (default 64):

    OUT/so/vllm_C.so.xz      vllm/_C_stable_libtorch.abi3.so of 0.27.1 and
                             0.28.0, in one xz stream whose dictionary spans
                             both: the two builds share almost all their bytes,
                             so the pair costs about what one does (57 MiB);
                             OUT/so/sizes.json says where to cut
    OUT/main/vllm-tree.zip   the 0.27.1 wheel's pure-Python vllm/ tree after this
                             tool's own `apply` (the PR's edits and the fixes),
                             plus vllm-0.27.1.dist-info/METADATA
    OUT/main/vllm-0.27.1-only-pr.zip
                             what `apply --only-pr` leaves different from that
                             tree: the files to write over a copy of it, and
                             `.removed`, the files to delete
    OUT/main/vllm-0.27.1-pristine.zip
                             the same, from the patched tree to 0.27.1 as the
                             wheel ships it: every file `apply` edits, and the
                             files it installs in `.removed`; on the pristine
                             tree `verify --gpu` must fail
    OUT/main/vllm-tree-0.28.0.zip
                             the 0.28.0 wheel's pure-Python tree as it ships,
                             plus its METADATA: the reference the backport is
                             run against
    OUT/main/wheels/*.whl    the CPython 3.12 manylinux wheels vLLM imports that a
                             bare torch image lacks (the OpenAI server's too)
    OUT/main/tests/          what scripts/gpu/gpu_tests.sh runs beside the
                             trees: upstream's own test files for the fixes
                             (upstream/VERSION/tests/..., from the sdists) and
                             kernels/, the two vLLM files the kernel test
                             imports (0.27.1's gumbel.py after `apply`,
                             0.28.0's DFlash2 speculator)
    OUT/new/                 the newest release (--new-version): its tree as
                             it ships (vllm-tree-V.zip), its .so (vllm_C.so.xz;
                             in OUT/new-so/ when both do not fit in one part),
                             version.txt, and wheels/, the wheels it needs in
                             other versions than main/'s or beside them;
                             for 0.33.0 and later, cute-dsl.json and the first
                             piece of the CuTe DSL (the unpacked wheels of
                             nvidia-cutlass-dsl[cu13] and what it needs, as
                             one xz'd tar)
    OUT/dsl-N/               the CuTe DSL's other pieces, a part each

scripts/gpu/setup_device.sh unpacks them there. The .so files load under
other torch builds (stable ABI).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The tests' helpers (the wheel cache, the target list) are imported where used.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
SO_NAME = "vllm/_C_stable_libtorch.abi3.so"
# The default size of one transfer to the GPU host: the checkout and one part.
TRANSFER_MIB = 64

# Name==version for each wheel; a bare name takes the newest cp312 wheel.
WHEELS = [
    "pydantic==2.14.4", "pydantic_core==2.50.5", "annotated-types", "typing-inspection",
    "msgspec", "cbor2", "cachetools", "pybase64", "pyzmq", "py-cpuinfo", "blake3",
    "uvloop", "openai-harmony", "openai==3.57.0", "httpx2", "httpcore2", "truststore",
    "jiter", "distro", "sniffio", "llguidance==1.7.6", "xgrammar==0.2.9",
    "apache-tvm-ffi==0.1.11", "outlines_core==0.2.14", "lark==1.2.2",
    "lm-format-enforcer==0.11.3", "interegular", "diskcache", "partial-json-parser",
    "mistral_common", "jsonschema", "jsonschema-specifications", "referencing",
    "rpds-py", "pydantic-extra-types", "pycountry", "fastapi<0.137", "starlette>=1.0.1",
    "python-multipart", "uvicorn", "prometheus-fastapi-instrumentator",
    "email-validator", "dnspython", "compressed-tensors==0.17.0", "loguru",
    "frozendict", "depyf==0.20.0", "astor", "dill", "gguf", "ijson",
    "python-json-logger", "setproctitle", "watchfiles",
    # imported by `vllm serve` alone
    "model-hosting-container-standards==0.1.16", "jmespath", "supervisor",
    # gpu_tests.sh runs pytest, which the image need not have
    "pytest", "pluggy", "iniconfig",
]
PLATFORMS = [
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_31_x86_64",
    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
]
# Modules 0.27.1's own code never imports on this path but whose absence the
# tree must tolerate: FlashAttention's extension is not stable-ABI.
STUB_FILES = {"vllm/vllm_flash_attn/_vllm_fa3_C.py": ""}
VERSIONS = ("0.27.1", "0.28.0")
# The newest release that runs on the device, and for each release that may
# stand in for it the wheels it needs beside (and, on PYTHONPATH, before)
# main/'s: pins it raised, packages it added. Its transformers is carried so
# that the image's own version does not matter, with what that needs.
NEW_VERSION = "0.34.0"
NEW_WHEELS = {
    # transformers>=5.16.1,<5.23; orjson for its OpenAI server; quack-kernels,
    # which its engine imports at start (a model's ops module needs it)
    "0.34.0": ["transformers==5.22.2", "tokenizers==0.23.3", "huggingface_hub==2.4.0",
               "safetensors==0.8.0", "orjson", "quack-kernels==0.6.5"],
    # transformers>=5.16.1,<5.21
    "0.33.0": ["transformers>=5.16.1,<5.21", "tokenizers==0.23.3", "huggingface_hub==2.4.0",
               "safetensors==0.8.0", "orjson", "quack-kernels==0.6.5"],
}
# 0.33.0 and 0.34.0 require the CuTe DSL (`nvidia-cutlass-dsl[cu13]==4.8.0`)
# and import it in the kernel warm-up; the image lacks it. Its cu13 compiler
# library alone is 193 MB, so it travels as one xz'd tar of the unpacked
# wheels (67 MiB), cut into pieces: the first fills what new/ leaves of a
# part, the others are parts of their own (dsl-1/, ...).
CUTE_DSL = ["nvidia-cutlass-dsl==4.8.0", "nvidia-cutlass-dsl-libs-base==4.8.0",
            "nvidia-cutlass-dsl-libs-core==4.8.0", "nvidia-cutlass-dsl-libs-cu13==4.8.0",
            "cuda-bindings>=13,<14", "cuda-pathfinder", "protobuf"]
NEW_DSL = {"0.34.0": CUTE_DSL, "0.33.0": CUTE_DSL}
DSL_STREAM = "cute-dsl.tar.xz"
REMOVED_MEMBER = ".removed"


def _metadata(version: str) -> str:
    return f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"


def _targets() -> tuple[str, ...]:
    from tests.trees import TARGETS

    return TARGETS


def _wheel_path(version: str) -> Path:
    from tests.wheels import vllm_wheel

    return vllm_wheel(version)


def build_so(out: Path) -> Path:
    target = out / "so" / "vllm_C.so.xz"
    sizes_path = out / "so" / "sizes.json"
    if target.exists() and sizes_path.exists():
        sizes = json.loads(sizes_path.read_text())
        if [entry["version"] for entry in sizes] == list(VERSIONS):
            return target
    compress_so(VERSIONS, target)
    return target


def _extract(version: str, site: Path) -> Path:
    with zipfile.ZipFile(_wheel_path(version)) as wheel:
        members = [n for n in wheel.namelist()
                   if n.endswith(".py") or ".dist-info/" in n]
        wheel.extractall(site, members)
    return site


def _python_files(site: Path) -> dict[str, bytes]:
    return {path.relative_to(site).as_posix(): path.read_bytes()
            for path in sorted((site / "vllm").rglob("*.py"))}


def overlay(base: dict[str, bytes], target: dict[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """What turns the tree `base` into `target`: the files to write (new or
    different) and the files to delete."""
    writes = {name: data for name, data in target.items() if base.get(name) != data}
    return writes, sorted(set(base) - set(target))


def _write_zip(target: Path, files: dict[str, bytes], removed: list[str] | None = None,
               version: str | None = None) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name in sorted(files):
            bundle.writestr(name, files[name])
        if removed is not None:
            bundle.writestr(REMOVED_MEMBER, "".join(f"{name}\n" for name in removed))
        if version is not None:
            bundle.writestr(f"vllm-{version}.dist-info/METADATA", _metadata(version))
    partial.rename(target)
    return target


def build_tree(out: Path, version: str, part: str = "main") -> Path:
    """The wheel's .py files as it ships them, with the stubs and METADATA."""
    with tempfile.TemporaryDirectory() as tmp:
        files = _python_files(_extract(version, Path(tmp)))
    files.update((name, text.encode()) for name, text in STUB_FILES.items())
    return _write_zip(out / part / f"vllm-tree-{version}.zip", files, version=version)


def build_0271_trees(out: Path) -> dict[str, list[str]]:
    """0.27.1 patched by `apply` (the PR's edits and the fixes), and the two
    overlays that make `apply --only-pr`'s tree and the pristine one from it.
    Returns the files each set edits or adds, to be printed."""
    with tempfile.TemporaryDirectory() as tmp:
        pristine = _extract("0.27.1", Path(tmp) / "pristine")
        trees = {"pristine": _python_files(pristine)}
        for name, flags in (("closure", ()), ("only-pr", ("--only-pr",))):
            site = Path(tmp) / name
            shutil.copytree(pristine, site)
            _apply(site, *flags)
            trees[name] = _python_files(site)
    closure = dict(trees["closure"])
    closure.update((name, text.encode()) for name, text in STUB_FILES.items())
    _write_zip(out / "main" / "vllm-tree.zip", closure, version="0.27.1")
    for name in ("only-pr", "pristine"):
        writes, removed = overlay(trees["closure"], trees[name])
        _write_zip(out / "main" / f"vllm-0.27.1-{name}.zip", writes, removed)
    touched = {name: sorted(overlay(trees["pristine"], trees[name])[0])
               for name in ("closure", "only-pr")}
    missing = sorted(set(_targets()) - set(touched["closure"]))
    if missing:
        raise SystemExit(f"apply left these target files as 0.27.1 ships them: {missing}")
    return touched


def build_tests(out: Path) -> Path:
    """The GPU tests' inputs: upstream's test files for the fixes, as the
    runtime tests name them, and the kernel test's two vLLM files."""
    sys.path.insert(0, str(REPO / "tests" / "runtime" / "modules"))
    from _gpu_bundle import make_bundle

    from tests.runtime.test_runtime_conv_kernel import RELATIVE as CONV_TESTS
    from tests.runtime.test_runtime_upstream_fixes import PREPARE_INPUTS, UNBIASED
    from tests.upstream import upstream_tests

    tests = out / "main" / "tests"
    for version, relative in (("0.28.0", PREPARE_INPUTS), ("0.29.0", UNBIASED),
                              ("0.34.0", CONV_TESTS)):
        shutil.copytree(upstream_tests(version, relative), tests / "upstream" / version,
                        dirs_exist_ok=True)
    make_bundle(tests / "kernels")
    return tests


def _apply(site: Path, *flags: str) -> None:
    tool = str(REPO / ".venv/bin/dflash2-backport")
    # The trees are thrown away: their verdicts go with them, not into the
    # user's cache.
    env = {**os.environ, "DFLASH2_BACKPORT_VERDICT_CACHE": str(site.parent / "verdicts")}
    subprocess.run([tool, "apply", "--site-packages", str(site), *flags],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL, env=env)
    check = subprocess.run([tool, "check", "--site-packages", str(site), *flags],
                           cwd=REPO, capture_output=True, text=True, env=env)
    if check.returncode != 0:
        raise SystemExit(f"check {' '.join(flags)} after apply exited {check.returncode}:\n"
                         f"{check.stdout}{check.stderr}")


def compress_so(versions: tuple[str, ...], target: Path) -> list[dict[str, object]]:
    """The versions' .so in one xz stream; returns where to cut it."""
    sizes, blobs = [], []
    for version in versions:
        with zipfile.ZipFile(_wheel_path(version)) as wheel:
            blobs.append(wheel.read(SO_NAME))
        sizes.append({"version": version, "bytes": len(blobs[-1])})
    # A dictionary larger than all the files lets the later ones be coded as
    # references into the earlier ones.
    dictionary = 1 << (sum(map(len, blobs)) - 1).bit_length()
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": dictionary}]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(lzma.compress(b"".join(blobs), filters=filters))
    partial.rename(target)
    (target.parent / "sizes.json").write_text(json.dumps(sizes))
    return sizes


def build_new(out: Path, version: str, limit: int) -> Path:
    """The newest release's part: its tree, its .so and its extra wheels; the
    .so moves to a part of its own when the three do not fit in one of
    `limit` bytes."""
    for part in ("new", "new-so", *(path.name for path in out.glob("dsl-*"))):
        if (out / part).exists():
            shutil.rmtree(out / part)
    new = out / "new"
    build_tree(out, version, part="new")
    (new / "version.txt").write_text(version + "\n")
    download_wheels(new / "wheels", NEW_WHEELS[version])
    compress_so((version,), new / "vllm_C.so.xz")
    if _size(new) > limit:
        (out / "new-so").mkdir()
        for name in ("vllm_C.so.xz", "sizes.json"):
            (new / name).rename(out / "new-so" / name)
    if version in NEW_DSL:
        split_stream(dsl_stream(out, NEW_DSL[version]), out,
                     limit - _size(new) - (1 << 16), limit)
    return new


def dsl_stream(out: Path, specs: list[str]) -> Path:
    """The unpacked wheels of `specs` as one tar, xz'd; kept in OUT/.dsl/ by
    the specs' hash, since compressing 280 MB takes minutes."""
    key = hashlib.sha256("\n".join(specs).encode()).hexdigest()[:16]
    stream = out / ".dsl" / f"{key}.tar.xz"
    if stream.exists():
        return stream
    stream.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        for wheel in sorted(download_wheels(Path(tmp) / "wheels", specs).glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
        tar = Path(tmp) / "dsl.tar"
        with tarfile.open(tar, "w", format=tarfile.PAX_FORMAT) as archive:
            for path in sorted(site.rglob("*")):
                archive.add(path, path.relative_to(site).as_posix(), recursive=False)
        partial = stream.with_suffix(".partial")
        with open(partial, "wb") as sink:
            subprocess.run(["xz", "-9", "-T0", "-c", str(tar)], stdout=sink, check=True)
        partial.rename(stream)
    return stream


def piece_sizes(total: int, first: int, limit: int) -> list[int]:
    """How to cut `total` bytes: a first piece of at most `first` (none when
    there is no room), then pieces of at most `limit`."""
    sizes = [min(total, first)] if first > 0 else []
    left = total - sum(sizes)
    while left > 0:
        sizes.append(min(left, limit))
        left -= sizes[-1]
    return sizes


def split_stream(stream: Path, out: Path, first: int, limit: int) -> list[Path]:
    """Cut the DSL stream into pieces: OUT/new/ gets the first and
    cute-dsl.json (the pieces' names, sizes and hashes), each other piece
    is a part of its own, OUT/dsl-N/."""
    data = stream.read_bytes()
    sizes = piece_sizes(len(data), first, limit)
    pieces, offset = [], 0
    for index, size in enumerate(sizes):
        part = out / ("new" if index == 0 and first > 0 else f"dsl-{index + (first <= 0)}")
        part.mkdir(parents=True, exist_ok=True)
        piece = part / f"{DSL_STREAM}.{index}"
        piece.write_bytes(data[offset:offset + size])
        offset += size
        pieces.append(piece)
    (out / "new").mkdir(parents=True, exist_ok=True)
    (out / "new" / "cute-dsl.json").write_text(json.dumps({
        "sha256": hashlib.sha256(data).hexdigest(),
        "pieces": [{"name": p.name, "bytes": p.stat().st_size} for p in pieces],
    }))
    return pieces


def download_wheels(directory: Path, specs: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    for spec in specs:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--python-version", "3.12",
             "--implementation", "cp", *platforms, "-d", str(directory), spec],
            check=True,
        )
    return directory


def part_limit(transfer: int = TRANSFER_MIB << 20) -> int:
    """What one part may weigh: a transfer of `transfer` bytes, less the
    checkout it travels with (git's tracked and untracked, not ignored,
    files) and 1 MiB to spare."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, check=True, capture_output=True).stdout
    checkout = sum((REPO / name).stat().st_size
                   for name in listed.decode().split("\0") if name and (REPO / name).is_file())
    return transfer - checkout - (1 << 20)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".cache" / "gpu-bundle")
    parser.add_argument("--new-version", default=NEW_VERSION,
                        choices=[*NEW_WHEELS, ""],
                        help="the newest upstream release, for the new/ part ('' for none)")
    parser.add_argument("--transfer-mib", type=float, default=TRANSFER_MIB,
                        help="the most one transfer to the GPU host carries, the "
                             "checkout included (default: %(default)s)")
    args = parser.parse_args()
    out = args.out.resolve()
    if (out / "main").exists():
        shutil.rmtree(out / "main")
    print("so:", build_so(out))
    touched = build_0271_trees(out)
    for name, files in touched.items():
        print(f"0.27.1 files `apply{' --only-pr' if name == 'only-pr' else ''}` edits or adds "
              f"({len(files)}):", *files, sep="\n  ")
    print("tree:", build_tree(out, "0.28.0"))
    print("wheels:", download_wheels(out / "main" / "wheels", WHEELS))
    print("tests:", build_tests(out))
    parts = ["so", "main"]
    limit = part_limit(int(args.transfer_mib * 2**20))
    if args.new_version:
        print("new:", build_new(out, args.new_version, limit))
        parts += [part for part in ("new-so", "new") if (out / part).exists()]
        parts += sorted(path.name for path in out.glob("dsl-*"))
    print(f"limit of a part: {limit / 2**20:.1f} MiB")
    for part in parts:
        for path in sorted((out / part).iterdir()):
            print(f"  {part}/{path.name}: {_size(path) / 2**20:.1f} MiB")
        size = _size(out / part)
        print(f"part {part}: {size / 2**20:.1f} MiB")
        if size > limit:
            raise SystemExit(f"part {part} is {size / 2**20:.1f} MiB, over the "
                             f"{limit / 2**20:.1f} MiB one transfer may carry beside "
                             "the checkout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
