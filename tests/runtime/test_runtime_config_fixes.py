"""The upstream fixes the backport carries, in the config layer of vLLM
0.27.1 and of 0.26.0: a DFlash draft shorter than the target is raised or
caps the target, DFlash2's compile-cache key counts its speculative tokens,
and what the backport cannot serve is refused in one line.

One probe per venv (venv_side/fixes_probe.py) observes everything in a
fresh interpreter of the release as it ships, patched by `apply --only-pr` (the
DFlash2 PR's edits alone) and patched by `apply`. Each test asserts its
property on the last and that it does not hold on the other two.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.runtime.tiny_configs import DFLASH1_DRAFTS, DFLASH2_DRAFT, TARGET

pytestmark = pytest.mark.runtime

UNFIXED = ("pristine", "only-pr")
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
DFLASH1 = DFLASH1_DRAFTS["dflash1-full"]
EAGLE3 = {
    **TARGET,
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "num_hidden_layers": 1,
    "draft_vocab_size": TARGET["vocab_size"],
}


def _with_dflash(draft: dict, **keys) -> dict:
    return {**draft, "dflash_config": {**draft["dflash_config"], **keys}}


def _models() -> dict[str, dict]:
    """A target served at 8192 positions, drafts of 2048 (default RoPE, and
    yarn, which derives its cache from its length), and the inputs the
    backport refuses with their DFlash1 counterparts."""
    speculators = {
        "speculators_model_type": "dflash2",
        "speculators_config": {
            "proposal_methods": [{"proposal_type": "dflash2", "speculative_tokens": 3}],
            "verifier": {"name_or_path": "VERIFIER", "architectures": TARGET["architectures"]},
        },
        "transformer_layer_config": {
            k: v for k, v in DFLASH2_DRAFT.items() if k != "architectures"
        },
        "architectures": DFLASH2_DRAFT["architectures"],
    }
    return {
        "target-8k": {**TARGET, "max_position_embeddings": 8192},
        "dflash2": DFLASH2_DRAFT,
        "dflash2-yarn": {**DFLASH2_DRAFT, "rope_scaling": YARN},
        "dflash1": DFLASH1,
        "dflash1-yarn": {**DFLASH1, "rope_scaling": YARN},
        "eagle3-yarn": {**EAGLE3, "rope_scaling": YARN},
        "dflash2-fp8": {**DFLASH2_DRAFT, "quantization_config": {"quant_method": "fp8"}},
        "dflash1-fp8": {**DFLASH1, "quantization_config": {"quant_method": "fp8"}},
        "dflash2-vocab-1200": {**DFLASH2_DRAFT, "vocab_size": 1200},
        "dflash2-vocab-800": {**DFLASH2_DRAFT, "vocab_size": 800},
        "dflash2-reduced-vocab": {**DFLASH2_DRAFT, "draft_vocab_size": 500},
        "dflash1-vocab-1200": {**DFLASH1, "vocab_size": 1200},
        "dflash2-value-scale": _with_dflash(DFLASH2_DRAFT, attention_value_scale=0.5),
        "dflash2-value-scale-1": _with_dflash(DFLASH2_DRAFT, attention_value_scale=1.0),
        "dflash1-value-scale": _with_dflash(DFLASH1, attention_value_scale=0.5),
        "dflash2-not-neox": {**DFLASH2_DRAFT, "is_neox_style": False},
        "dflash1-not-neox": {**DFLASH1, "is_neox_style": False},
        "speculators-dflash2": speculators,
    }


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fix-models")
    paths = {}
    for name, config in _models().items():
        config = copy.deepcopy(config)
        if "speculators_config" in config:
            config["speculators_config"]["verifier"]["name_or_path"] = str(root / "target-8k")
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config, indent=2))
        paths[name] = str(root / name)
    return paths


@pytest.fixture(scope="module")
def seen(snippets, edit_set_pythons, models) -> dict[str, dict]:
    code = "import sys, json, fixes_probe; fixes_probe.main(json.loads(sys.argv[1]))"
    names = list(edit_set_pythons)
    results = snippets.run_many(
        [(edit_set_pythons[name], code) for name in names], args=[json.dumps(models)]
    )
    return dict(zip(names, results))


def test_the_venvs_are_the_three_trees(seen) -> None:
    # Only 0.27.1 as it ships lacks the DFlash2 registry entry.
    assert {name: result["alias"] for name, result in seen.items()} == {
        "pristine": True, "only-pr": False, "patched": False,
    }


# -- the draft's max_position_embeddings --------------------------------------------

#: (draft max_position_embeddings, target max_model_len) for a target served
#: at 8192 positions with a draft of 2048: what 0.27.1 leaves, and what
#: vLLM 0.33.0's fix makes of a DFlash draft.
LEFT = [2048, 8192]
RAISED = [8192, 8192]
CAPPED = [2048, 2048]


def _positions(result: dict, draft: str) -> list:
    outcome = result["positions"][draft]
    assert outcome["ok"], outcome
    return outcome["value"]


@pytest.mark.parametrize("draft", ["dflash2", "dflash1"])
def test_a_shorter_dflash_draft_with_default_rope_is_raised_to_the_target(seen, draft) -> None:
    assert _positions(seen["patched"], draft) == RAISED
    for name in UNFIXED:
        assert _positions(seen[name], draft) == LEFT, name


@pytest.mark.parametrize("draft", ["dflash2-yarn", "dflash1-yarn"])
def test_a_shorter_dflash_draft_with_yarn_caps_the_target_max_model_len(seen, draft) -> None:
    assert _positions(seen["patched"], draft) == CAPPED
    for name in UNFIXED:
        assert _positions(seen[name], draft) == LEFT, name


def test_an_eagle_draft_is_left_as_the_release_leaves_it(seen, edit_set_release) -> None:
    """0.27.x raises it whatever its RoPE (unlike 0.33.0, which would cap the
    target for a yarn EAGLE draft); 0.26.0 raises no draft, and the backport
    raises only DFlash drafts there."""
    expected = LEFT if edit_set_release == "0.26.0" else RAISED
    for name in seen:
        assert _positions(seen[name], "eagle3-yarn") == expected, name


# -- the compile-cache key -----------------------------------------------------------


def _hash(result: dict, key: str) -> str:
    outcome = result["hashes"][key]
    assert outcome["ok"], outcome
    return outcome["value"]


def test_the_compile_cache_key_differs_between_k3_and_k7_for_a_dflash2_draft(seen) -> None:
    patched = seen["patched"]
    assert _hash(patched, "dflash2/k3") != _hash(patched, "dflash2/k7")
    for name in UNFIXED:
        assert _hash(seen[name], "dflash2/k3") == _hash(seen[name], "dflash2/k7"), name


def test_a_dflash1_draft_keeps_0_27_1_s_keys(seen) -> None:
    for name in seen:
        assert _hash(seen[name], "dflash1/k3") == _hash(seen[name], "dflash1/k7"), name
    # Byte for byte 0.27.1's: applying the backport recompiles no DFlash1 graph.
    assert {_hash(seen[name], "dflash1/speculative") for name in seen} == {
        _hash(seen["pristine"], "dflash1/speculative")
    }


# -- refusals --------------------------------------------------------------------------

#: The input, and what its one line must name: the limit and the release.
REFUSED = {
    "dflash2-fp8": ("is quantized (fp8)", "vLLM 0.31.0 is the first release"),
    "dflash2-vocab-1200": ("has a vocabulary of 1200 tokens and the target 1000",
                           "vLLM 0.34.0 serves only a draft vocabulary no larger"),
    "dflash2-vocab-800": ("has a vocabulary of 800 tokens and the target 1000",
                          "vLLM 0.34.0 is the first release"),
    "dflash2-reduced-vocab": ("(draft_vocab_size 500 of 1000)", "through 0.34.0"),
    "dflash2-value-scale": ("sets dflash_config.attention_value_scale (0.5)",
                            "vLLM 0.31.0 is the first release"),
    "dflash2-not-neox": ("sets is_neox_style (False)", "vLLM 0.29.0 is the first release"),
    "speculators-as-model": ("Speculators-format dflash2", "vLLM 0.29.0 is the first release"),
    "speculators-as-draft": ("Speculators-format dflash2", "vLLM 0.29.0 is the first release"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_the_backport_cannot_serve_is_refused_in_one_line(seen, case) -> None:
    outcome = seen["patched"]["refusals"][case]
    assert not outcome["ok"]
    kind, _, message = outcome["error"].partition(": ")
    assert kind == "NotImplementedError"
    assert "\n" not in message
    assert "this DFlash2 backport to vLLM 0.27.1" in message
    limit, release = REFUSED[case]
    assert limit in message and release in message
    for name in UNFIXED:
        other = seen[name]["refusals"][case]
        # Built, or refused in other words: pydantic's, or the registry's.
        assert other["ok"] or "this DFlash2 backport" not in other["error"], (name, other)


@pytest.mark.parametrize("case", ["dflash1-fp8", "dflash1-vocab-1200", "dflash1-value-scale",
                                  "dflash1-not-neox", "dflash2-value-scale-1"])
def test_dflash1_drafts_and_a_value_scale_of_1_are_not_refused(seen, case) -> None:
    for name in seen:
        assert seen[name]["refusals"][case]["ok"], (name, seen[name]["refusals"][case])


@pytest.mark.parametrize("case", ["dflash2-pp2", "dflash1-pp2"])
def test_a_dflash_draft_with_pipeline_parallelism_is_refused_in_one_line_by_the_release(
    seen, case
) -> None:
    """Nothing to carry: the release itself verifies the draft with the
    target's pipeline stages (0.30.0 gives the draft one), and its DFlash
    model does not support them, so the config is refused before any
    worker starts; the target alone with two stages is built."""
    for name in seen:
        outcome = seen[name]["refusals"][case]
        assert not outcome["ok"], (name, outcome)
        assert outcome["error"].startswith(
            "NotImplementedError: Pipeline parallelism is not supported for this model."
        ), (name, outcome)
        assert "\n" not in outcome["error"]
        assert seen[name]["refusals"]["target-pp2"]["ok"], (name, seen[name]["refusals"])
