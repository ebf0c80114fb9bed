"""Build the parts that install vLLM 0.27.1 and 0.28.0 (or the releases
--versions names) for real on a GPU host without network: pip, from their wheels,
over the CUDA build of the torch each pins (2.13.0; 0.26.0's 2.11.0 is the
image's own), each with its own dependencies, and this tool from its wheel
beside them.

    .venv/bin/python scripts/gpu/build_real_install.py [--out .cache/real-install]
        [--python312 PATH] [--transfer-mib 64] [--margin-mib 2] [--refresh]
        [--versions 0.27.1,0.28.0]

What it does, all under OUT (git-ignored; nothing of it is ever committed):

1. A Python 3.12 venv (OUT/py312, from --python312 or a python3.12 found on
   this machine) with a current pip, outside this machine's pip settings
   (PIP_CONFIG_FILE=/dev/null: here they add a folder of CPU torch builds and
   cap torch), because pip evaluates `python_version` markers with the
   interpreter that runs it, whatever --python-version says.
2. For each vLLM version, pip's own resolution of `vllm==V torch===2.13.0`
   (`torch==2.11.0` for 0.26.0: `==`, so that the image's 2.11.0+cu130
   satisfies it on the machine) for CPython 3.12 on manylinux x86_64 (`pip
   install --dry-run --report --ignore-installed`), kept as
   OUT/closure-V.json: the full dependency
   closure a user's `pip install` gets on an empty interpreter.
3. Every wheel of both closures, downloaded once into OUT/pool (checked
   against the sha256 the index gave), and the tool's: its wheel built from a
   clone of this checkout's HEAD (`pip wheel --no-deps`), and the cp312
   wheels of what it needs, pip included (a venv made without ensurepip gets
   its pip from there).
4. The wheels to carry, in regions (the GPU host's image, IMAGE below,
   already has many of these packages; a venv there sees them
   through a .pth file, as --system-site-packages would, see
   real_install_setup.sh):

   0.27.1    what 0.27.1's install needs that the image lacks or has at
             another version, the tool's wheels first (torch, triton, cuBLAS,
             cuDNN, NCCL, cuSPARSELt and cuda-toolkit 13.0.3, torchvision
             0.28.0, FlashInfer, the vLLM wheel, its CuTe DSL, ...)
   0.28.0    what 0.28.0's install adds to those
             (with --versions, one region per version, in its order, each
             with what the versions before it do not carry; 0.26.0 carries
             no torch and no CUDA library: the image has the very versions
             its torch 2.11.0 pins)
   machine   wheels of packages the image has at some version: needed only
             where that version misses what the closure asks of it
   assumed   the CUDA libraries torch 2.11 pins at the very versions torch
             2.13 pins (cuFFT, cuSOLVER, cuSPARSE, NVRTC, ...): needed only if
             the image turns out not to have them

   each laid end to end and cut into parts of at most one transfer
   (--transfer-mib, less the checkout's files and --margin-mib), OUT/parts/pNN/,
   by real_install_parts.py. The manifest in each part says which wheels each
   install needs and, for `machine` and `assumed` wheels, what it asks of the
   package, so that the device says which parts it still waits for.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_install_parts as parts  # noqa: E402

VERSIONS = ("0.27.1", "0.28.0")
TORCH = "torch===2.13.0"
# A release pinning the image's own torch asks for it with `==`, which the
# image's 2.11.0+cu130 satisfies (`===` would want a wheel of 2.11.0 itself).
TORCH_OF = {"0.26.0": "torch==2.11.0"}
# The default size of one transfer to the GPU host: the checkout and one part.
TRANSFER_MIB = 64
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(17, 40)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
# The GPU host's image (a CUDA image with torch 2.11.0+cu130), as its package
# list was read there: its python3 has these, at versions not known here.
IMAGE = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc
anyio attrs botorch build certifi charset-normalizer chex click cloudpickle cmake colorama
contourpy coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler
cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub
humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo
pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov
pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex
requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq
torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
xxhash yarl zipp""".split())
# The image's versions of what torch 2.11.0 pins at other versions than
# torch 2.13.0 / vLLM 0.27.x do (cuda-toolkit 13.0.2 pins cuBLAS 13.1.0.3;
# torchvision 0.26.0 pins torch 2.11.0): a closure that asks for another
# version carries the wheel; one that asks for these (0.26.0's) leaves it to
# the machine.
IMAGE_VERSIONS = {"torch": "2.11.0", "triton": "3.6.0", "nvidia-cublas": "13.1.0.3",
                  "nvidia-cudnn-cu13": "9.19.0.56", "nvidia-nccl-cu13": "2.28.9",
                  "nvidia-cusparselt-cu13": "0.8.0", "cuda-toolkit": "13.0.2",
                  "torchvision": "0.26.0"}
# ... and these at the very versions torch 2.13.0 pins (cuda-toolkit 13.0.2
# and 13.0.3 pin the same; NVSHMEM 3.4.5 both).
IMAGE_SAME_VERSION = {"nvidia-cufft", "nvidia-cusolver", "nvidia-cusparse",
                      "nvidia-cuda-nvrtc", "nvidia-curand", "nvidia-cuda-cupti",
                      "nvidia-cuda-runtime", "nvidia-nvtx", "nvidia-cufile",
                      "nvidia-nvjitlink", "nvidia-nvshmem-cu13"}


def clean_pip_env() -> dict:
    """pip as on a bare machine: no config file, no extra folders of wheels."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_DEFAULT_TIMEOUT="180")
    return env


def find_python312(given: str | None) -> str:
    candidates = [given] if given else [
        shutil.which("python3.12"), *sorted(glob.glob(os.path.expanduser(
            "~/.pyenv/versions/3.12*/bin/python3.12")), reverse=True),
        "/usr/bin/python3.12", "/usr/local/bin/python3.12"]
    for candidate in candidates:
        if not candidate:
            continue
        probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 12)":
            return candidate
    raise SystemExit("no Python 3.12 found: name one with --python312 (pip evaluates "
                     "python_version markers with the interpreter that runs it)")


def tools_venv(out: Path, python312: str) -> Path:
    venv = out / "py312"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([python312, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip",
                        "packaging"], check=True, env=clean_pip_env())
    return python


def target_args() -> list[str]:
    return ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
            "--abi", "cp312", *[a for p in PLATFORMS for a in ("--platform", p)]]


def resolve(python: Path, specs: list[str], report: Path, refresh: bool) -> dict:
    """pip's resolution of `specs` on an empty CPython 3.12 for manylinux
    x86_64: what a user's `pip install` gets."""
    if refresh or not report.exists():
        with tempfile.TemporaryDirectory() as target:
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--dry-run",
                            "--ignore-installed", "--report", str(report), *target_args(),
                            "--target", target, *specs], check=True, env=clean_pip_env())
    return json.loads(report.read_text())


def closure(report: dict) -> list[dict]:
    """One entry per wheel: project, version, file, sha256, requires."""
    entries = []
    for item in report["install"]:
        url = item["download_info"]["url"]
        entries.append({
            "project": item["metadata"]["name"], "version": item["metadata"]["version"],
            "file": url.rsplit("/", 1)[1], "url": url,
            "sha256": item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256"),
            "requires": item["metadata"].get("requires_dist", []),
            "requested": item.get("requested", False)})
    return entries


def requirements_on(entries: list[dict], environment: dict) -> dict[str, str]:
    """For each project in the closure, every version specifier the closure
    puts on it (markers evaluated for the closure's environment, extras as the
    closure asks for them), joined."""
    from packaging.requirements import Requirement

    def applicable(items: list[dict], extras: dict[str, set]):
        for entry in items:
            wanted = {""} | extras.get(parts.normalize(entry["project"]), set())
            for text in entry["requires"]:
                requirement = Requirement(text)
                marker = requirement.marker
                if marker is None or any(marker.evaluate({**environment, "extra": extra})
                                         for extra in wanted):
                    yield requirement

    extras: dict[str, set] = {}
    while True:  # extras asked for by requirements that extras switch on
        grown = False
        for requirement in applicable(entries, extras):
            name = parts.normalize(requirement.name)
            if not set(requirement.extras) <= extras.get(name, set()):
                extras.setdefault(name, set()).update(requirement.extras)
                grown = True
        if not grown:
            break
    specs: dict[str, list[str]] = {}
    for requirement in applicable(entries, extras):
        if str(requirement.specifier):
            specs.setdefault(parts.normalize(requirement.name), []).append(
                str(requirement.specifier))
    return {name: ",".join(sorted(set(found))) for name, found in specs.items()}


def download(python: Path, entries: list[dict], pool: Path) -> None:
    """Each wheel of `entries` into `pool`, checked against its sha256."""
    pool.mkdir(parents=True, exist_ok=True)
    wanted = [e for e in entries if not (pool / e["file"]).exists()]
    if wanted:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
            for entry in wanted:
                listing.write(f"{entry['project']}==={entry['version']}\n")
        try:
            subprocess.run([str(python), "-m", "pip", "download", "--quiet", "--no-deps",
                            *target_args(), "-d", str(pool), "-r", listing.name],
                           check=True, env=clean_pip_env())
        finally:
            os.unlink(listing.name)
    for entry in entries:
        path = pool / entry["file"]
        if not path.exists():
            raise SystemExit(f"pip download did not give {entry['file']}")
        if entry["sha256"] and parts.sha256_of(path) != entry["sha256"]:
            raise SystemExit(f"{path}: not the sha256 the index gave")


def tool_wheel(out: Path) -> Path:
    """This tool's wheel, built from a clone of HEAD (others' uncommitted
    edits in the working tree stay out of it); the clone is a git checkout,
    so the wheel records the commit."""
    folder = out / "tool"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "dflash2-backport"
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)],
                       check=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                        str(clone), "-w", str(folder)], check=True)
    (wheel,) = folder.glob("dflash2_backport-*.whl")
    return wheel


def torch_of(version: str) -> str:
    return TORCH_OF.get(version, TORCH)


def kind(project: str, version: str) -> str:
    """Whether a wheel is carried, left to the image ("machine": it has the
    package, at a version the device checks), or assumed to be there (the
    CUDA libraries both torches pin alike)."""
    name = parts.normalize(project)
    if name in IMAGE_SAME_VERSION:
        return "assumed"
    if name in IMAGE and IMAGE_VERSIONS.get(name, version) == version:
        return "machine"
    return "carried"


def plan(out: Path, python: Path, refresh: bool,
         versions: tuple[str, ...] = VERSIONS) -> tuple[list[dict], dict]:
    """The wheels to carry, each with its region and kind, and the installs."""
    pool = out / "pool"
    closures, requirements = {}, {}
    for version in versions:
        report = resolve(python, [f"vllm=={version}", torch_of(version)],
                         out / f"closure-{version}.json", refresh)
        closures[version] = closure(report)
        requirements[version] = requirements_on(closures[version], report["environment"])
        download(python, closures[version], pool)
    tool = tool_wheel(out)
    report = resolve(python, [str(tool), "pip"], out / "closure-tool.json", True)
    tool_entries = [e for e in closure(report) if not e["url"].startswith("file:")]
    download(python, tool_entries, pool)
    shutil.copy2(tool, pool / tool.name)

    files = {version: {e["file"] for e in closures[version]} for version in versions}
    wheels, seen = [], set()

    def add(entry: dict, region: str, kind_: str) -> None:
        if entry["file"] not in seen:
            seen.add(entry["file"])
            wheels.append({"path": str(pool / entry["file"]), "region": region,
                           "kind": kind_, "project": entry["project"],
                           "version": entry["version"]})

    first = versions[0]
    add({"file": tool.name, "project": "dflash2-backport", "version": "0"}, first, "carried")
    for entry in tool_entries:
        add(entry, first, "carried")
    union = [e for version in versions for e in closures[version]]
    # Largest first within a region: a wheel then spans as few parts as it must.
    union.sort(key=lambda e: -(pool / e["file"]).stat().st_size)
    for entry in union:
        k = kind(entry["project"], entry["version"])
        if k == "carried":
            # The first version that needs it: a version's parts then carry
            # what the versions before it did not.
            region = next(v for v in versions if entry["file"] in files[v])
        else:
            region = "machine" if k == "machine" else "assumed"
        add(entry, region, k)
    installs = {"tool": {"wheels": [tool.name, *(e["file"] for e in tool_entries)],
                         "requirements": {}, "specs": ["dflash2-backport"]}}
    for version in versions:
        installs[f"vllm-{version}"] = {
            "wheels": sorted(files[version]), "requirements": requirements[version],
            "specs": [torch_of(version), f"vllm=={version}"]}
    return wheels, installs


def checkout_bytes() -> int:
    """What the checkout adds to every transfer: git's tracked and untracked,
    not ignored, files."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, check=True,
                            capture_output=True).stdout
    return sum((REPO / name).stat().st_size for name in listed.decode().split("\0")
               if name and (REPO / name).is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".cache" / "real-install")
    parser.add_argument("--python312", help="a CPython 3.12 to resolve with")
    parser.add_argument("--transfer-mib", type=float, default=TRANSFER_MIB,
                        help="the most one transfer to the GPU host carries, the "
                             "checkout included (default: %(default)s)")
    parser.add_argument("--margin-mib", type=float, default=2.0,
                        help="room left in each transfer beside the checkout and the part")
    parser.add_argument("--refresh", action="store_true",
                        help="resolve the closures again instead of reusing OUT/closure-*.json")
    parser.add_argument("--versions", default=",".join(VERSIONS),
                        help="the vLLM releases to install, comma-separated, the first "
                        "the one the tool patches and runs on (default %(default)s)")
    args = parser.parse_args()
    versions = tuple(v for v in args.versions.split(",") if v)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    python = tools_venv(out, find_python312(args.python312))
    wheels, installs = plan(out, python, args.refresh, versions)
    limit = int(args.transfer_mib * 2**20) - checkout_bytes() - int(args.margin_mib * 2**20)
    regions = [*versions, "machine", "assumed"]
    wheels = parts.rebalance(wheels, regions,
                             {w["path"]: Path(w["path"]).stat().st_size for w in wheels}, limit)
    manifest = parts.cut(wheels, regions, out / "parts", limit, installs)
    print(f"build {manifest['build']}: {len(manifest['parts'])} parts of at most "
          f"{limit / 2**20:.1f} MiB in {out / 'parts'}")
    for region in manifest["regions"]:
        members = [p for p in manifest["parts"] if p["region"] == region]
        size = sum(p["bytes"] for p in members)
        print(f"  {region}: {members[0]['name'] if members else '-'}.."
              f"{members[-1]['name'] if members else '-'}, {len(members)} parts, "
              f"{size / 2**20:.0f} MiB")
    for part in manifest["parts"]:
        starting = [w["file"] for w in manifest["wheels"] if w["region"] == part["region"]
                    and part["offset"] <= w["offset"] < part["offset"] + part["bytes"]]
        print(f"  {part['name']} {part['region']:8s} {part['bytes'] / 2**20:5.1f} MiB  "
              + (", ".join(starting) if starting else "(inside one wheel)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
