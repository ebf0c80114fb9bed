"""vLLM 0.34.0's own CPU tests of the DFlash path
(tests/v1/spec_decode/test_dflash*.py, from its source distribution), run
unchanged on vLLM 0.27.1 as `apply` patches it, each file whole, as 0.34.0
runs them: what passes, what fails and why, and what does not import.

They run with pytest in the testkit venv, without upstream's conftest.py
(`--noconftest`), in upstream's own layout; the two files that do not
import are run too, so that a change that made them import shows here.
"""

from __future__ import annotations

import pytest

from tests.runtime.test_runtime_upstream_fixes import RUN_PYTEST
from tests.upstream import upstream_tests

pytestmark = pytest.mark.runtime

VERSION = "0.34.0"
FILES = (
    "v1/spec_decode/test_dflash_causality.py",
    "v1/spec_decode/test_dflash_profile.py",
    "v1/spec_decode/test_dflash_prepare_inputs.py",
    "v1/spec_decode/test_dflash2.py",
    "v1/spec_decode/test_dflash_lookahead.py",
)
#: Upstream's test helpers the files import.
HELPERS = ("v1/core/utils.py",)
CAUSALITY = [
    *(f"test_dflash_has_any_non_causal[config{i}-{v}]" for i, v in enumerate(
        ["False", "True", "True", "False", "True", "False", "True", "True"])),
    "test_dflash_layer_causal_is_per_layer",
    "test_dflash_layer_causal_honors_top_level_override",
    "test_dflash_fc_uses_aux_layer_count",
    "test_dflash_target_layers_map_to_post_layer_boundaries",
    "test_eagle_aux_layers_preserves_legacy_layer_ids[dflash_config]",
    "test_eagle_aux_layers_preserves_legacy_layer_ids[eagle_config]",
]
#: 0.34.0 caps the profile run's requests in the runner, from a
#: `num_query_per_req` every speculator has; the backport caps
#: `max_num_seqs` in the config (`draft-seqs-cap`), which sizes the runner,
#: so a runner built directly, as these tests build it, is not capped
#: (test_runtime_draft_seqs_cap.py shows the engine built the normal way
#: capped at the same 409).
RUNNER_CAP = [
    "test_default_speculator_query_width_is_one",
    *(f"test_dummy_run_caps_parallel_draft_requests[{p}-{s}-{c}]"
      for p, s in (("False", "False"), ("True", "False"), ("True", "True"))
      for c in ("DFlashSpeculator", "DSparkSpeculator")),
]
PROFILE_PASSING = [
    "test_dummy_run_keeps_already_fitting_parallel_draft_batch",
    "test_dummy_run_keeps_default_speculator_batch",
]
NO_GPU = "requires a CUDA or XPU device"
#: Outcome of each test, by its id; for a file that does not import, by
#: the file, with the name its import stops at; the skipped tests, counted.
EXPECTED = {
    **dict.fromkeys(CAUSALITY, "passed"),
    **dict.fromkeys(PROFILE_PASSING, "passed"),
    "test_default_speculator_query_width_is_one": "failed: num_query_per_req",
    **{t: "failed: assert 512 == 409" for t in RUNNER_CAP[1:]},
    # Every test of test_dflash_prepare_inputs.py asks for CUDA or XPU.
    "skipped": f"6: {NO_GPU}",
    # 0.34.0's torch reference of its fused selector kernel, which the
    # backport's selector (0.28.0's torch form) has no use for; one test of
    # the file runs alone in test_runtime_anchor_clamp.py.
    "test_dflash2.py": "error: _score_edges_reference",
    # Upstream's scheduler test helpers, which import its KV-connector tests.
    "test_dflash_lookahead.py": "error: tests.v1.kv_connector",
}


@pytest.fixture(scope="module")
def seen(snippets, edit_set_pythons) -> dict:
    # Upstream's own layout, so that a file's imports of upstream's test
    # helpers resolve as they do there.
    root = upstream_tests(VERSION, *FILES, *HELPERS)
    arguments = ["--continue-on-collection-errors", "--rootdir", str(root),
                 *(str(root / "tests" / relative) for relative in FILES)]
    return snippets.run(edit_set_pythons["patched"], RUN_PYTEST, args=arguments, timeout=900)


def observed(seen: dict, expected: dict[str, str]) -> dict[str, str]:
    """Each outcome in `expected`'s words where it says the same: an
    expected "failed: X" or "error: X" stands for an outcome of that kind
    that names X. Collection errors are keyed by file; skipped tests are
    counted under "skipped", with each reason they give."""
    found: dict[str, str] = {}
    reasons: list[str] = []
    for test, outcome in seen["outcomes"].items():
        if outcome.startswith("skipped"):
            reasons.append(NO_GPU if NO_GPU in outcome else outcome)
            continue
        key = test.rsplit("/", 1)[-1]
        wanted = expected.get(key, "")
        kind, _, words = wanted.partition(": ")
        found[key] = wanted if kind and outcome.startswith(kind) and words in outcome else outcome
    if reasons:
        found["skipped"] = f"{len(reasons)}: " + "; ".join(sorted(set(reasons)))
    return found


#: On 0.26.0 the causality file imports what 0.27.0 added for EAGLE-3's
#: auxiliary layers (test_runtime_upstream_fixes.py runs 0.28.0's without
#: the tests that read it).
EXPECTED_BY_RELEASE = {
    "0.27.1": EXPECTED,
    "0.26.0": {
        **{k: v for k, v in EXPECTED.items() if k not in CAUSALITY},
        "test_dflash_causality.py": "error: _get_dflash_fc_input_size",
    },
}


def test_0_34_0_s_dflash_cpu_tests_give_the_table_on_the_patched_tree(
    seen, edit_set_release
) -> None:
    expected = EXPECTED_BY_RELEASE[edit_set_release]
    assert observed(seen, expected) == expected, seen
