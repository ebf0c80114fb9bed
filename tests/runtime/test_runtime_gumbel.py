"""`gumbel_noised_argmax`, run in triton's interpreter, draws the same noise as
0.27.1's own `gumbel_block_argmax` for the same seed, position and token ids.

The probe (venv_side/gumbel_probe.py) samples one token per row from K
candidates through both and reports the fraction of rows that agree.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.runtime

SEED = 7


@pytest.fixture(scope="module")
def probe(snippets, venvs):
    code = "import gumbel_probe; gumbel_probe.main(%d)" % SEED
    names = list(venvs)
    return dict(zip(names, snippets.run_many([(venvs[n], code) for n in names])))


def gumbel_violations(seen: dict) -> list[str]:
    if not seen["import"]["ok"]:
        return [seen["import"]["error"].split(" (")[0]]
    problems = []
    for dtype in ("fp32", "fp64"):
        case = seen[dtype]
        if "error" in case:
            problems.append(f"{dtype}: {case['error']}")
            continue
        if case["agreement"] != 1.0:
            problems.append(f"{dtype}: agrees with gumbel_block_argmax on "
                            f"{case['agreement']:.1%} of rows")
        if case["greedy_is_argmax"] != 1.0:
            problems.append(f"{dtype}: temperature 0 is not the argmax")
    return problems


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_reference_sampler_is_noisy_enough_to_tell_draws_apart(probe, dtype):
    """Agreement only means something if noise moves the pick often and a
    draw keyed one position off disagrees."""
    case = probe["patched"][dtype]
    assert case["reference_greedy_is_argmax"] == 1.0
    assert case["reference_sampled_off_argmax"] > 0.2
    assert case["shifted_position_sampled_agreement"] < 0.8


def test_noised_argmax_draws_the_same_noise_as_gumbel_block_argmax(probe):
    assert gumbel_violations(probe["patched"]) == []
    assert gumbel_violations(probe["pristine"]) == [
        "ImportError: cannot import name 'gumbel_noised_argmax' from "
        "'vllm.v1.worker.gpu.sample.gumbel'"
    ]
