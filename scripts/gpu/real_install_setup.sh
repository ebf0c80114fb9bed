#!/usr/bin/env bash
# On the GPU host, after each transfer of a real install (README, "A real
# install"): take in the parts build_real_install.py cut that this transfer
# brought (.cache/real-install/parts/pNN), in whatever order
# they come, and start each install as soon as every wheel it needs is here.
#
#     bash scripts/gpu/real_install_setup.sh
#
# STORE (RI_STORE, default /tmp/ri) keeps everything from one run to the next:
#   STORE/parts, STORE/wheels   the parts not yet spent, the wheels written out
#   STORE/tool                  a venv with this tool installed from its wheel
#   STORE/venv-0.27.1           a venv with torch 2.13.0 and vLLM 0.27.1, by pip
#   STORE/venv-0.28.0           the same with vLLM 0.28.0 (or each release
#                               the build names: build_real_install.py --versions)
#   STORE/results               what each step printed (RESULTS of the runs)
#   STORE/logs                  the background jobs' logs
# The tool's venv is made in the run that brings its wheels (seconds); each
# vLLM venv is made by real_install_venv.sh in the background (setsid: it
# runs on after this script returns), which for a
# release the tool patches then runs real_install.sh, the tool as a user
# runs it.
# Every run prints where each install stands and which parts it waits for.
# RI_WAIT=SECONDS waits that long at most for the background jobs to end
# (with RI_WAIT_FOR=ready, only until each venv is ready for engines,
# STORE/venv-VERSION.ready: installed and, where the tool patches it,
# patched; FlashInfer's kernels may still be building, and an engine that
# needs one waits on FlashInfer's own lock for it);
# RI_RETRY="0.27.1 ..." starts a failed install again (after the parts it
# lacked came). When OUT is set, STORE/results and STORE/logs go to
# $OUT/results.tgz and the summaries to $OUT.
set -u
store=${RI_STORE:-/tmp/ri}
parts=${RI_PARTS:-.cache/real-install/parts}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export RI_STORE=$store
mkdir -p "$store/results" "$store/logs"
# NVLink multicast stays off in every process started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

if [ ! -f "$store/results/machine.txt" ]; then
    {
        echo "== python3"; command -v python3
        python3 -c "import sys, site; print(sys.version); print('prefix', sys.prefix, 'base', sys.base_prefix); print('site', site.getsitepackages())"
        python3 -c "import ensurepip" 2>/dev/null && echo "ensurepip: yes" || echo "ensurepip: no"
        echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
        echo "== nvcc"; nvcc --version 2>&1 | tail -2
        echo "== disk"; df -h /tmp . 2>&1
        echo "== pip list (the image's python3)"; python3 -m pip list --format=freeze 2>&1
    } > "$store/results/machine.txt" 2>&1
    grep -iE "^(torch|triton|numpy|numba|llvmlite|opencv|transformers|protobuf|setuptools|nvidia-|cuda-|typer|packaging)" \
        "$store/results/machine.txt" | tr '\n' ' '
    echo
fi

python3 "$here/real_install_parts.py" collect --store "$store" "$parts"/p*/ > "$store/logs/collect.log" 2>&1
collected=$?
grep -v "^wheel out:" "$store/logs/collect.log"
echo "wheels written out in this run: $(grep -c "^wheel out:" "$store/logs/collect.log")"
[ $collected -eq 0 ] || echo "collect FAILED (exit $collected)"

ready() { python3 "$here/real_install_parts.py" ready --store "$store" --install "$1"; }

if [ ! -f "$store/tool/.installed" ] && ready tool; then
    started=$SECONDS
    links=$(python3 "$here/real_install_parts.py" links --store "$store" --install tool)
    {
        rm -rf "$store/tool"
        # The tool's own venv, as a user makes one: nothing of the machine's.
        if ! python3 -m venv "$store/tool"; then
            rm -rf "$store/tool"
            python3 -m venv --without-pip "$store/tool" &&
                "$store/tool/bin/python" "$(ls "$links"/pip-*.whl)/pip" install --quiet \
                    --no-index "$links"/pip-*.whl
        fi
        "$store/tool/bin/python" -m pip install --no-index --find-links "$links" \
            --no-cache-dir dflash2-backport && touch "$store/tool/.installed"
        "$store/tool/bin/python" -m pip list --format=freeze
        "$store/tool/bin/dflash2-backport" --version
    } > "$store/results/install-tool.txt" 2>&1
    echo "tool venv: $([ -f "$store/tool/.installed" ] && echo installed || echo FAILED) in $((SECONDS - started)) s"
    tail -3 "$store/results/install-tool.txt"
fi

for version in ${RI_RETRY:-}; do
    rm -f "$store/venv-$version.started" "$store/venv-$version.failed" "$store/venv-$version.done"
done
versions=$(python3 "$here/real_install_parts.py" versions --store "$store")
for version in $versions; do
    if [ ! -f "$store/venv-$version.started" ] && ready "vllm-$version"; then
        touch "$store/venv-$version.started"
        setsid nohup bash "$here/real_install_venv.sh" "$version" \
            > "$store/logs/venv-$version.log" 2>&1 < /dev/null &
        echo "venv-$version: install started in the background"
    fi
done

jobs_state() {
    for version in $versions; do
        local state=waiting
        [ -f "$store/venv-$version.started" ] && state=running
        [ -f "$store/venv-$version.ready" ] && state="ready (FlashInfer's kernels may still build)"
        [ -f "$store/venv-$version.done" ] && state=done
        [ -f "$store/venv-$version.failed" ] && state=FAILED
        echo "venv-$version: $state"
        [ -f "$store/logs/venv-$version.log" ] && tail -n "${RI_TAIL:-3}" "$store/logs/venv-$version.log" | sed 's/^/    /'
    done
}

if [ -n "${RI_WAIT:-}" ]; then
    deadline=$((SECONDS + RI_WAIT))
    while [ $SECONDS -lt $deadline ]; do
        running=0
        for version in $versions; do
            if [ -f "$store/venv-$version.started" ] && [ ! -f "$store/venv-$version.done" ] \
                    && [ ! -f "$store/venv-$version.failed" ] \
                    && { [ "${RI_WAIT_FOR:-done}" != ready ] || [ ! -f "$store/venv-$version.ready" ]; }; then
                running=1
            fi
        done
        [ $running = 0 ] && break
        sleep 5
    done
fi
jobs_state

if [ -n "${OUT:-}" ]; then
    tar -czf "$OUT/results.tgz" -C "$store" results logs 2>/dev/null
    for name in tool-runs.txt machine.txt; do
        [ -f "$store/results/$name" ] && cp "$store/results/$name" "$OUT/"
    done
    for version in $versions; do
        [ -f "$store/results/summary-$version.txt" ] && cp "$store/results/summary-$version.txt" "$OUT/"
        [ -f "$store/results/tool-$version/tool-runs.txt" ] &&
            cp "$store/results/tool-$version/tool-runs.txt" "$OUT/tool-runs-$version.txt"
    done
fi
exit 0
