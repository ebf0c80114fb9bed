#!/usr/bin/env bash
# On the CUDA machine, from the repository root: unpack whatever part of the
# bundle is present, then run every check of driver.py. Extra arguments go to
# `driver.py run` (e.g. --configs base_eager,dflash2_eager).
# RESULTS (default /tmp/gpu-results) receives driver.log, summary.json and
# engines.tar.gz (each engine's log and generated tokens).
source scripts/gpu/setup_device.sh || exit 1
if [ ! -f /tmp/vt/vllm/_C_stable_libtorch.abi3.so ] || [ ! -f /tmp/vt/.tree-complete ]; then
    echo "bundle incomplete on this machine: carry .cache/gpu-bundle/so, then .cache/gpu-bundle/main"
    exit 1
fi
results=${RESULTS:-/tmp/gpu-results}
mkdir -p "$results"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 scripts/gpu/driver.py run --out /tmp/gpu-run "$@" 2>&1 | tee "$results/driver.log"
rc=${PIPESTATUS[0]}
cp /tmp/gpu-run/summary.json "$results/" 2>/dev/null
tar czf "$results/engines.tar.gz" -C /tmp/gpu-run --exclude ./models --exclude ./vllm-cache .
exit "$rc"
