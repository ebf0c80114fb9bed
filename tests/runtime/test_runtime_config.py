"""vLLM's config layer with DFlash drafts: registry, engine config and runner
choice, layer causality, speculator selection, and the draft-logit buffer.

One probe per venv (venv_side/config_probe.py) makes every observation in a
fresh interpreter; the tests below each assert one property on the patched
venv and assert that the same property does not hold on the pristine one.
The pristine probe registers `DFlash2DraftModel` as an alias of the DFlash1
class after observing the registry, so the other edits are each shown to be
needed on their own, not just the registry entry.
"""

from __future__ import annotations

import json

import pytest

from dflash2_backport.verification.probes import check_registry
from tests.runtime.tiny_configs import DFLASH1_CAUSAL, DFLASH1_DRAFTS

pytestmark = pytest.mark.runtime

DFLASH2_MODULE = "vllm.model_executor.models.qwen3_dflash2"
DFLASH1_MODULE = "vllm.model_executor.models.qwen3_dflash"


@pytest.fixture(scope="module")
def probe(snippets, venvs, tiny_models):
    models = {k: str(v) for k, v in tiny_models.items()}
    names = list(venvs)
    code = "import sys, json, config_probe; config_probe.main(json.loads(sys.argv[1]))"
    results = snippets.run_many(
        [(venvs[name], code) for name in names], args=[json.dumps(models)]
    )
    return dict(zip(names, results))


def registry_violations(seen: dict) -> list[str]:
    """The registry judged as `dflash2-backport verify` judges it."""
    problem = check_registry(seen["registry"])
    return [] if problem is None else [problem]


def test_registry_resolves_dflash2_to_its_model_and_dflash1_as_before(probe):
    assert registry_violations(probe["patched"]) == []
    assert registry_violations(probe["pristine"]) == [
        "DFlash2DraftModel is not registered in vLLM's model registry"
    ]


def test_model_loader_lookup_builds_the_dflash2_model_for_a_dflash2_draft(probe):
    expected = {
        "dflash2": f"{DFLASH2_MODULE}.DFlash2Qwen3ForCausalLM",
        "dflash1-full": f"{DFLASH1_MODULE}.DFlashQwen3ForCausalLM",
    }
    assert probe["patched"]["resolved"] == expected
    # A registry alias alone would give a DFlash2 checkpoint the DFlash1 model.
    assert probe["pristine"]["resolved"] == {
        **expected, "dflash2": f"{DFLASH1_MODULE}.DFlashQwen3ForCausalLM"
    }


def test_dflash2_draft_engine_config_builds_on_patched_and_is_rejected_on_pristine(probe):
    assert probe["patched"]["dflash2_config_before_alias"] == {"ok": True, "value": True}

    rejected = probe["pristine"]["dflash2_config_before_alias"]
    assert not rejected["ok"]
    assert "DFlash2DraftModel" in rejected["error"]
    assert "not supported" in rejected["error"]


def v2_forcing_violations(seen: dict) -> list[str]:
    """A DFlash2 draft must select the V2 model runner even behind a target
    whose default is V1 (MoE), where only the draft can force it."""
    problems = []
    for target in ("moe-target", "target"):
        outcome = seen["runner"][f"{target}/dflash2"]
        if outcome != {"ok": True, "value": True}:
            problems.append(f"{target}/dflash2: {outcome.get('value', outcome.get('error'))}")
    return problems


def test_dflash2_draft_selects_the_v2_model_runner(probe):
    assert v2_forcing_violations(probe["patched"]) == []
    # With only a registry entry, 0.27.1 leaves a MoE target on V1, where the
    # DFlash2 checkpoint would silently draft as DFlash1.
    assert probe["pristine"]["registered_alias"] is True
    assert v2_forcing_violations(probe["pristine"]) == ["moe-target/dflash2: False"]


@pytest.mark.parametrize("draft", sorted(DFLASH1_DRAFTS))
@pytest.mark.parametrize("target", ["moe-target", "target"])
def test_dflash1_draft_keeps_the_runner_0_27_1_chooses(probe, target, draft):
    key = f"{target}/{draft}"
    assert probe["patched"]["runner"][key]["ok"], probe["patched"]["runner"][key]
    assert probe["patched"]["runner"][key] == probe["pristine"]["runner"][key]


def test_moe_target_defaults_to_v1_unless_a_draft_forces_v2(probe):
    """What makes the V2 check above able to fail: behind a dense target
    every draft gets V2 anyway."""
    for venv in ("pristine", "patched"):
        runner = probe[venv]["runner"]
        assert runner["moe-target/dflash1-full"] == {"ok": True, "value": False}
        # Mixed sliding/full layers: 0.27.1 forces V2 itself.
        assert runner["moe-target/dflash1-mixed"] == {"ok": True, "value": True}
        assert runner["target/dflash1-full"] == {"ok": True, "value": True}


def causality_violations(seen: dict) -> list[str]:
    problems = []
    if seen["causal"]["dflash2"] != [False] * len(seen["causal"]["dflash2"]):
        problems.append(f"dflash2 layers causal: {seen['causal']['dflash2']}")
    for draft, expected in DFLASH1_CAUSAL.items():
        if seen["causal"][draft] != expected:
            problems.append(f"{draft} layers causal: {seen['causal'][draft]} != {expected}")
    return problems


def test_dflash2_layers_are_non_causal_and_dflash1_answers_are_unchanged(probe):
    assert causality_violations(probe["patched"]) == []
    # 0.27.1 reads a DFlash2 config's all-sliding layers as causal...
    assert causality_violations(probe["pristine"]) == [
        "dflash2 layers causal: [True, True, True]"
    ]
    # ...and the DFlash1 answers are its own, not only the table's.
    for draft in DFLASH1_CAUSAL:
        assert probe["patched"]["causal"][draft] == probe["pristine"]["causal"][draft]


def dispatch_violations(seen: dict) -> list[str]:
    expected = {"dflash2": "DFlash2Speculator", "dflash1-full": "DFlashSpeculator"}
    return [
        f"{draft}: {seen['dispatch'][draft].get('value', seen['dispatch'][draft].get('error'))}"
        for draft, cls in expected.items()
        if seen["dispatch"][draft] != {"ok": True, "value": cls}
    ]


def test_init_speculator_builds_dflash2_speculator_for_dflash2_drafts_only(probe):
    assert dispatch_violations(probe["patched"]) == []
    # 0.27.1 hands a DFlash2 checkpoint to the DFlash1 speculator.
    assert dispatch_violations(probe["pristine"]) == ["dflash2: DFlashSpeculator"]


ZERO = {"dtype": "float32", "shape": [8, 3, 1000], "values": ["0.0"]}
NEG_INF = {"dtype": "float32", "shape": [8, 3, 1000], "values": ["-inf"]}
DRAFT_LOGITS = {
    "base/probabilistic": ZERO,
    "dflash1/probabilistic": ZERO,
    "neg-inf-subclass/probabilistic": NEG_INF,
    "dflash2/probabilistic": NEG_INF,
    "base/greedy": None,
    "dflash1/greedy": None,
    "neg-inf-subclass/greedy": None,
    "dflash2/greedy": None,
}


def draft_logits_violations(seen: dict, cases=DRAFT_LOGITS) -> list[str]:
    problems = []
    for case, expected in cases.items():
        outcome = seen["draft_logits"].get(case)
        if outcome is None:
            problems.append(f"{case}: not built")
        elif outcome != {"ok": True, "value": expected}:
            problems.append(f"{case}: {outcome.get('value', outcome.get('error'))}")
    return problems


def test_draft_logits_buffer_follows_the_speculators_spec(probe):
    assert draft_logits_violations(probe["patched"]) == []

    pristine_cases = {k: v for k, v in DRAFT_LOGITS.items() if not k.startswith("dflash2/")}
    assert draft_logits_violations(probe["pristine"], pristine_cases) == [
        f"neg-inf-subclass/probabilistic: {ZERO}"
    ]
