"""Build the files that let the patched vLLM 0.27.1 engine, and upstream 0.28.0
beside it, run on a CUDA machine whose Python has torch and triton but no vLLM
and no network.

    .venv/bin/python scripts/gpu/build_bundle.py [--out .cache/gpu-bundle]

Everything is made at run time from the vLLM 0.27.1 and 0.28.0 wheels
(downloaded once by tests/wheels.py) and from PyPI, into a git-ignored folder;
nothing of it is ever committed. Two parts, each small enough to travel on its
own:

    OUT/so/vllm_C.so.xz      vllm/_C_stable_libtorch.abi3.so of both wheels,
                             0.27.1's then 0.28.0's, in one xz stream whose
                             dictionary spans both: the two builds share almost
                             all their bytes, so the pair costs about what one
                             does (57 MiB); OUT/so/sizes.json says where to cut
    OUT/main/vllm-tree.zip   the 0.27.1 wheel's pure-Python vllm/ tree after this
                             tool's own `apply`, plus vllm-0.27.1.dist-info/METADATA
    OUT/main/vllm-tree-0.28.0.zip
                             the 0.28.0 wheel's pure-Python tree as it ships,
                             plus its METADATA: the reference the backport is
                             run against
    OUT/main/vllm-0.27.1-pristine.zip
                             the seven files `apply` edits, as the 0.27.1
                             wheel ships them: with the patched tree they make
                             the pristine one (setup_device.sh), on which
                             `verify --gpu` must fail
    OUT/main/wheels/*.whl    the CPython 3.12 manylinux wheels vLLM imports that a
                             bare torch image lacks (the OpenAI server's too)

scripts/gpu/setup_device.sh unpacks them there. Both .so files load under
other torch builds (stable ABI).
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SO_NAME = "vllm/_C_stable_libtorch.abi3.so"
PART_LIMIT = 60 * 1024 * 1024  # below the 64 MiB a transfer may carry

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
]
PLATFORMS = [
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_31_x86_64",
    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
]
# Modules 0.27.1's own code never imports on this path but whose absence the
# tree must tolerate: FlashAttention's extension is not stable-ABI.
STUB_FILES = {"vllm/vllm_flash_attn/_vllm_fa3_C.py": ""}
VERSIONS = ("0.27.1", "0.28.0")


def _metadata(version: str) -> str:
    return f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"


def _targets() -> tuple[str, ...]:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.trees import TARGETS

    return TARGETS


def _wheel_path(version: str) -> Path:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.wheels import vllm_wheel

    return vllm_wheel(version)


def build_so(out: Path) -> Path:
    target = out / "so" / "vllm_C.so.xz"
    sizes_path = out / "so" / "sizes.json"
    if target.exists() and sizes_path.exists():
        sizes = json.loads(sizes_path.read_text())
        if [entry["version"] for entry in sizes] == list(VERSIONS):
            return target
    target.parent.mkdir(parents=True, exist_ok=True)
    sizes, blobs = [], []
    for version in VERSIONS:
        with zipfile.ZipFile(_wheel_path(version)) as wheel:
            blobs.append(wheel.read(SO_NAME))
        sizes.append({"version": version, "bytes": len(blobs[-1])})
    # A dictionary larger than both files lets the second one be coded as
    # references into the first.
    dictionary = 1 << (sum(map(len, blobs)) - 1).bit_length()
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": dictionary}]
    partial = target.with_suffix(".partial")
    partial.write_bytes(lzma.compress(b"".join(blobs), filters=filters))
    partial.rename(target)
    sizes_path.write_text(json.dumps(sizes))
    return target


def build_tree(out: Path, version: str = "0.27.1") -> Path:
    """The wheel's .py files; 0.27.1's patched by this tool, others as they ship."""
    name = "vllm-tree.zip" if version == "0.27.1" else f"vllm-tree-{version}.zip"
    target = out / "main" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        with zipfile.ZipFile(_wheel_path(version)) as wheel:
            members = [n for n in wheel.namelist()
                       if n.endswith(".py") or ".dist-info/" in n]
            wheel.extractall(site, members)
        if version == "0.27.1":
            _apply(site)
        for relative, text in STUB_FILES.items():
            (site / relative).write_text(text)
        partial = target.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted((site / "vllm").rglob("*.py")):
                bundle.write(path, path.relative_to(site).as_posix())
            bundle.writestr(f"vllm-{version}.dist-info/METADATA", _metadata(version))
        partial.rename(target)
    return target


def _apply(site: Path) -> None:
    subprocess.run(
        [str(REPO / ".venv/bin/dflash2-backport"), "apply",
         "--site-packages", str(site)],
        check=True, cwd=REPO,
    )
    check = subprocess.run(
        [str(REPO / ".venv/bin/dflash2-backport"), "check",
         "--site-packages", str(site)],
        cwd=REPO, capture_output=True, text=True,
    )
    if check.returncode != 0:
        raise SystemExit(f"check after apply exited {check.returncode}:\n"
                         f"{check.stdout}{check.stderr}")


def build_pristine_files(out: Path) -> Path:
    target = out / "main" / "vllm-0.27.1-pristine.zip"
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(_wheel_path("0.27.1")) as wheel, \
            zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
        for name in _targets():
            bundle.writestr(name, wheel.read(name))
    partial.rename(target)
    return target


def download_wheels(out: Path) -> Path:
    directory = out / "main" / "wheels"
    directory.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    for spec in WHEELS:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--only-binary=:all:", "--python-version", "3.12",
             "--implementation", "cp", *platforms, "-d", str(directory), spec],
            check=True,
        )
    return directory


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".cache" / "gpu-bundle")
    args = parser.parse_args()
    out = args.out.resolve()
    if (out / "main").exists():
        shutil.rmtree(out / "main")
    print("so:", build_so(out))
    for version in VERSIONS:
        print("tree:", build_tree(out, version))
    print("pristine files:", build_pristine_files(out))
    print("wheels:", download_wheels(out))
    for part in ("so", "main"):
        size = _size(out / part)
        print(f"part {part}: {size / 2**20:.1f} MiB")
        if size > PART_LIMIT:
            raise SystemExit(f"part {part} is {size / 2**20:.1f} MiB, over the "
                             f"{PART_LIMIT / 2**20:.0f} MiB one transfer may carry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
