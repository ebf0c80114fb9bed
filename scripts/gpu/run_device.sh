#!/usr/bin/env bash
# On the CUDA machine, from the repository root: unpack whatever part of the
# bundle is present, then run driver.py's phases. Extra arguments go to
# `driver.py run` (e.g. --phases check --configs base_eager,dflash2_eager).
# RESULTS (default /tmp/gpu-results) receives driver.log, summary.json and
# engines.tar.gz (each engine's log and result, the server's log);
# RUN_DIR (default /tmp/gpu-run) keeps the run itself, so that a later run
# on the same host can add phases with --reuse.
source scripts/gpu/setup_device.sh || exit 1
if [ ! -f /tmp/vt/vllm/_C_stable_libtorch.abi3.so ] || [ ! -f /tmp/vt/.tree-complete ]; then
    echo "bundle incomplete on this machine: carry .cache/gpu-bundle/so, then .cache/gpu-bundle/main"
    exit 1
fi
if [ ! -f /tmp/vt28/vllm/_C_stable_libtorch.abi3.so ] || [ ! -f /tmp/vt28/.tree-complete ]; then
    echo "upstream 0.28.0 is not unpacked: its configurations will fail"
fi
if [ ! -f /tmp/vtnew/.pythonpath ]; then
    echo "the newest upstream is not unpacked (carry new-so/ and new/): its configurations will fail"
fi
results=${RESULTS:-/tmp/gpu-results}
run_dir=${RUN_DIR:-/tmp/gpu-run}
mkdir -p "$results"
python3 -c "import torch; print('torch', torch.__version__, [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])"
python3 scripts/gpu/driver.py run --out "$run_dir" "$@" 2>&1 | tee "$results/driver.log"
rc=${PIPESTATUS[0]}
cp "$run_dir/summary.json" "$results/" 2>/dev/null
tar czf "$results/engines.tar.gz" -C "$run_dir" --exclude ./models --exclude ./vllm-cache .
exit "$rc"
