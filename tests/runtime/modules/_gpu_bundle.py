"""The two vLLM files gpu_kernels.py needs, made from the real wheels.

    python tests/runtime/modules/_gpu_bundle.py DIR

writes DIR/gumbel.py (0.27.1's, as this project's `apply` leaves it) and
DIR/upstream_speculator.py (0.28.0's DFlash2 speculator). Kept out of the
repository: they are vLLM's files.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GUMBEL = "vllm/v1/worker/gpu/sample/gumbel.py"
SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py"


def make_bundle(directory: Path) -> tuple[Path, Path]:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.wheels import vllm_source

    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(vllm_source("0.27.1"), tree)
        subprocess.run(
            [sys.executable, "-m", "dflash2_backport", "apply", "--root", str(tree)],
            check=True, cwd=REPO, stdout=subprocess.DEVNULL,
        )
        gumbel = directory / "gumbel.py"
        shutil.copyfile(tree / GUMBEL, gumbel)
    upstream = directory / "upstream_speculator.py"
    shutil.copyfile(vllm_source("0.28.0") / SPECULATOR, upstream)
    return gumbel, upstream


if __name__ == "__main__":
    for path in make_bundle(Path(sys.argv[1])):
        print(path)
