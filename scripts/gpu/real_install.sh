#!/usr/bin/env bash
# The tool as a user runs it, on vLLM 0.27.1 installed by pip over torch
# 2.13.0, or on another release's venv (PY; real_install_venv.sh runs this
# once the venv is made; it can be run again by hand):
#
#     PY=/tmp/ri/venv-0.27.1/bin/python RESULTS=$OUT bash scripts/gpu/real_install.sh
#
# dflash2-backport, installed from its wheel into a venv of its own
# (TOOL, default /tmp/ri/tool/bin/dflash2-backport), with --python naming the
# interpreter of vLLM's venv (PY): --version, check, apply, check, verify,
# revert, apply, check, then verify --gpu with no --attention-backend (vLLM
# chooses). verify --gpu comes last so that the tree is in its final state
# while it runs: READY (if set) is touched before it, and the driver's
# engines (`driver.py run --ready closure=READY`) start beside it instead of
# after it. Each command's output goes to RESULTS/tool-NN-NAME.txt (default
# $OUT, else /tmp/ri/results) with its exit status and wall time, and all of
# them to RESULTS/tool-runs.txt. verify --gpu keeps its engines' logs in a
# temporary directory it removes at the end; a watcher copies them out while
# it runs (RESULTS/verify-gpu-engine-*.log), and the lines where vLLM names
# the attention backend it chose go to RESULTS/tool-runs.txt (verify --gpu
# runs with VLLM_LOGGING_LEVEL=INFO for that, unless it is set). Its HOME is
# an empty directory (STORE/verify-home-VENV), and what it holds afterwards
# is listed there too: verify must leave nothing. RI_VERIFY_GPU=0 (in the
# environment that starts the install) stops after READY: where verify --gpu
# has passed already, its four minutes go to the engines instead.
set -u
store=${RI_STORE:-/tmp/ri}
py=${PY:-$store/venv-0.27.1/bin/python}
tool=${TOOL:-$store/tool/bin/dflash2-backport}
results=${RESULTS:-${OUT:-$store/results}}
mkdir -p "$results"
all=$results/tool-runs.txt
: > "$all"
# The tool's temporary files (verify --gpu's engines' logs among them) go
# here, so that the watcher finds them.
venv_name=$(basename "$(dirname "$(dirname "$py")")")
scratch=$store/tool-tmp-$venv_name
rm -rf "$scratch"
mkdir -p "$scratch"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

number=0
run() {  # run NAME ARGS...: dflash2-backport ARGS, output to RESULTS/tool-NN-NAME.txt
    local name=$1 started out
    shift
    number=$((number + 1))
    out=$results/tool-$(printf %02d $number)-$name.txt
    started=$(date +%s.%N)
    echo "\$ dflash2-backport $*" > "$out"
    TMPDIR=$scratch timeout "${TOOL_TIMEOUT:-900}" "$tool" "$@" >> "$out" 2>&1
    local code=$?
    echo "exit $code, wall $(python3 -c "print(round($(date +%s.%N) - $started, 1))") s" >> "$out"
    cat "$out" >> "$all"
    echo >> "$all"
    tail -n 2 "$out"
    return 0
}

watch_engine_logs() {  # copy verify --gpu's engine logs out of its scratch while it runs
    while :; do
        for log in "$scratch"/dflash2-backport-verify-gpu-*/engine-*.log; do
            [ -f "$log" ] && cp -f "$log" "$results/verify-gpu-$(basename "$log")"
        done
        sleep 1
    done
}

run version --version
run check-before check --python "$py"
run apply apply --python "$py"
run check-after-apply check --python "$py"
run verify-cpu verify --python "$py"
run revert revert --python "$py"
run apply-again apply --python "$py"
run check-after-reapply check --python "$py"
[ -n "${READY:-}" ] && touch "$READY"
if [ "${RI_VERIFY_GPU:-1}" = 0 ]; then
    echo "== verify --gpu: not run (RI_VERIFY_GPU=0)" | tee -a "$all"
    exit 0
fi
watch_engine_logs &
watcher=$!
# The engines log at WARNING unless VLLM_LOGGING_LEVEL says otherwise (the
# tool passes a user's own setting on); at INFO they name the attention
# backend vLLM chose.
# An empty home directory of its own, so that whatever it leaves there shows.
home=$store/verify-home-$venv_name
rm -rf "$home"
mkdir -p "$home"
HOME=$home VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-INFO} run verify-gpu verify --gpu --python "$py"
{
    echo "== left in the home directory by verify --gpu: $(find "$home" -mindepth 1 | wc -l) paths"
    find "$home" -mindepth 1 -maxdepth 4 | head -20
} | tee -a "$all"
kill $watcher 2>/dev/null
wait $watcher 2>/dev/null
{
    echo "== the attention backend vLLM chose (verify --gpu's engines' logs)"
    grep -hE "attention backend|Using .* backend|FlashAttention version|Using FlashInfer|top-p & top-k" \
        "$results"/verify-gpu-engine-*.log 2>/dev/null | sed -E 's/^.*\] //' | sort | uniq -c
    echo
} | tee -a "$all"
