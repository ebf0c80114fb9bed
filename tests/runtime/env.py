"""Virtual environments with real vLLM 0.27.x and 0.26.0 for the runtime tests.

Per vLLM version (0.27.1, and 0.27.0 and 0.26.0, which the tool supports
too), these venvs live under CACHE/runtime:

* base: torch, triton and the pinned imports vLLM needs (constraints.txt).
  About 2.5 GB, so it is built once per constraints hash and shared. A
  release that pins another torch (0.26.0: 2.11.0) gets a base of its own,
  with that torch and the pins of RELEASE_PINS.
* pristine: sees base through a .pth file and holds vLLM 0.27.1 as the wheel
  installs it.
* patched: the same, plus this project installed from the checkout and its
  console script run against the venv, as a user would. Rebuilt whenever the
  project's sources change.
* patched-pr (0.27.1): the same, patched by `apply --only-pr`: the DFlash2
  PR's edits without the upstream fixes, as vLLM 0.28.0 has them.
* testkit-<venv>: a venv over one of the above (a .pth file, as the children
  see base) that adds what upstream's test files and a quantized draft's
  config need and the product venvs lack: pytest, and compressed-tensors
  (one of vLLM's own requirements, which the CPU runtime leaves out because
  nothing else here imports it). Pinned in testkit.txt.

None of them holds anything of the test harness: no platform plugin, nothing
on a path the harness adds. They are what a user gets from pip, so a command
run in them plainly (the console script, no extra environment) behaves as it
does for users. The snippet runner (harness.py) adds the CPU platform plugin
to the interpreters it starts, and only to those.

The same three exist for 0.27.1 on torch's CUDA build (`torch` as PyPI
serves it, with its own triton and NVIDIA libraries, about 5 GB): the
`docker build` case, a CUDA install on a machine that shows no GPU.

Each venv is built under a unique directory name and published by atomically
pointing a symlink at it, so a build that dies half way is never mistaken for
a finished one, and every path baked into the venv (shebangs, .pth lines,
compiled files) stays valid. Builds are serialised by a file lock, so several
pytest processes can ask for the same venv at once; each process also holds a
shared lock on the venvs it uses, and old builds are pruned only when no
process holds them.

`python -m tests.runtime.env` (from the repository root) builds or finds all
three and prints where they are.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from tests.wheels import CACHE, vllm_wheel

VLLM_VERSION = "0.27.1"
# Every release the tool patches; the runtime tests prove each.
VLLM_VERSIONS = ("0.27.1", "0.27.0", "0.26.0")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CONSTRAINTS = HERE / "constraints.txt"
TESTKIT = HERE / "testkit.txt"
ROOT = CACHE / "runtime"
# Which torch build a base venv has. "cpu" takes the constraints as they are
# (torch's CPU build); "cuda" asks for the release exactly as PyPI names it,
# `===` so that no `+cpu` build satisfies it, and lets that torch bring its
# own triton and CUDA libraries, as `pip install torch` does for users.
TORCH_BUILDS = ("cpu", "cuda")
CUDA_TORCH = "torch===2.13.0"
# The releases whose trees differ where the edits land, each patched both ways
# (`apply`, `apply --only-pr`) for the tests of what the edits do.
EDIT_SET_VERSIONS = ("0.27.1", "0.26.0")
# The releases whose CUDA-build venvs the tests use: one is enough to show
# the build of torch does not change what `verify` answers.
CUDA_VLLM_VERSIONS = ("0.27.1",)
# Where a release's own requirements differ from constraints.txt (0.27.x's)
# on what the base holds, by the project each line names. 0.26.0 pins torch
# 2.11.0, which PyPI serves only as its CUDA build (what `pip install
# vllm==0.26.0` gives users), so that release's venvs run on that build, with
# the triton and CUDA libraries it brings, whichever `torch` is asked for. Its
# pin of apache-tvm-ffi makes pip resolve xgrammar to 0.2.7 (0.2.8 on need a
# newer one).
RELEASE_PINS = {
    "0.26.0": {
        "torch": "torch===2.11.0",
        "triton": None,
        "apache-tvm-ffi": "apache-tvm-ffi==0.1.10",
        "xgrammar": "xgrammar==0.2.7",
    },
}

# What decides whether the installed project is current. Anything else in the
# checkout (tests, docs) does not change what `apply` does to vLLM.
PROJECT_INPUTS = ("pyproject.toml", "dflash2_backport", "transforms", "modules")

# vLLM's model-info cache of each build, by the build's directory name: the
# snippet runner keeps it (harness.py), pruning drops it with its build.
MODELINFOS = ROOT / "modelinfos"

# Older builds of a kind are removed once this many newer ones exist; each
# child venv holds its own ~800 MB copy of vLLM.
KEEP_PER_KIND = 2


class EnvBuildError(RuntimeError):
    pass


def _digest(paths: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for path in paths:
        files = [path] if path.is_file() else sorted(
            p for p in path.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")
    return h.hexdigest()[:16]


def base_key(version: str | None = None) -> str:
    """The hash a base venv is built from: constraints.txt, and the pins of
    the release, where it has its own base."""
    key = _digest([CONSTRAINTS], HERE)
    pins = RELEASE_PINS.get(version or "")
    if pins is None:
        return key
    return hashlib.sha256(f"{key}\0{sorted(pins.items())}".encode()).hexdigest()[:16]


def project_key(root: Path | None = None) -> str:
    root = root or REPO
    return _digest([root / name for name in PROJECT_INPUTS if (root / name).exists()], root)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if len(found) != 1:
        raise EnvBuildError(f"cannot find the site-packages of {venv}")
    return found[0]


@contextmanager
def _locked():
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str | Path], log: Path, env_extra: dict | None = None) -> None:
    env = dict(os.environ, **(env_extra or {}))
    # The child venvs must not pick up the interpreter that runs pytest.
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    # A base's wheels (torch's CUDA build brings about 3 GB) would stay in
    # pip's cache, beside the venv they went into, for the rest of the run.
    env["PIP_NO_CACHE_DIR"] = "1"
    with open(log, "a") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n")
        out.flush()
        done = subprocess.run(
            [str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT,
            env=env,
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise EnvBuildError(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n{tail}")


def _publish(name: str, build, *, prune: bool = True, kind: str | None = None) -> Path:
    """The venv published as ROOT/name, built by `build(dir, log)` if missing.

    `kind` (default: the name up to its first "-") groups the builds that
    pruning weighs against each other."""
    link = ROOT / name
    with _locked():
        if link.is_symlink() and (link / ".complete").exists():
            _hold(link.resolve())
            return link
        kind = kind or name.split("-", 1)[0]
        target = ROOT / f"{name}.{uuid.uuid4().hex[:8]}"
        log = ROOT / f"{target.name}.log"
        started = time.monotonic()
        try:
            build(target, log)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        (target / ".complete").write_text(f"{time.monotonic() - started:.1f}\n")
        staging = ROOT / f".{name}.{uuid.uuid4().hex[:8]}"
        staging.symlink_to(target.name)
        os.replace(staging, link)
        _hold(target)
        if prune:
            _prune(kind)
        return link


# Shared locks on the venvs this process uses, held until it exits, so that
# another process pruning old builds never removes one still in use.
_HELD: dict[Path, object] = {}


def _hold(venv: Path) -> None:
    if venv not in _HELD:
        handle = open(venv / ".complete")
        fcntl.flock(handle, fcntl.LOCK_SH)
        _HELD[venv] = handle


def _in_use(venv: Path) -> bool:
    try:
        handle = open(venv / ".complete")
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def _prune(kind: str) -> None:
    """Drop dead builds of a kind and all but its newest finished ones.

    Runs under the lock, so a directory without .complete is a build that
    died, never one in progress.
    """
    dirs = [p for p in ROOT.glob(f"{kind}-*.*") if p.is_dir() and not p.is_symlink()]
    finished = sorted(
        (p for p in dirs if (p / ".complete").exists()),
        key=lambda p: (p / ".complete").stat().st_mtime, reverse=True,
    )
    for directory in set(dirs) - set(finished[:KEEP_PER_KIND]):
        if _in_use(directory):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        (ROOT / f"{directory.name}.log").unlink(missing_ok=True)
        # The snippet runner's model-info cache of that build (harness.py).
        shutil.rmtree(ROOT / MODELINFOS.name / directory.name, ignore_errors=True)
    for link in ROOT.glob(f"{kind}-*"):
        if link.is_symlink() and not link.exists():
            link.unlink()
    # A failed build leaves only its log; keep the newest for a look.
    orphans = sorted(
        (log for log in ROOT.glob(f"{kind}-*.log") if not log.with_suffix("").exists()),
        key=lambda log: log.stat().st_mtime, reverse=True,
    )
    for log in orphans[1:]:
        log.unlink(missing_ok=True)


def _make_venv(target: Path, log: Path) -> None:
    # The interpreter behind whichever venv runs pytest, so that the new venv
    # does not chain onto it.
    python = getattr(sys, "_base_executable", sys.executable)
    _run([python, "-m", "venv", target], log)


def _requirements(torch: str = "cpu", version: str | None = None) -> tuple[list[str], list[str]]:
    pins = dict(RELEASE_PINS.get(version or "", {}))
    if torch == "cuda" and not pins:
        pins = {"torch": CUDA_TORCH, "triton": None}
    normal, no_deps = [], []
    for raw in CONSTRAINTS.read_text().splitlines():
        line, _, comment = raw.partition("#")
        line = line.strip()
        if not line:
            continue
        project = line.split("==")[0]
        if project in pins:
            line = pins.pop(project)
            if line is None:
                continue
        (no_deps if "no-deps" in comment else normal).append(line)
    # A pin for a project constraints.txt does not name would go unused.
    assert not pins, pins
    return normal, no_deps


def _base_name(torch: str, version: str | None = None) -> str:
    # "cudabase", not "base-cuda": pruning groups builds by the name's first part.
    key = base_key(version)
    if version in RELEASE_PINS:
        return f"base{version}-{key}"
    return f"base-{key}" if torch == "cpu" else f"{torch}base-{key}"


def base_env(torch: str = "cpu", version: str | None = None) -> Path:
    """The base venv of `torch`'s build, or of the release's own pins (a
    release not in RELEASE_PINS shares the default base)."""
    def build(target: Path, log: Path) -> None:
        _make_venv(target, log)
        pip = [venv_python(target), "-m", "pip", "install", "--no-compile", "--quiet"]
        normal, no_deps = _requirements(torch, version)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
            req.write("\n".join(normal) + "\n")
        try:
            _run(pip + ["-r", req.name], log)
        finally:
            os.unlink(req.name)
        if no_deps:
            _run(pip + ["--no-deps", *no_deps], log)

    return _publish(_base_name(torch, version), build)


def _child(kind: str, key: str, base: Path, extra_steps, version: str) -> Path:
    def build(target: Path, log: Path) -> None:
        # Fetched under the build lock, so concurrent runs download it once.
        wheel = vllm_wheel(version)
        _make_venv(target, log)
        sp = site_packages(target)
        # addsitedir (not a bare path line) so that base's own .pth files run too.
        (sp / "_runtime_base.pth").write_text(
            f"import site; site.addsitedir({str(site_packages(base.resolve()))!r})\n"
        )
        pip = [venv_python(target), "-m", "pip", "install", "--no-compile", "--quiet"]
        _run(pip + ["--no-deps", wheel], log)
        extra_steps(target, log, pip)

    return _publish(f"{kind}-{key}", build, kind=kind)


def torch_build(version: str, torch: str = "cpu") -> str:
    """The build of torch a release's venvs have: the one asked for, or the
    release's own where it pins one (0.26.0: the CUDA build)."""
    return "cuda" if version in RELEASE_PINS else torch


def _kind(name: str, version: str, torch: str = "cpu") -> str:
    if torch == "cpu" or version in RELEASE_PINS:
        return f"{name}-{version}"
    return f"{name}-{torch}-{version}"


def pristine_env(version: str = VLLM_VERSION, torch: str = "cpu") -> Path:
    base = base_env(torch, version)
    return _child(_kind("pristine", version, torch), base_key(version), base,
                  lambda *_: None, version)


def _snapshot(directory: Path) -> Path:
    """A copy of the checkout to install from: the venv's key is computed
    from exactly what gets installed, even if the tree changes meanwhile, and
    what pip leaves behind (build/, *.egg-info) never lands in the tree."""
    source = directory / "src"
    source.mkdir()
    # Only what the build reads: the checkout may hold gigabytes beside it
    # (the test cache, venvs, device bundles).
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    for name in ("dflash2_backport", "transforms", "modules"):
        shutil.copytree(REPO / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return source


def patched_env(version: str = VLLM_VERSION, torch: str = "cpu", only_pr: bool = False) -> Path:
    """With `only_pr`, patched by `apply --only-pr`: the DFlash2 PR's edits
    alone, without the upstream fixes."""
    base = base_env(torch, version)
    with tempfile.TemporaryDirectory() as tmp:
        source = _snapshot(Path(tmp))

        def install_and_apply(target: Path, log: Path, pip: list) -> None:
            # Installed as a wheel, as from an index: built beside, by the
            # interpreter running the tests, because a build in the venv
            # would import the base's setuptools through the .pth file that
            # shows it the base (0.26.0's base has too old a one).
            wheels = Path(tmp) / "wheel"
            _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                  "-w", wheels, source], log)
            (wheel,) = wheels.glob("*.whl")
            _run(pip + [wheel], log)
            # The command's verdict cache goes to a scratch dir: a build must
            # not depend on, or leave, state outside the venv.
            with tempfile.TemporaryDirectory() as verdicts:
                _run([target / "bin" / "dflash2-backport", "apply",
                      *(["--only-pr"] if only_pr else [])], log,
                     env_extra={"DFLASH2_BACKPORT_VERDICT_CACHE": verdicts})

        return _child(
            _kind("patched-pr" if only_pr else "patched", version, torch),
            f"{base_key(version)}-{project_key(source)}", base, install_and_apply, version,
        )


def testkit_key() -> str:
    return _digest([TESTKIT], HERE)


def testkit_env(venv: Path) -> Path:
    """A venv that sees `venv` (a published runtime venv) and adds the
    packages of testkit.txt, each without its dependencies: those are in
    the runtime venvs already."""
    # The venv's kind: its name less the keys (16 hex digits each).
    kind = "testkit-" + re.sub(r"(-[0-9a-f]{16})+$", "", venv.name)

    def build(target: Path, log: Path) -> None:
        _make_venv(target, log)
        (site_packages(target) / "_runtime_venv.pth").write_text(
            f"import site; site.addsitedir({str(site_packages(venv.resolve()))!r})\n"
        )
        pip = [venv_python(target), "-m", "pip", "install", "--no-compile", "--quiet"]
        _run(pip + ["--no-deps", "-r", TESTKIT], log)

    # Keyed on the very build it sees: a rebuilt venv gets a new testkit.
    return _publish(f"testkit-{venv.resolve().name}-{testkit_key()}", build, kind=kind)


def main() -> None:
    """Build (or find) every venv and print where they are."""
    builds = [("base", base_env)] + [
        (f"{build.__name__} {version}", lambda b=build, v=version: b(v))
        for version in VLLM_VERSIONS
        for build in (pristine_env, patched_env)
    ] + [("patched --only-pr 0.27.1", lambda: patched_env(only_pr=True))] + [
        ("cuda base", lambda: base_env("cuda"))] + [
        (f"{build.__name__} {version} cuda", lambda b=build, v=version: b(v, "cuda"))
        for version in CUDA_VLLM_VERSIONS
        for build in (pristine_env, patched_env)
    ]
    for name, build in builds:
        started = time.monotonic()
        path = build()
        print(f"{name}: {path} -> {path.resolve().name} "
              f"({time.monotonic() - started:.1f}s)")


if __name__ == "__main__":
    main()
