#!/usr/bin/env bash
# On the CUDA machine, from the repository root, once setup_device.sh can
# unpack the bundle: `dflash2-backport verify --gpu` on the patched 0.27.1
# (/tmp/vt), the pristine 0.27.1 (/tmp/vtp) and upstream 0.28.0 (/tmp/vt28);
# `verify` on the CPU on the patched 0.27.1; and `verify --gpu --target
# --draft` on checkpoints driver.py writes, as a user's own. The tool runs
# from this checkout (to verify it needs only typer, which the machine has).
#
# Each run's output goes to $RESULTS/verify-<name>.txt (default
# /tmp/gpu-results), followed by its exit status and wall time. The first
# run is alone on the machine, so that its wall time is the one a user sees;
# the next three run side by side, to take less time in all (their wall
# times include that contention); the last, on a user's
# checkpoints, is alone again, since it leaves vLLM's memory settings as
# they are. After each of those three steps, every file left in /tmp, /root,
# /var/tmp or /dev/shm is listed (bytecode caches aside).
# ATTENTION_BACKEND (default TRITON_ATTN: FlashAttention's extension does not
# load under the bundle's torch) goes to --attention-backend. Step 1 takes
# about 2 minutes on an H200.
source scripts/gpu/setup_device.sh || exit 1
# verify --gpu sets it for its engines; the user's default is unset.
unset VLLM_ENABLE_V1_MULTIPROCESSING
results=${RESULTS:-/tmp/gpu-results}
mkdir -p "$results"
repo=$PWD
backend=${ATTENTION_BACKEND:-TRITON_ATTN}
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
python3 scripts/gpu/driver.py models --out /tmp/user-checkpoints --shapes tiny > /dev/null

run() {  # run NAME TREE ARGS...: dflash2-backport verify ARGS with TREE's vLLM
    local name=$1 tree=$2
    shift 2
    local out="$results/verify-$name.txt" started
    started=$(date +%s.%N)
    echo "\$ dflash2-backport verify --python python3 $*   (vLLM from $tree)" > "$out"
    PYTHONPATH="$repo:$tree:/tmp/site" timeout "${VERIFY_TIMEOUT:-400}" \
        python3 -m dflash2_backport verify --python python3 "$@" >> "$out" 2>&1
    echo "exit $?, wall $(python3 -c "print(round($(date +%s.%N) - $started, 1))") s" >> "$out"
}

left_behind() {  # left_behind MARKER: what appeared since MARKER was touched
    echo "left behind:"
    find /tmp /root /var/tmp /dev/shm -xdev -newer "$1" ! -type d \
        ! -path '*/__pycache__/*' ! -path "$results/*" ! -path "${OUT:-/nonexistent}/*" \
        2>/dev/null | head -20
    find /tmp /root /var/tmp /dev/shm -mindepth 1 -maxdepth 1 -xdev -newer "$1" -type d \
        ! -path "$results" 2>/dev/null | head -20
    rm -f "$1"
}

step() {  # step NAME... : run the named runs (defined below) side by side
    local marker=/tmp/.verify-step.marker
    touch "$marker"
    sleep 1
    for name in "$@"; do "run_$name" & done
    wait
    for name in "$@"; do cat "$results/verify-${name//_/-}.txt"; echo; done
    left_behind "$marker"
    echo
}

run_gpu_patched_0.27.1() { run gpu-patched-0.27.1 /tmp/vt --gpu --attention-backend "$backend"; }
run_gpu_pristine_0.27.1() { run gpu-pristine-0.27.1 /tmp/vtp --gpu --attention-backend "$backend"; }
run_gpu_upstream_0.28.0() { run gpu-upstream-0.28.0 /tmp/vt28 --gpu --attention-backend "$backend"; }
run_cpu_patched_0.27.1() { run cpu-patched-0.27.1 /tmp/vt; }
run_gpu_own_checkpoints_0.27.1() {
    run gpu-own-checkpoints-0.27.1 /tmp/vt --gpu --attention-backend "$backend" \
        --target /tmp/user-checkpoints/tiny/target --draft /tmp/user-checkpoints/tiny/dflash2
}

# VERIFY_STEPS picks steps (default all three), to run them one at a time.
for number in ${VERIFY_STEPS:-1 2 3}; do
    case $number in
        1) step gpu_patched_0.27.1 ;;
        2) step gpu_pristine_0.27.1 gpu_upstream_0.28.0 cpu_patched_0.27.1 ;;
        3) step gpu_own_checkpoints_0.27.1 ;;
    esac
done
