"""How `verify --gpu` judges what its two engines saw (gpu_probes.judge).

The engines themselves need a GPU (what they print is in docs/gpu.md); here
each case is an engine record of the shape gpu_probes.run_engine writes,
altered in one way, and the verdict it must give: which checks fail and
what their line says.
"""

from __future__ import annotations

import copy
import json

import pytest

from dflash2_backport.verification import gpu_probes

GREEDY = [[5, 6, 7, 8], [9, 10, 11, 12]]
BASE = {
    "seconds": {"import": 3.0, "start": 30.0, "introspect": 0.2, "greedy": 1.0},
    "errors": {},
    "engine": {"use_v2_model_runner": True, "cudagraph_mode": "FULL_AND_PIECEWISE",
               "compilation_mode": "VLLM_COMPILE"},
    "worker": {"speculators": {}, "model_runners": ["vllm.v1.worker.gpu.model_runner"],
               "draft_logits": None},
    "greedy": GREEDY,
    "counters": {},
    "done": True,
}
DRAFT = {
    **BASE,
    "seconds": {"import": 4.0, "start": 35.0, "introspect": 0.3, "greedy": 1.5,
                "kernels": 0.1},
    "worker": {"speculators": {"DFlash2Speculator": 1},
               "model_runners": ["vllm.v1.worker.gpu.model_runner"],
               "draft_logits": False},
    "counters": {"num_drafts": 40.0, "num_draft_tokens": 120.0,
                 "num_accepted_tokens": 30.0, "num_accepted_tokens_per_pos": [20, 7, 3]},
    "kernels": {"_selector_walk_kernel": 3, "_cache_draft_logits_kernel": 0},
    "attention": {"target": {"FLASH_ATTN (FlashAttention 3)": 2},
                  "draft": {"FLASH_ATTN (FlashAttention 3)": 1}},
}
CHECKS = ["engine", "speculator", "lossless", "counters", "kernels"]


def altered(record: dict, **changes) -> dict:
    """A deep copy with dotted keys replaced ("worker.speculators": {...});
    None removes the key."""
    record = copy.deepcopy(record)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        holder = record
        for key in parents:
            holder = holder[key]
        if value is None:
            holder.pop(leaf, None)
        else:
            holder[leaf] = value
    return record


PRISTINE_START = ("Model architectures ['DFlash2DraftModel'] are not supported for now")

# id -> (base, draft, synthetic, {failing check: words its line holds})
CASES = {
    "all good": (BASE, DRAFT, True, {}),
    "the draft engine does not start (vLLM as it ships)": (
        BASE,
        {"seconds": {"start": 4.0}, "errors": {"start": PRISTINE_START}},
        True,
        {"engine": f"the engine with the draft did not start: {PRISTINE_START}",
         "speculator": "not seen", "lossless": "with the draft: " + PRISTINE_START,
         "counters": "not read", "kernels": "not seen"},
    ),
    "vLLM does not import in the engine with the draft": (
        BASE,
        {"seconds": {"import": 0.1}, "errors": {"import": "ModuleNotFoundError: vllm"}},
        True,
        {"engine": "the engine with the draft did not start: ModuleNotFoundError: vllm",
         "speculator": "not seen", "lossless": "with the draft: ModuleNotFoundError",
         "counters": "not read", "kernels": "not seen"},
    ),
    "the engine without the draft does not start": (
        {"seconds": {"start": 4.0}, "errors": {"start": "CUDA out of memory"}},
        DRAFT, True,
        {"engine": "the engine without the draft did not start: CUDA out of memory",
         "lossless": "without the draft: CUDA out of memory"},
    ),
    "the V1 model runner": (
        BASE,
        altered(DRAFT, **{"engine.use_v2_model_runner": False,
                          "worker.model_runners": ["vllm.v1.worker.gpu_model_runner"]}),
        True,
        {"engine": "not configured for the V2 model runner"},
    ),
    "the V1 model runner built although V2 is configured": (
        BASE,
        altered(DRAFT, **{"worker.model_runners": ["vllm.v1.worker.gpu_model_runner"]}),
        True,
        {"engine": "runs ['vllm.v1.worker.gpu_model_runner'] model runner, not V2"},
    ),
    "the worker not seen": (
        BASE,
        altered(DRAFT, worker=None, errors={"introspect": "AttributeError: boom"}), True,
        {"engine": "its model runner not seen: AttributeError: boom",
         "speculator": "not seen: AttributeError: boom"},
    ),
    "no CUDA graphs": (
        BASE, altered(DRAFT, **{"engine.cudagraph_mode": "NONE"}), True,
        {"engine": "without CUDA graphs"},
    ),
    "the DFlash1 speculator": (
        BASE, altered(DRAFT, **{"worker.speculators": {"DFlashSpeculator": 1}}), True,
        {"speculator": "built {'DFlashSpeculator': 1}, want exactly one DFlash2Speculator"},
    ),
    "two DFlash2 speculators": (
        BASE, altered(DRAFT, **{"worker.speculators": {"DFlash2Speculator": 2}}), True,
        {"speculator": "built {'DFlash2Speculator': 2}"},
    ),
    "a speculator without a draft": (
        altered(BASE, **{"worker.speculators": {"DFlash2Speculator": 1}}), DRAFT, True,
        {"speculator": "the engine without the draft built {'DFlash2Speculator': 1}"},
    ),
    "greedy tokens differ": (
        BASE, altered(DRAFT, greedy=[[5, 6, 7, 8], [9, 10, 99, 12]]), True,
        {"lossless": "prompt 1 at token 2 (1 of 2 prompts equal)"},
    ),
    "an output missing": (
        BASE, altered(DRAFT, greedy=[[5, 6, 7, 8]]), True,
        {"lossless": "1 outputs with the draft, 2 without"},
    ),
    "no drafts counted": (
        BASE, altered(DRAFT, counters={"num_drafts": 0.0, "num_draft_tokens": 0.0}), True,
        {"counters": "no drafts counted"},
    ),
    "nothing accepted on checkpoints made to accept": (
        BASE, altered(DRAFT, **{"counters.num_accepted_tokens": 0.0}), True,
        {"counters": "no draft token accepted"},
    ),
    "nothing accepted on the user's checkpoints is reported, not failed": (
        BASE, altered(DRAFT, **{"counters.num_accepted_tokens": 0.0}), False, {},
    ),
    "no kernel compiled": (
        BASE, altered(DRAFT, kernels={"_selector_walk_kernel": 0,
                                      "_cache_draft_logits_kernel": 0}), True,
        {"kernels": "Triton kernels not compiled: ['_cache_draft_logits_kernel', "
                    "'_selector_walk_kernel']"},
    ),
    "the cache kernel unused although draft logits are cached": (
        BASE, altered(DRAFT, **{"worker.draft_logits": True}), True,
        {"kernels": "Triton kernels not compiled: ['_cache_draft_logits_kernel']"},
    ),
    "kernels as plain functions": (
        BASE, altered(DRAFT, kernels={}), True, {"kernels": "defines no Triton kernel"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_way_an_engine_falls_short_fails_its_own_check(case):
    base, draft, synthetic, failing = CASES[case]
    checks = gpu_probes.judge(base, draft, synthetic, together=True)
    assert [c["name"] for c in checks] == CHECKS
    assert {c["name"] for c in checks if not c["ok"]} == set(failing)
    for check in checks:
        if check["name"] in failing:
            assert failing[check["name"]] in check["detail"], check
    json.dumps(checks)


def test_passing_lines_carry_the_figures_and_each_phase_its_wall_time():
    checks = {c["name"]: c for c in gpu_probes.judge(BASE, DRAFT, True, together=True)}
    assert checks["engine"]["detail"] == (
        "V2 model runner, torch.compile (VLLM_COMPILE) and CUDA graphs "
        "(FULL_AND_PIECEWISE), with and without the draft (started together); "
        "attention: target FLASH_ATTN (FlashAttention 3), draft FLASH_ATTN "
        "(FlashAttention 3)"
    )
    assert checks["lossless"]["detail"] == (
        "greedy tokens with the draft equal those without: 2 prompts, 8 tokens"
    )
    assert checks["counters"]["detail"] == (
        "drafts 40, draft tokens 120, accepted 30: acceptance rate 0.25, "
        "mean acceptance length 1.75"
    )
    assert checks["kernels"]["detail"] == (
        "_cache_draft_logits_kernel not launched; _selector_walk_kernel compiled "
        "(3 variants) and launched (dflash2/speculator.py)"
    )
    # An engine's start is its import of vLLM and its build; engines started
    # together take the longer start, one after the other both.
    assert checks["engine"]["seconds"] == 39.0
    assert gpu_probes.judge(BASE, DRAFT, True, together=False)[0]["seconds"] == 72.0
    assert [checks[n]["seconds"] for n in CHECKS[1:]] == [0.3, 1.5, 0.0, 0.1]


@pytest.mark.parametrize(
    "config, steps",
    [
        ({"block_size": 8}, 7),
        ({"dflash_config": {"block_size": 4}}, 3),
        ({"block_size": 16, "dflash_config": {"mask_token_id": 1}}, 15),
    ],
)
def test_draft_tokens_per_step_come_from_the_drafts_block_size(tmp_path, config, steps):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert gpu_probes.num_speculative_tokens(tmp_path) == steps


@pytest.mark.parametrize("config", [{}, {"block_size": 1}, {"block_size": "8"}])
def test_a_draft_without_a_usable_block_size_is_refused(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="gives no block_size of 2 or more"):
        gpu_probes.num_speculative_tokens(tmp_path)


def test_prompts_for_a_users_checkpoints_stay_in_the_vocabulary(tmp_path):
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(json.dumps({"vocab_size": 500}))
    (draft / "config.json").write_text(json.dumps(
        {"block_size": 4, "dflash_config": {"mask_token_id": 300}}))
    prompts = gpu_probes.user_prompts(target, draft)
    assert len(prompts) == gpu_probes.USER_PROMPTS
    tokens = [t for p in prompts for t in p]
    assert min(tokens) >= 100 and max(tokens) < 500 and 300 not in tokens
    assert [len(p) for p in prompts][0] <= 16 and max(map(len, prompts)) <= 128
    assert prompts == gpu_probes.user_prompts(target, draft)


class _OddMeta(type):
    """A metaclass whose classes' __module__ is not a string (extension
    types do such things); the engine's heap holds such objects."""

    __module__ = property(lambda cls: object())


class _Odd(metaclass=_OddMeta):
    pass


def test_the_worker_heap_is_read_whatever_classes_it_holds():
    held = [_Odd(), _Odd]
    seen = gpu_probes.worker_introspect()
    assert seen == {"speculators": {}, "model_runners": [], "draft_logits": None}
    assert held


@pytest.mark.parametrize("engine_code, seconds, error", [
    # Still starting when the engines' time runs out: stopped, and said so.
    ("import time; print('compiling the top-k kernel', flush=True); time.sleep(60)", 3,
     "still running when the time for the engines ran out (3 s), so it was stopped; "
     "run `verify --gpu` again (a first start may build kernels for minutes). "
     "Its log ends: compiling the top-k kernel"),
    # A crash of its own: the error line of its log.
    ("print('RuntimeError: CUDA out of memory', flush=True); raise SystemExit(1)", 30,
     "RuntimeError: CUDA out of memory"),
])
def test_an_engine_that_does_not_finish_is_reported_by_what_stopped_it(
        tmp_path, engine_code, seconds, error):
    import time

    results = gpu_probes.run_engines(
        {"draft": {}}, tmp_path, engine_code, together=True,
        deadline=time.monotonic() + seconds)
    assert results["draft"]["errors"]["process"] == error


# -- bfloat16: a first difference must be a near-tie of the target's logits -----

# The plain engine's raw logits at each position of each prompt, its own token
# first: prompt 1 is where the cases below make the drafted run differ.
TOP = [
    [[[5, 12.0], [50, 3.0]]] * 4,
    [[[9, 12.0], [50, 3.0]], [[10, 12.0], [50, 3.0]], [[11, 10.0], [99, 9.9], [98, 9.0]],
     [[12, 12.0], [50, 3.0]]],
]
BF16_BASE = {**BASE, "top_logits": TOP}

# id -> (the drafted run's greedy tokens, exact, None or words of the failure,
#        words of the passing line)
LOSSLESS_CASES = {
    "bf16, equal outputs": (GREEDY, False, None, "2 of 2 prompts give the plain run's"),
    "bf16, apart by 0.1 where 1/32 of 10 allows 0.3125": (
        [[5, 6, 7, 8], [9, 10, 99, 40]], False, None,
        "1 of 2 prompts give the plain run's greedy tokens with the draft (8 tokens); "
        "1 part from it at near-ties of the target's logits (at most 0.1 apart"),
    "bf16, apart by 1.0, more than 0.3125": (
        [[5, 6, 7, 8], [9, 10, 98, 12]], False,
        "prompt 1 at token 2: the draft's run chose 98 where the plain one chose 11, "
        "1 below it in the plain run's logits, more than a near-tie's 0.312", None),
    "bf16, a token outside the plain run's top logits": (
        [[5, 6, 7, 8], [9, 10, 77, 12]], False,
        "chose 77 where the plain one chose 11, not among the plain run's 5 most "
        "likely tokens there", None),
    "bf16, one output cut short": (
        [[5, 6, 7, 8], [9, 10]], False, "prompt 1: 2 tokens with the draft, 4 without", None),
    "float32 holds even a near-tie to equality": (
        [[5, 6, 7, 8], [9, 10, 99, 40]], True, "prompt 1 at token 2 (1 of 2 prompts equal)",
        None),
}


@pytest.mark.parametrize("case", list(LOSSLESS_CASES))
def test_lossless_is_exact_in_float32_and_a_near_tie_in_bfloat16(case):
    speculated, exact, failure, passing = LOSSLESS_CASES[case]
    checks = {c["name"]: c for c in gpu_probes.judge(
        BF16_BASE, altered(DRAFT, greedy=speculated), True, together=True, exact=exact)}
    lossless = checks["lossless"]
    assert lossless["ok"] is (failure is None), lossless
    assert (failure or passing) in lossless["detail"]


# -- drafting accepts what the small checkpoints make likely --------------------

CYCLE = [100, 101, 102, 103]


@pytest.mark.parametrize("prompts, outputs, steps, likely", [
    # A full step after the cycle token ending the prompt, none after 100 -> 7.
    ([[5, 100]], [[101, 102, 103, 100, 7, 8]], 3, 3),
    # Nothing after a token outside the cycle; one after 100, then 9 breaks it.
    ([[5]], [[100, 101, 9]], 3, 1),
    # Two full steps: the token after each step's last accepted one is its
    # bonus token, not drafted.
    ([[103]], [[100, 101, 102, 103, 100, 101, 102]], 3, 6),
    # Steps of one draft token.
    ([[103]], [[100, 101, 102]], 1, 2),
    # Prompts add up.
    ([[5, 100], [5]], [[101, 102, 103, 100, 7, 8], [100, 101, 9]], 3, 4),
])
def test_likely_accepted_counts_what_a_drafter_continuing_the_cycle_gets(
        prompts, outputs, steps, likely):
    assert gpu_probes.likely_accepted(prompts, outputs, steps, CYCLE) == likely


@pytest.mark.parametrize("accepted, likely, ok", [
    (30.0, 60, True), (29.0, 60, False), (30.0, None, True), (1.0, 0, True),
])
def test_the_small_checkpoints_fail_on_fewer_than_half_the_likely_acceptances(
        accepted, likely, ok):
    record = altered(DRAFT, **{"counters.num_accepted_tokens": accepted})
    counters = gpu_probes.judge(BASE, record, True, together=True, likely=likely)[3]
    assert counters["ok"] is ok, counters
    if not ok:
        assert counters["detail"].endswith("fewer than 50% of the 60 these checkpoints "
                                           "make likely")


# -- what the engines are started with, and what they report ----------------------


class _Backend:
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


class _Layer:
    def __init__(self, backend, flash_attn_version=None):
        self.attn_backend = _Backend(backend)
        self.impl = type("Impl", (), {"vllm_flash_attn_version": flash_attn_version})()


def _worker(layers, draft_names):
    speculator = type("Speculator", (), {"draft_attn_layer_names": set(draft_names)})()
    runner = type("Runner", (), {"speculator": speculator})()
    compilation = type("Compilation", (), {"static_forward_context": layers})()
    config = type("Config", (), {"compilation_config": compilation})()
    return type("Worker", (), {"vllm_config": config, "model_runner": runner})()


def test_attention_backends_are_read_per_layer_the_drafts_apart():
    layers = {
        "model.layers.0.self_attn.attn": _Layer("FLASH_ATTN", 3),
        "model.layers.1.self_attn.attn": _Layer("FLASH_ATTN", 3),
        "model.layers.2.self_attn.attn": _Layer("TRITON_ATTN"),
        "model.layers.0.mlp": object(),
    }
    found = gpu_probes.worker_attention(_worker(layers, ["model.layers.2.self_attn.attn"]))
    assert found == {"target": {"FLASH_ATTN (FlashAttention 3)": 2},
                     "draft": {"TRITON_ATTN": 1}}
    line = gpu_probes.attention_line({"attention": found})
    assert line == "attention: target FLASH_ATTN (FlashAttention 3), draft TRITON_ATTN"
    assert gpu_probes.attention_line({}) == "attention: target not seen, draft not seen"


@pytest.mark.parametrize("config, dtype", [
    ({"torch_dtype": "bfloat16"}, "bfloat16"),
    ({"dtype": "float32"}, "float32"),
    ({"torch_dtype": "float16"}, "float16"),
    ({}, "bfloat16"),
    ({"torch_dtype": "float64"}, "bfloat16"),
])
def test_a_users_target_runs_in_the_dtype_it_declares(tmp_path, config, dtype):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert gpu_probes.declared_dtype(tmp_path) == dtype


def test_the_plain_engine_returns_raw_logits_where_the_run_is_not_exact():
    spec = {"target": "/t", "dtype": "bfloat16", "max_num_seqs": 4, "draft": None,
            "top_logits": 5}
    assert gpu_probes.engine_kwargs(spec) == {
        "model": "/t", "dtype": "bfloat16", "skip_tokenizer_init": True, "seed": 0,
        "max_num_seqs": 4, "disable_log_stats": False, "logprobs_mode": "raw_logits",
        "max_logprobs": 5}
    exact = gpu_probes.engine_kwargs({**spec, "dtype": "float32", "top_logits": None})
    assert exact["dtype"] == "float32" and "logprobs_mode" not in exact


VLLM_A = {"version": "0.27.1", "package": "/a/vllm"}
VLLM_B = {"version": "0.27.1", "package": "/b/vllm"}


@pytest.mark.parametrize("results, expected", [
    ({"base": {"vllm": VLLM_B}, "draft": {"vllm": VLLM_A}}, VLLM_A),
    ({"base": {"vllm": VLLM_B}, "draft": {"errors": {"import": "boom"}}}, VLLM_B),
])
def test_the_vllm_named_is_the_one_the_engines_imported(results, expected):
    assert gpu_probes.imported_vllm(results) == expected
