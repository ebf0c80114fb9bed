"""A DFlash draft's `use_aux_hidden_state` and `mask_token_id` are read at
the top level of its config too, as vLLM 0.29.0 reads them.

Each draft gives the keys only at the top level; `dflash_config` keeps the
rest. Patched by `apply`, the model takes them: a draft that declares
`use_aux_hidden_state: false` gets no `fc` projection (the checkpoint has
no weights for one), and the model's `mask_token_id` is the draft's, so a
mask embedding the checkpoint ships is loaded for it. In each release as it
ships and patched by `apply --only-pr`, the model ignores both: `fc` is
built, to be filled from no weights, and `mask_token_id` is None
(venv_side/drafter_keys_probe.py). DFlash1 and DFlash2 share the model.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.runtime.tiny_configs import DFLASH1_DRAFTS, DFLASH2_DRAFT, TARGET

pytestmark = pytest.mark.runtime

UNFIXED = ("pristine", "only-pr")
MASK_TOKEN_ID = 999


def _top_level(draft: dict, **keys) -> dict:
    """`draft` with its mask token moved out of dflash_config to the top
    level, and `keys` set there too."""
    config = copy.deepcopy(draft)
    dflash = config["dflash_config"]
    assert dflash.pop("mask_token_id") == MASK_TOKEN_ID
    return {**config, "mask_token_id": MASK_TOKEN_ID, **keys}


MODELS = {
    "target": TARGET,
    "dflash1-no-aux": _top_level(DFLASH1_DRAFTS["dflash1-full"], use_aux_hidden_state=False),
    "dflash1-mask": _top_level(DFLASH1_DRAFTS["dflash1-full"]),
    # Its sliding-window layers need a window to be built.
    "dflash2-mask": _top_level({**DFLASH2_DRAFT, "dflash_config": {
        **DFLASH2_DRAFT["dflash_config"], "swa_window_size": 16}}),
}
DRAFTS = [name for name in MODELS if name != "target"]


@pytest.fixture(scope="module")
def seen(snippets, edit_set_pythons, tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("drafter-keys")
    models = {}
    for name, config in MODELS.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config, indent=2))
        models[name] = str(root / name)
    code = ("import sys, json, drafter_keys_probe; "
            "drafter_keys_probe.main(json.loads(sys.argv[1]))")
    names = list(edit_set_pythons)
    results = snippets.run_many(
        [(edit_set_pythons[name], code) for name in names],
        args=[json.dumps({"models": models, "drafts": DRAFTS})],
    )
    for name, result in zip(names, results):
        print(name, json.dumps(result)[:2000])
    return dict(zip(names, results))


def model(seen: dict, tree: str, draft: str) -> dict:
    outcome = seen[tree][draft]
    assert outcome["ok"], (tree, draft, outcome)
    return outcome["value"]


def test_a_draft_without_aux_hidden_states_at_the_top_level_gets_no_fc_projection(seen):
    patched = model(seen, "patched", "dflash1-no-aux")
    assert (patched["use_aux_hidden_state"], patched["fc"]) == (False, False)
    for tree in UNFIXED:
        unfixed = model(seen, tree, "dflash1-no-aux")
        assert (unfixed["use_aux_hidden_state"], unfixed["fc"]) == (True, True), tree


@pytest.mark.parametrize("draft", ["dflash1-mask", "dflash2-mask"])
def test_the_model_takes_a_mask_token_given_at_the_top_level(seen, draft):
    assert model(seen, "patched", draft)["mask_token_id"] == MASK_TOKEN_ID
    for tree in UNFIXED:
        assert model(seen, tree, draft)["mask_token_id"] is None, tree
