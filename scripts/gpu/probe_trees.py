"""On the CUDA machine, after setup_device.sh: what each unpacked vLLM tree
imports, each in its own interpreter with the PYTHONPATH its `.pythonpath`
names, before an engine is started. One JSON line per tree, and one for the
image alone (its own transformers, huggingface_hub, tokenizers).

    python3 scripts/gpu/probe_trees.py [TREE ...]    # default: every tree there
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TREES = ("/tmp/vt", "/tmp/vtpr", "/tmp/vtp", "/tmp/vt28", "/tmp/vtnew")

# The engine path of the driver's configurations: the V2 runner, both DFlash
# speculators, the models, Triton attention, and the OpenAI server.
MODULES = (
    "vllm.entrypoints.llm", "vllm.v1.engine.core", "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.gpu.spec_decode.dflash.speculator",
    "vllm.v1.worker.gpu.spec_decode.dflash2.speculator", "vllm.model_executor.models.qwen3",
    "vllm.model_executor.models.qwen3_dflash2", "vllm.v1.attention.backends.triton_attn",
    "vllm.entrypoints.openai.api_server",
)

PROBE = """
import importlib, json, sys
seen = {}
def version(name):
    try:
        module = importlib.import_module(name)
        return getattr(module, "__version__", "?") + " " + module.__file__
    except Exception as error:
        return f"{type(error).__name__}: {error}"
for name in ("torch", "triton", "transformers", "huggingface_hub", "tokenizers", "pydantic"):
    seen[name] = version(name)
if sys.argv[1:]:
    import torch
    seen["vllm"] = version("vllm")
    try:
        import vllm._C_stable_libtorch
        seen["_C"] = f"loaded; torch.ops._C.rms_norm: {hasattr(torch.ops._C, 'rms_norm')}"
    except Exception as error:
        seen["_C"] = f"{type(error).__name__}: {error}"
    from vllm.platforms import current_platform
    seen["platform"] = type(current_platform).__name__
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
            seen[name] = "ok"
        except Exception as error:
            seen[name] = f"{type(error).__name__}: {error}"
print(json.dumps(seen))
"""


def probe(pythonpath: str, modules: tuple[str, ...]) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    done = subprocess.run([sys.executable, "-c", PROBE, *modules], env=env,
                          capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"exit": str(done.returncode), "stderr": done.stderr[-1500:]}
    return json.loads(lines[-1])


def main() -> int:
    print(json.dumps({"tree": "image", **probe("", ())}), flush=True)
    for tree in sys.argv[1:] or TREES:
        path_file = Path(tree) / ".pythonpath"
        if not path_file.exists():
            print(json.dumps({"tree": tree, "missing": str(path_file)}), flush=True)
            continue
        pythonpath = path_file.read_text().strip()
        print(json.dumps({"tree": tree, "pythonpath": pythonpath, **probe(pythonpath, MODULES)}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
