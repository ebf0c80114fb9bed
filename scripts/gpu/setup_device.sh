#!/usr/bin/env bash
# Unpack the bundle that build_bundle.py made, on the CUDA machine, into
# /tmp/vt (the patched vllm/ tree and its METADATA) and /tmp/site (the wheels).
# Each part is unpacked only when it was carried along and is not there yet,
# so the .so and the rest can be copied over one after the other.
#
#     source scripts/gpu/setup_device.sh      # then PYTHONPATH is set
set -e
bundle=${GPU_BUNDLE:-.cache/gpu-bundle}
if [ -f "$bundle/so/vllm_C.so.xz" ] && [ ! -f /tmp/vt/vllm/_C_stable_libtorch.abi3.so ]; then
    mkdir -p /tmp/vt/vllm
    python3 - "$bundle/so/vllm_C.so.xz" <<'EOF'
import lzma, shutil, sys
target = "/tmp/vt/vllm/_C_stable_libtorch.abi3.so"
with lzma.open(sys.argv[1]) as src, open(target + ".partial", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 22)
import os
os.rename(target + ".partial", target)
print("unpacked", target, os.path.getsize(target), "bytes")
EOF
fi
if [ -f "$bundle/main/vllm-tree.zip" ] && [ ! -f /tmp/vt/.tree-complete ]; then
    mkdir -p /tmp/vt
    python3 -m zipfile -e "$bundle/main/vllm-tree.zip" /tmp/vt
    touch /tmp/vt/.tree-complete
    echo "unpacked the patched vllm tree into /tmp/vt"
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
