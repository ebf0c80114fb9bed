#!/usr/bin/env bash
# The driver's checks on the real install (README, "A real install"): every
# engine in a venv that pip made, 0.27.1 as the tool left it and upstream
# 0.28.0, with the attention backend and the sampler left to vLLM (SAMPLER=
# pytorch keeps the PyTorch sampler, as the bundle's runs have it), started
# as soon as its venv is ready (real_install_venv.sh touches
# STORE/venv-V.ready), so that it may begin while the installs and
# verify --gpu still run.
#
#     CONFIGS=a,b,... [PHASES=check,serve] [REUSE=1] [STACK_DUMP_S=40] \
#         [RELEASE=0.26.0] bash scripts/gpu/real_install_checks.sh SECONDS
#
# RELEASE names another release the tool patched for the closure's engines
# (no prefix), in STORE/venv-RELEASE, into a run of its own (STORE/drv-RELEASE);
# `driver.py compare-runs STORE/drv STORE/drv-RELEASE` then holds its engines
# to 0.27.1's, configuration by configuration.
#
# SECONDS bounds the engines (the driver's --timeout); the server, if
# PHASES has serve, runs in bfloat16 so that it gets FlashAttention too.
# nvidia-smi samples the GPU every 5 s meanwhile. The driver's output goes
# to RESULTS/driver-HHMMSS.txt and its run (engine logs and results, not the
# checkpoints or compile caches) to OUT/engines.tgz (OUT, else RESULTS);
# its verdict lines are printed.
set -u
store=${RI_STORE:-/tmp/ri}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
release=${RELEASE:-0.27.1}
closure=$store/venv-$release
run=${RUN:-$store/drv}
[ "$release" = 0.27.1 ] || run=${RUN:-$store/drv-$release}
results=${RESULTS:-$store/results}
time_limit=${1:?the seconds the engines may take}
stamp=$(date +%H%M%S)
mkdir -p "$results" "$run"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
[ -n "${STACK_DUMP_S:-}" ] && export DRIVER_STACK_DUMP_S=$STACK_DUMP_S
SAMPLER_FLAG=--default-sampler
[ "${SAMPLER:-}" = pytorch ] && SAMPLER_FLAG=

nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 \
    > "$results/gpu-$stamp.csv" 2>&1 &
sampler=$!
# No tree of the bundle here: each version runs in its venv's interpreter.
python3 "$here/driver.py" run --out "$run" --phases "${PHASES:-check}" \
    --configs "${CONFIGS:?which configurations}" --attention-backend auto \
    --serve-dtype bfloat16 ${SAMPLER_FLAG} \
    --python-0271 "$closure/bin/python" --closure-release "$release" \
    --python-0280 "$store/venv-0.28.0/bin/python" \
    --tree-0271 "$store/no-tree" --tree-0280 "$store/no-tree" \
    --tree-0271pr "$store/no-tree" --tree-new "$store/no-tree" --site "$store/no-tree" \
    --ready "closure=$closure.ready" --ready "up=$store/venv-0.28.0.ready" \
    --timeout "$time_limit" ${REUSE:+--reuse} > "$results/driver-$stamp.txt" 2>&1
code=$?
kill $sampler 2>/dev/null
wait $sampler 2>/dev/null
tar -czf "${OUT:-$results}/engines.tgz" -C "$run" --exclude=./models --exclude=./vllm-cache . \
    2>/dev/null
grep -E "^(PASS|FAIL|INFO|----|whole run|ALL CHECKS|SOME CHECKS)|is there after|not started" \
    "$results/driver-$stamp.txt" | cut -c1-600
echo "driver exit $code"
