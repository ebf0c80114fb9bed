"""DFlash2Speculator's constructor over a stubbed base, as upstream's tests build it.

A probe of its own: these cases need no engine config, so the interpreter
that runs them starts no model.
"""

from __future__ import annotations

import pytest
from _dflash2_cases import Case, case_ids, result_of

pytestmark = pytest.mark.runtime

STUBBED = [
    Case("stubbed-base-3-steps", "built_over_stubbed_base", dict(steps=3, max_num_reqs=4)),
    Case("stubbed-base-5-steps", "built_over_stubbed_base", dict(steps=5, max_num_reqs=2)),
]


@pytest.fixture(scope="module")
def results(run_probe):
    return run_probe("probe_speculator.py", STUBBED)


@pytest.mark.parametrize("case", STUBBED, ids=case_ids(STUBBED))
def test_constructor_needs_only_what_a_stubbed_base_sets(results, case):
    result = result_of(results, case)
    steps, reqs = case.params["steps"], case.params["max_num_reqs"]
    assert result["selector_top_k"] == 4
    assert result["selector_scores_shape"] == [reqs, steps, 4]
    assert result["anchor_indices"] == [r * (1 + steps) for r in range(reqs)]


@pytest.mark.parametrize("case", STUBBED, ids=case_ids(STUBBED))
def test_a_zeroed_mapping_is_made_inert_whenever_it_is_allocated(results, case):
    """Padding rows must never aim at request slot 0, whoever allocates the buffer."""
    assert result_of(results, case)["mapping_after_zero_allocation"] == [-1]
