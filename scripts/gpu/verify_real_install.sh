#!/usr/bin/env bash
# On the GPU host, once real_install_setup.sh has a release's venv ready and
# patched (STORE/venv-RELEASE.ready): `dflash2-backport verify --gpu`, the
# tool from its wheel (STORE/tool), as a user runs it on that venv, in the
# steps VERIFY_STEPS names (default all, in this order):
#
#   cold      no options, FlashInfer's kernels not yet built (an empty
#             FLASHINFER_WORKSPACE_BASE): a first run on a fresh host
#   warm      no options again, with the kernels the cold run built (or
#             those VERIFY_WORKSPACE holds: real_install_venv.sh builds them
#             into VENV/flashinfer while the parts travel)
#   float32   --dtype float32: exact greedy equality
#   broken    no options, on a copy of the patched vLLM whose selector drafts
#             the wrong candidates (break_selector.py): must fail
#   pristine  no options, after `revert`: must fail; `apply` again after it
#
#     RELEASE=0.26.0 RESULTS=$OUT bash scripts/gpu/verify_real_install.sh
#
# Each step's output goes to RESULTS/verify-STEP.txt with its exit status and
# wall time; its engines' logs (at INFO, where vLLM names the attention
# backend it picks and times compilation and graph capture) are copied out
# of verify's temporary directory while it runs, to
# RESULTS/verify-STEP-engine-NAME.log, and the lines that time a start, with
# their clock times, go to RESULTS/verify-STEP-phases.txt.
set -u
store=${RI_STORE:-/tmp/ri}
release=${RELEASE:-0.27.1}
venv=$store/venv-$release
py=$venv/bin/python
tool=${TOOL:-$store/tool/bin/dflash2-backport}
results=${RESULTS:-${OUT:-$store/results}}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
steps=${VERIFY_STEPS:-cold warm float32 broken pristine}
mkdir -p "$results"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-INFO}
workspace=${VERIFY_WORKSPACE:-$store/flashinfer-verify-$release}
scratch=$store/verify-tmp-$release

verify_step() {  # verify_step NAME ARGS...: verify --gpu ARGS, timed, logs kept
    local name=$1 out=$results/verify-$1.txt started watcher
    shift
    rm -rf "$scratch"
    mkdir -p "$scratch" "$workspace"
    (while :; do
        for log in "$scratch"/dflash2-backport-verify-gpu-*/engine-*.log; do
            [ -f "$log" ] && cp -f "$log" "$scratch.$name.$(basename "$log")"
        done
        # Each engine's record: the seconds of its phases (import, start,
        # greedy run), rewritten after each one.
        for record in "$scratch"/dflash2-backport-verify-gpu-*/result-*.json; do
            [ -f "$record" ] && cp -f "$record" "$scratch.$name.engine-$(basename "$record" .json | sed 's/^result-//').json"
        done
        sleep 1
    done) &
    watcher=$!
    echo "\$ dflash2-backport verify --gpu --python $py $*" > "$out"
    started=$(date +%s.%N)
    TMPDIR=$scratch FLASHINFER_WORKSPACE_BASE=$workspace timeout 900 \
        "$tool" verify --gpu --python "$py" "$@" >> "$out" 2>&1
    echo "exit $?, wall $(python3 -c "print(round($(date +%s.%N) - $started, 1))") s" >> "$out"
    kill $watcher 2>/dev/null
    wait $watcher 2>/dev/null
    for record in "$scratch".$name.engine-*.json; do
        [ -f "$record" ] || continue
        engine=$(basename "$record" .json)
        cp "$record" "$results/verify-$name-engine-${engine#*.engine-}.json"
    done
    for log in "$scratch".$name.engine-*.log; do
        [ -f "$log" ] || continue
        engine=$(basename "$log" .log)
        engine=${engine#*.engine-}
        cp "$log" "$results/verify-$name-engine-$engine.log"
        # Each line that times a part of the start, with its clock time and
        # the engine it belongs to: where the start's seconds go.
        grep -E "Resolved architecture|Initializing a V1|Loading weights took|Model loading took|torch.compile took|Compiling a graph|compile range|Graph capturing|Capturing CUDA graph|init engine|KV cache|Using .*backend|FlashAttention version|flashinfer|FlashInfer|Building|ninja|Started|Starting|warm" "$log" \
            | sed -E -e 's/^(\([^)]*\) )?[A-Z]+ +[0-9]{2}-[0-9]{2} ([0-9:]{8})(\.[0-9]+)? \[[^]]*\] +/\2 /' \
                     -e 's/^[0-9-]{10} ([0-9:]{8}),[0-9]+ - [A-Z]+ - [^ ]+ - /\1 /' \
            | cut -c1-200 | sed "s/^/$engine  /"
    done > "$results/verify-$name-phases.txt"
    rm -f "$scratch".$name.engine-*
    cat "$out"
}

for step in $steps; do
    case $step in
        cold)
            rm -rf "$workspace"
            verify_step cold ;;
        warm)
            verify_step warm ;;
        float32)
            verify_step float32 --dtype float32 ;;
        broken)
            copy=$store/broken-$release
            rm -rf "$copy"
            mkdir -p "$copy"
            site=$("$py" -c "import os, vllm; print(os.path.dirname(os.path.dirname(vllm.__file__)))")
            cp -a "$site/vllm" "$copy/vllm"
            python3 "$here/break_selector.py" "$copy/vllm" > "$results/verify-broken-how.txt"
            PYTHONPATH=$copy verify_step broken
            rm -rf "$copy" ;;
        pristine)
            "$tool" revert --python "$py" > "$results/verify-pristine-revert.txt" 2>&1
            verify_step pristine
            "$tool" apply --python "$py" >> "$results/verify-pristine-revert.txt" 2>&1
            "$tool" check --python "$py" >> "$results/verify-pristine-revert.txt" 2>&1
            echo "check after apply: exit $?" >> "$results/verify-pristine-revert.txt" ;;
    esac
done
