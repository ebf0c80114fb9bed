#!/usr/bin/env bash
# The test suite's GPU tests (marker `gpu`), on the device, against the trees
# setup_device.sh unpacked:
#   - upstream's own tests for the fixes, unchanged (0.28.0's DFlash
#     prepare-inputs tests, 0.29.0's drafted-resample unbiasedness test,
#     0.34.0's test of the convolution kernel), and
#     the DFlash2 kernels at a serving size, on /tmp/vt (the patched 0.27.1);
#   - the same upstream tests on /tmp/vtpr (`apply --only-pr`) and /tmp/vtp
#     (0.27.1 as it ships), where they must fail: printed, not judged here.
# Output in RESULTS (default $OUT): gpu-pytest.txt, upstream-TREE-VERSION.txt,
# and one line per run on stdout.
#
#     source scripts/gpu/setup_device.sh; bash scripts/gpu/gpu_tests.sh
set -u
cd "$(dirname "$0")/../.."
bundle=${GPU_BUNDLE:-.cache/gpu-bundle}
tests=$PWD/$bundle/main/tests
results=${RESULTS:-$OUT}
mkdir -p "$results"
limit=${GPU_TESTS_LIMIT:-300}

PYTHONPATH=$(cat /tmp/vt/.pythonpath) DFLASH2_GPU_PYTHON=python3 \
    DFLASH2_UPSTREAM_TESTS=$tests/upstream DFLASH2_GPU_BUNDLE=$tests/kernels \
    timeout "$limit" python3 -m pytest -p no:cacheprovider -m gpu -rA -q -s \
    tests/runtime/test_runtime_upstream_fixes.py tests/runtime/test_runtime_conv_kernel.py \
    tests/runtime/modules/test_dflash2_gpu.py \
    > "$results/gpu-pytest.txt" 2>&1
echo "patched 0.27.1, the gpu tests: exit $? ($(tail -n 1 "$results/gpu-pytest.txt"))"

# The fixed trees' failures, each upstream file in its own run.
for tree in vtpr vtp; do
    for file in 0.28.0/tests/v1/spec_decode/test_dflash_prepare_inputs.py \
                0.29.0/tests/v1/spec_decode/test_rejection_sampler_utils.py; do
        version=${file%%/*}
        select=()
        [ "$version" = 0.29.0 ] && select=(-k test_gumbel_drafted_rejection_sample_is_unbiased)
        out=$results/upstream-$tree-$version.txt
        PYTHONPATH=$(cat /tmp/$tree/.pythonpath) timeout "$limit" python3 -m pytest \
            -p no:cacheprovider --noconftest -q -rA "$tests/upstream/$file" "${select[@]}" \
            > "$out" 2>&1
        echo "/tmp/$tree, upstream $version's test: exit $? ($(tail -n 1 "$out"))"
    done
done
