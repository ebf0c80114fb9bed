"""A DFlash speculator bounds its drafts by the model length vLLM serves,
not the one it was built with.

With `max_model_len=-1`, vLLM builds the runner and its speculator with the
model's full length, then fits the length to the KV cache and hands it to
every worker, whose runner sizes its block tables to it. 0.27.1's
`DraftModelSpeculator` kept the length it was built with, and that is the
bound the DFlash speculators clamp their query positions to. Here the
engine is built with 2048 and auto-fit is given memory for 10 blocks (1280
tokens at the CPU platform's block size of 128): patched by `apply`, the
speculator reads the fitted length; in each release as it ships and
patched by `apply --only-pr`, still 2048 (venv_side/model_len_probe.py).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.runtime

BUILT_WITH, BLOCKS = 2048, 10
UNFIXED = ("pristine", "only-pr")


@pytest.fixture(scope="module")
def seen(snippets, edit_set_pythons, tiny_models) -> dict[str, dict]:
    code = "import sys, json, model_len_probe; model_len_probe.main(json.loads(sys.argv[1]))"
    request = {"models": {k: str(v) for k, v in tiny_models.items()},
               "max_model_len": BUILT_WITH, "blocks": BLOCKS}
    names = list(edit_set_pythons)
    runs = [snippets.start(edit_set_pythons[name], code, args=[json.dumps(request)],
                           timeout=600) for name in names]
    results = dict(zip(names, snippets.gather(runs)))
    for name, result in results.items():
        print(name, json.dumps(result)[:2000])
    return results


def fitted(seen: dict, tree: str) -> dict:
    found = seen[tree]["fitted"]
    assert found["ok"], (tree, found)
    value = found["value"]
    # Auto-fit lowered the length to what the blocks hold, on every tree.
    assert value["built_with"] == BUILT_WITH, (tree, value)
    assert value["config"] == BLOCKS * value["block_size"], (tree, value)
    return value


def test_the_patched_speculator_reads_the_length_auto_fit_leaves(seen):
    patched = fitted(seen, "patched")
    assert patched["speculator_length"] == BLOCKS * patched["block_size"] < BUILT_WITH


@pytest.mark.parametrize("tree", UNFIXED)
def test_the_speculator_as_shipped_keeps_the_length_it_was_built_with(seen, tree):
    assert fitted(seen, tree)["speculator_length"] == BUILT_WITH
