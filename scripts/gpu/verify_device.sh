#!/usr/bin/env bash
# On the CUDA machine, from the repository root, once setup_device.sh can
# unpack the bundle: `dflash2-backport verify --gpu` on the patched 0.27.1
# (/tmp/vt), the pristine 0.27.1 (/tmp/vtp) and upstream 0.28.0 (/tmp/vt28);
# `verify` on the CPU on the patched 0.27.1 and on 0.28.0; and
# `verify --gpu --target --draft` on checkpoints driver.py writes, as a
# user's own. The tool runs from this checkout (it needs only typer to
# verify, which the machine has).
#
# Each run's output goes to $RESULTS/verify-<name>.txt (default
# /tmp/gpu-results), followed by its exit status, its wall time and every
# file it left in /tmp, /root, /var/tmp or /dev/shm (bytecode caches aside).
# ATTENTION_BACKEND (default TRITON_ATTN: FlashAttention's extension does not
# load under this machine's torch) goes to --attention-backend.
source scripts/gpu/setup_device.sh || exit 1
# verify --gpu sets it for its engines; the user's default is unset.
unset VLLM_ENABLE_V1_MULTIPROCESSING
results=${RESULTS:-/tmp/gpu-results}
mkdir -p "$results"
repo=$PWD
backend=${ATTENTION_BACKEND:-TRITON_ATTN}
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"

run() {  # run NAME TREE ARGS...: dflash2-backport verify ARGS with TREE's vLLM
    local name=$1 tree=$2
    shift 2
    local out="$results/verify-$name.txt" marker="/tmp/.verify-$name.marker"
    touch "$marker"
    sleep 1
    local started
    started=$(date +%s.%N)
    echo "\$ dflash2-backport verify --python python3 $*   (vLLM from $tree)" > "$out"
    PYTHONPATH="$repo:$tree:/tmp/site" timeout "${VERIFY_TIMEOUT:-400}" \
        python3 -m dflash2_backport verify --python python3 "$@" >> "$out" 2>&1
    local rc=$?
    {
        echo "exit $rc, wall $(python3 -c "print(round($(date +%s.%N) - $started, 1))") s"
        echo "left behind:"
        find /tmp /root /var/tmp /dev/shm -xdev -newer "$marker" ! -type d \
            ! -path '*/__pycache__/*' ! -path "$results/*" ! -path "${OUT:-/nonexistent}/*" \
            2>/dev/null | head -20
        find /tmp /root /var/tmp /dev/shm -mindepth 1 -maxdepth 1 -xdev -newer "$marker" \
            -type d ! -path "$results" 2>/dev/null | head -20
    } >> "$out"
    rm -f "$marker"
    cat "$out"
    echo
}

python3 scripts/gpu/driver.py models --out /tmp/user-checkpoints --shapes tiny > /dev/null
run gpu-patched-0.27.1 /tmp/vt --gpu --attention-backend "$backend"
run gpu-pristine-0.27.1 /tmp/vtp --gpu --attention-backend "$backend"
run gpu-upstream-0.28.0 /tmp/vt28 --gpu --attention-backend "$backend"
run cpu-patched-0.27.1 /tmp/vt
run gpu-own-checkpoints-0.27.1 /tmp/vt --gpu --attention-backend "$backend" \
    --target /tmp/user-checkpoints/tiny/target --draft /tmp/user-checkpoints/tiny/dflash2
run cpu-upstream-0.28.0 /tmp/vt28
