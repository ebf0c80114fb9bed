#!/usr/bin/env bash
# Unpack the bundle that build_bundle.py made, on the CUDA machine:
#   /tmp/vt    the patched 0.27.1 vllm/ tree, its METADATA and its .so
#   /tmp/vt28  upstream 0.28.0's tree, METADATA and .so
#   /tmp/vtp   the 0.27.1 tree as it ships (the patched one, its seven edited
#              files taken back from the wheel, the three new files removed)
#   /tmp/site  the wheels, shared by all
# Each part is unpacked only when it was carried along and is not there yet,
# so the .so pair and the rest can be copied over one after the other.
#
#     source scripts/gpu/setup_device.sh      # then PYTHONPATH is set (0.27.1)
set -e
bundle=${GPU_BUNDLE:-.cache/gpu-bundle}
if [ -f "$bundle/so/vllm_C.so.xz" ] && { [ ! -f /tmp/vt/vllm/_C_stable_libtorch.abi3.so ] || [ ! -f /tmp/vt28/vllm/_C_stable_libtorch.abi3.so ]; }; then
    python3 - "$bundle/so/vllm_C.so.xz" "$bundle/so/sizes.json" <<'EOF'
import json, lzma, os, sys
roots = {"0.27.1": "/tmp/vt", "0.28.0": "/tmp/vt28"}
with lzma.open(sys.argv[1]) as src:
    for entry in json.load(open(sys.argv[2])):
        target = os.path.join(roots[entry["version"]], "vllm", "_C_stable_libtorch.abi3.so")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        left = entry["bytes"]
        with open(target + ".partial", "wb") as dst:
            while left:
                chunk = src.read(min(left, 1 << 22))
                if not chunk:
                    raise SystemExit(f"{sys.argv[1]} ends early")
                dst.write(chunk)
                left -= len(chunk)
        os.rename(target + ".partial", target)
        print("unpacked", target, entry["bytes"], "bytes")
EOF
fi
if [ -f "$bundle/main/vllm-tree.zip" ] && [ ! -f /tmp/vt/.tree-complete ]; then
    mkdir -p /tmp/vt
    python3 -m zipfile -e "$bundle/main/vllm-tree.zip" /tmp/vt
    touch /tmp/vt/.tree-complete
    echo "unpacked the patched vllm tree into /tmp/vt"
fi
if [ -f "$bundle/main/vllm-tree-0.28.0.zip" ] && [ ! -f /tmp/vt28/.tree-complete ]; then
    mkdir -p /tmp/vt28
    python3 -m zipfile -e "$bundle/main/vllm-tree-0.28.0.zip" /tmp/vt28
    touch /tmp/vt28/.tree-complete
    echo "unpacked upstream 0.28.0's vllm tree into /tmp/vt28"
fi
if [ -f "$bundle/main/vllm-0.27.1-pristine.zip" ] && [ -f /tmp/vt/.tree-complete ] \
        && [ -f /tmp/vt/vllm/_C_stable_libtorch.abi3.so ] && [ ! -f /tmp/vtp/.tree-complete ]; then
    rm -rf /tmp/vtp
    cp -a /tmp/vt /tmp/vtp
    rm -f /tmp/vtp/.tree-complete /tmp/vtp/vllm/model_executor/models/qwen3_dflash2.py
    rm -rf /tmp/vtp/vllm/v1/worker/gpu/spec_decode/dflash2
    python3 -m zipfile -e "$bundle/main/vllm-0.27.1-pristine.zip" /tmp/vtp
    touch /tmp/vtp/.tree-complete
    echo "made the pristine 0.27.1 tree in /tmp/vtp"
fi
if [ -d "$bundle/main/wheels" ] && [ ! -f /tmp/site/.complete ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/site "$bundle"/main/wheels/*.whl
    touch /tmp/site/.complete
    echo "installed $(ls "$bundle"/main/wheels | wc -l) wheels into /tmp/site"
fi
set +e
export PYTHONPATH=/tmp/vt:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
# NVLink multicast stays off, in every process started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
