#!/usr/bin/env bash
# Install one vLLM version for real, as a user does, into STORE/venv-VERSION
# (real_install_setup.sh starts it in the background once every wheel the
# install needs is out of its parts):
#
#     bash scripts/gpu/real_install_venv.sh 0.27.1
#
# 1. `python3 -m venv`, seeing the machine's own packages as
#    --system-site-packages would: the machine's python3 is itself a venv
#    (/opt/torch/.venv), whose packages --system-site-packages does not
#    reach, so a .pth file adds that interpreter's site-packages after the
#    venv's own (where python3 is not a venv, --system-site-packages is used).
# 2. pip install --no-index --find-links STORE/links/vllm-VERSION torch===2.13.0
#    (the build's torch requirement for the release: torch==2.11.0, the
#    image's own, for 0.26.0), then vllm==VERSION: pip resolves every
#    dependency, taking a package the machine has where its version does,
#    installing the carried wheel where not.
# 3. FlashInfer's JIT kernels built ahead into VENV/flashinfer (in the
#    background; RI_PREBUILD=0 leaves them out, RI_PREBUILD="V ..." builds
#    them for those releases alone), and beside them `pip
#    check`, `pip list -v` (where each package comes from) and
#    real_install_probe.py in the venv: torch's CUDA build and libraries,
#    FlashAttention 3's own extension, vLLM's platform.
# 4. For a release the tool patches (0.26.x, 0.27.x):
#    real_install.sh, the tool as a user runs it, on this venv (one
#    release's runs at a time; 0.27.1's results in STORE/results, another's
#    in STORE/results/tool-VERSION).
# STORE/venv-VERSION.ready marks a venv the driver may use (for a patched
# release, once the tool has left it patched, before verify --gpu);
# STORE/venv-VERSION.done or .failed marks the end; STORE/results/summary-VERSION.txt
# holds what each step printed.
set -u -o pipefail
version=$1
store=${RI_STORE:-/tmp/ri}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=$store/venv-$version
results=$store/results
summary=$results/summary-$version.txt
say() { echo "[$(date +%T)] $*" | tee -a "$summary"; }
fail() { say "FAILED: $*"; touch "$store/venv-$version.failed"; exit 1; }
: > "$summary"
step() {  # step NAME COMMAND...: run, log to results/NAME.txt, say how long it took
    local name=$1 started=$SECONDS
    shift
    "$@" > "$results/$name.txt" 2>&1
    local code=$?
    say "$name: exit $code in $((SECONDS - started)) s"
    tail -n 5 "$results/$name.txt" | sed 's/^/    /' | tee -a "$summary"
    return $code
}

links=$(python3 "$here/real_install_parts.py" links --store "$store" --install "vllm-$version") \
    || fail "no wheels"
rm -rf "$venv"
if python3 -c "import sys; sys.exit(sys.prefix == sys.base_prefix)"; then
    make_venv() {
        python3 -m venv "$venv" || {
            rm -rf "$venv"
            python3 -m venv --without-pip "$venv" &&
                "$venv/bin/python" "$(ls "$links"/pip-*.whl 2>/dev/null || ls "$store"/wheels/pip-*.whl)/pip" \
                    install --quiet --no-index "$store"/wheels/pip-*.whl
        } || return 1
        local site
        site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        python3 - "$site/_machine_site_packages.pth" <<'EOF'
import site, sys
lines = [f"import site; site.addsitedir({path!r})" for path in site.getsitepackages()]
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
print("machine site-packages after the venv's own:", site.getsitepackages())
EOF
    }
else
    make_venv() {
        python3 -m venv --system-site-packages "$venv"
    }
fi
step "venv-$version" make_venv || fail "venv"
pip=("$venv/bin/python" -m pip)
step "pip-version-$version" "${pip[@]}" --version
torch=$(python3 "$here/real_install_parts.py" specs --store "$store" --install "vllm-$version" \
    | grep -E '^torch[=<>!~ ]') || fail "no torch requirement in the build"
step "install-torch-$version" "${pip[@]}" install --no-index --find-links "$links" \
    --no-cache-dir "$torch" || fail "torch"
step "install-vllm-$version" "${pip[@]}" install --no-index --find-links "$links" \
    --no-cache-dir "vllm==$version" || fail "vllm"
# FlashInfer's JIT kernels that vLLM's engines build at their first start
# (the top-k and the sampler's, about 150 and 100 s with nvcc), built now,
# beside the tool's runs, into VENV/flashinfer, where the driver's and the
# speed benchmark's engines on this venv look for them.
prebuild() {  # prebuild MODULE: build and load flashinfer.MODULE's JIT kernels
    FLASHINFER_WORKSPACE_BASE=$venv/flashinfer "$venv/bin/python" -c "
import time, importlib
started = time.time()
module = importlib.import_module('flashinfer.$1')
getattr(module, 'get_$1_module')()
print('$1 kernels built and loaded in %.0f s' % (time.time() - started))"
}
mkdir -p "$venv/flashinfer"
# RI_PREBUILD=0 leaves them to the first engine: for timing a first start;
# RI_PREBUILD="0.26.0 ..." builds them for those releases alone.
builds=()
case " ${RI_PREBUILD:-1} " in
    " 1 "|*" $version "*) prebuild_here=1 ;;
    *) prebuild_here= ;;
esac
if [ -n "$prebuild_here" ]; then
    step "flashinfer-topk-$version" prebuild topk &
    builds+=($!)
    step "flashinfer-sampling-$version" prebuild sampling &
    builds+=($!)
fi
# The checks of the install run beside the builds: nvcc is the long pole.
step "pip-check-$version" "${pip[@]}" check
step "pip-list-$version" "${pip[@]}" list -v
step "probe-$version" "$venv/bin/python" "$here/real_install_probe.py"
grep -E '^(torch|cuda|cudnn|nccl|fa3|vllm|platform|flashinfer|loaded)' \
    "$results/probe-$version.txt" | sed 's/^/    /' >> "$summary"
# STORE/venv-VERSION.ready: the venv is installed and, for a release the tool
# patches, patched by it for good; the driver's engines may start on it
# (--ready).
case $version in 0.26.*|0.27.*) patches=1 ;; *) patches= ;; esac
if [ -n "$patches" ] && [ -z "${RI_NO_TOOL_RUNS:-}" ]; then
    tool_results=$results
    [ "$version" = 0.27.1 ] || tool_results=$results/tool-$version
    mkdir -p "$tool_results"
    # One release's runs at a time: two verify --gpu would share the GPU.
    lock=()
    command -v flock > /dev/null && lock=(flock "$store/tool-runs.lock")
    ${lock[@]+"${lock[@]}"} env READY="$store/venv-$version.ready" \
        PY="$venv/bin/python" RESULTS="$tool_results" \
        bash "$here/real_install.sh" > "$tool_results/tool-runs-log.txt" 2>&1
    say "tool runs: exit $?"
else
    touch "$store/venv-$version.ready"
fi
wait ${builds[@]+"${builds[@]}"}
touch "$store/venv-$version.done"
say "done"
