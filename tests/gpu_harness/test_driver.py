"""The GPU driver's pure logic, on the CPU: configuration names, the engines'
arguments, which runs are held against which, and how a crashed engine is
reported (scripts/gpu/driver.py; the engines themselves run on a GPU)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
np = pytest.importorskip("numpy")


def _load_driver():
    spec = importlib.util.spec_from_file_location(
        "gpu_driver", ROOT / "scripts" / "gpu" / "driver.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_driver"] = module
    spec.loader.exec_module(module)
    return module


driver = _load_driver()
from dflash2_backport.verification import checkpoints  # noqa: E402

MODELS = {"target": "T", "dflash2": "D2", "dflash1": "D1", "dflash2_swa": "SWA",
          "dflash2_short": "SHORT", "dflash2_spread": "SPREAD", "prompts": "P"}

CONFIGS = {
    "dflash2_graph": dict(tree="closure", variant=None, draft="dflash2", eager=False),
    "pr_dflash2_swa_graph": dict(tree="pr", variant="swa", draft="dflash2", eager=False),
    "new_base_longctx_graph": dict(tree="new", variant="longctx", draft=None),
    "up_prod_dflash2_eager": dict(tree="up", shape="prod", version="0.28.0"),
    "pr_base_eager": dict(tree="pr", version="0.27.1 --only-pr", draft=None, eager=True),
    "tp2_pr_dflash2_eager": dict(tree="pr", tp=2, executor="mp"),
    "base_prob_graph": dict(tree="closure", variant="prob", draft=None),
    "tput_up_dflash2": dict(tree="up", role="throughput", shape="prod"),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_a_configuration_name_says_its_tree_variant_and_mode(name):
    config = driver.config_of(name)
    assert {k: config[k] for k in CONFIGS[name]} == CONFIGS[name]


@pytest.mark.parametrize("name", [
    "dflash1_swa_eager",        # the variants are DFlash2 drafts
    "prod_dflash2_swa_graph",   # written at the tiny shape only
    "tput_dflash2_swa",         # not throughput engines
    "dflash2_swa",              # eager or graph?
    "pr_up_base_eager",         # one tree
    "dflash2_graph_swa",        # the variant comes before the mode
])
def test_names_the_driver_cannot_run_are_refused(name):
    with pytest.raises(ValueError):
        driver.config_of(name)


ENGINES = {
    # name: (max_model_len, draft checkpoint, draft_sample_method)
    "dflash2_graph": (512, "D2", None),
    "pr_dflash2_swa_graph": (512, "SWA", None),
    "dflash2_longctx_graph": (2048, "SHORT", None),
    "base_longctx_graph": (2048, None, None),
    "new_dflash2_prob_graph": (512, "SPREAD", "probabilistic"),
    "base_prob_graph": (512, None, None),
}


@pytest.mark.parametrize("name", ENGINES)
def test_each_configuration_builds_its_engine_arguments(name):
    kwargs = driver.engine_kwargs(driver.config_of(name), MODELS)
    speculative = kwargs.get("speculative_config", {})
    seen = (kwargs["max_model_len"], speculative.get("model"),
            speculative.get("draft_sample_method"))
    assert seen == ENGINES[name]
    assert kwargs["gpu_memory_utilization"] <= 0.1


def test_every_configuration_of_the_closure_preset_builds():
    names = driver.config_names("closure")
    assert len(names) == len(set(names))
    trees = {driver.config_of(n)["tree"] for n in names}
    variants = {driver.config_of(n)["variant"] for n in names}
    assert trees == {"closure", "pr", "up", "new"}
    assert variants == {None, "swa", "longctx", "prob"}
    for name in names:
        driver.engine_kwargs(driver.config_of(name), MODELS)
        if driver.config_of(name)["draft"]:
            assert driver.base_of(name, names)[0] in names, name


@pytest.mark.parametrize("spec, names", [
    ("closure,base_eager", None),
    ("base_eager,dflash2_eager,base_eager", ["base_eager", "dflash2_eager"]),
    ("", []),
    ("closure-variants,closure-plain,closure", "closure, reordered"),
])
def test_presets_and_names_mix_and_each_runs_once(spec, names):
    got = driver.config_names(spec)
    if names is None:
        assert got == driver.CLOSURE_CONFIGS
    elif names == "closure, reordered":
        assert sorted(got) == sorted(driver.CLOSURE_CONFIGS)
        assert len(got) == len(driver.CLOSURE_CONFIGS) == 31
    else:
        assert got == names


BASES = [
    # (engine, the runs there are, expected base, same target code)
    ("pr_dflash2_swa_graph", ["base_swa_graph"], "base_swa_graph", True),
    ("up_dflash2_swa_graph", ["base_swa_graph"], "base_swa_graph", False),
    ("up_dflash2_swa_graph", ["base_swa_graph", "up_base_swa_graph"],
     "up_base_swa_graph", True),
    ("dflash2_prob_graph", ["base_graph", "base_prob_graph"], "base_prob_graph", True),
    ("dflash2_swa_eager", ["base_swa_graph"], None, False),
    ("prod_dflash2_eager", ["prod_base_eager", "base_eager"], "prod_base_eager", True),
    ("base_swa_graph", ["base_swa_graph"], None, False),
]


@pytest.mark.parametrize("name, available, base, same", BASES)
def test_a_draft_is_held_against_the_base_run_of_its_own_inputs(name, available, base,
                                                                 same):
    assert driver.base_of(name, available) == (base, same)


def test_twins_pair_pr_with_upstream_and_the_closure_with_the_newest():
    names = ["dflash2_graph", "pr_dflash2_graph", "up_dflash2_graph",
             "new_dflash2_graph", "pr_dflash2_swa_graph", "up_dflash2_swa_graph",
             "dflash2_swa_graph",
             "dflash2_prob_graph", "up_dflash2_prob_graph", "tp2_base_eager",
             "tp2_up_base_eager", "tput_dflash2", "tput_up_dflash2"]
    pairs = {(a, b): why is None for a, b, why in driver.twins(names)}
    assert pairs == {
        ("pr_dflash2_graph", "up_dflash2_graph"): True,
        ("pr_dflash2_swa_graph", "up_dflash2_swa_graph"): False,
        ("dflash2_graph", "new_dflash2_graph"): True,
        ("up_dflash2_graph", "dflash2_graph"): True,
        ("up_dflash2_swa_graph", "dflash2_swa_graph"): False,
        ("up_dflash2_prob_graph", "dflash2_prob_graph"): False,
        ("tp2_up_base_eager", "tp2_base_eager"): True,
    }


OUTCOMES = [
    ({"errors": {}}, "completed"),
    ({"error": "exit -6: CUDA error: an illegal memory access was encountered"},
     "crashed"),
    ({"errors": {"greedy": "Traceback ...\nRuntimeError: CUDA error: an illegal "
                           "memory access was encountered"}}, "crashed"),
    ({"errors": {"startup": "Traceback ...\nValueError: max_model_len 2048 exceeds "
                            "the draft's 256"}, }, "refused"),
    ({"errors": {"T0.7": "Traceback ...\nKeyError: 'x'"}}, "failed"),
    ({"errors": {"process": "exit -11; the phases above it were saved; Fatal Python "
                            "error"}}, "crashed"),
]


@pytest.mark.parametrize("result, state", OUTCOMES)
def test_what_became_of_an_engine(result, state):
    seen, detail = driver.outcome(result)
    assert seen == state
    if state != "completed":
        assert detail


def test_a_log_tail_keeps_the_last_lines_that_say_something():
    log = "start\n  File 'x', line 1\n    call()\n    ^^^^\n\nRuntimeError: boom\n\n"
    assert driver.log_tail(log, 2) == "start | RuntimeError: boom"


@pytest.mark.parametrize("metadata, version", [
    ("Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n", "0.34.0"),
    (None, None),
])
def test_the_newest_tree_is_labelled_by_its_metadata(tmp_path, metadata, version):
    if metadata is not None:
        info = tmp_path / f"vllm-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(metadata)
    assert driver.newest_version(str(tmp_path)) == version


# --------------------------------------------------------------------------
# The summary, on engine results as run_engine and _collect write them
# --------------------------------------------------------------------------

GREEDY = [[5, 6, 7], [8, 9, 10]]
COUNTERS = {"num_drafts": 4.0, "num_draft_tokens": 12.0, "num_accepted_tokens": 5.0,
            "num_accepted_tokens_per_pos": [3.0, 1.0, 1.0]}


def engine(name: str, greedy=GREEDY, **extra) -> dict:
    config = driver.config_of(name)
    ours = config["tree"] not in driver.UPSTREAM_TREES
    result = {k: config[k] for k in ("draft", "version", "tree", "variant", "role")}
    speculators = {"dflash2": {"DFlash2Speculator": 1}}.get(config["draft"], {})
    result.update(
        errors={}, greedy=greedy, model_runners=["vllm.v1.worker.gpu.model_runner"],
        modules={"m": {"this_tool": ours}}, workers=[{"speculators": speculators}])
    if config["draft"]:
        result["counters_greedy"] = COUNTERS
    result.update(extra)
    return result


CRASH = {"error": "exit -6: RuntimeError: CUDA error: an illegal memory access was "
                  "encountered", "draft": "dflash2", "tree": "pr", "variant": "longctx"}

SUMMARIES = [
    # (results, checks that must be there with their verdict, whole run passes)
    ("a crash the only-pr tree is known for is reported, not judged",
     {"base_longctx_graph": engine("base_longctx_graph"),
      "dflash2_longctx_graph": engine("dflash2_longctx_graph"),
      "pr_dflash2_longctx_graph": CRASH},
     {"greedy dflash2_longctx_graph == base_longctx_graph": True,
      "pr_dflash2_longctx_graph: crashed (info)": None}, True),
    ("the same crash on the closure fails the run",
     {"base_longctx_graph": engine("base_longctx_graph"),
      "dflash2_longctx_graph": {**CRASH, "tree": "closure"}},
     {"dflash2_longctx_graph: engine crashed": False}, False),
    ("one token off is not identity",
     {"base_swa_graph": engine("base_swa_graph"),
      "dflash2_swa_graph": engine("dflash2_swa_graph", greedy=[[5, 6, 7], [8, 9, 1]])},
     {"greedy dflash2_swa_graph == base_swa_graph": False}, False),
    ("more prompts than the base ran is not identity",
     {"base_swa_graph": engine("base_swa_graph"),
      "dflash2_swa_graph": engine("dflash2_swa_graph", greedy=[*GREEDY, [1, 2]])},
     {"greedy dflash2_swa_graph == base_swa_graph": False}, False),
    ("the PR alone against 0.28.0 is judged, the closure against the newest too",
     {"pr_dflash2_graph": engine("pr_dflash2_graph"),
      "up_dflash2_graph": engine("up_dflash2_graph", greedy=[[5, 6, 7], [8, 9, 11]]),
      "dflash2_graph": engine("dflash2_graph"),
      "new_dflash2_graph": engine("new_dflash2_graph")},
     {"pr_dflash2_graph == up_dflash2_graph": False,
      "dflash2_graph ~ new_dflash2_graph": True,
      "up_dflash2_graph == dflash2_graph": False}, False),
    ("0.28.0 against the closure's sliding-window draft before it is reported when "
     "the PR alone differs",
     {"pr_dflash2_swa_graph": engine("pr_dflash2_swa_graph", greedy=[[1]]),
      "up_dflash2_swa_graph": engine("up_dflash2_swa_graph"),
      "base_swa_graph": engine("base_swa_graph")},
     {"pr_dflash2_swa_graph == up_dflash2_swa_graph (info)": None,
      "greedy pr_dflash2_swa_graph == base_swa_graph": False,
      "info: greedy up_dflash2_swa_graph vs base_swa_graph": None}, False),
    ("the sliding-window counters are set side by side across trees",
     {"dflash2_swa_graph": engine("dflash2_swa_graph"),
      "pr_dflash2_swa_graph": engine("pr_dflash2_swa_graph")},
     {"dflash2_swa_graph counters (greedy) by tree (info)": None}, True),
    ("in bfloat16 a variant's greedy tokens are reported, not judged",
     {"base_swa_graph_bf16": engine("base_swa_graph_bf16"),
      "dflash2_swa_graph_bf16": engine("dflash2_swa_graph_bf16",
                                       greedy=[[5, 6, 7], [8, 9, 1]])},
     {"info: greedy dflash2_swa_graph_bf16 vs base_swa_graph_bf16": None}, True),
    ("a bfloat16 server is held to the bfloat16 offline draft, the target alone reported",
     {"dflash2_eager_bf16": engine("dflash2_eager_bf16"),
      "base_eager_bf16": engine("base_eager_bf16", greedy=[[5, 6, 7], [8, 9, 1]]),
      "serve": {"dtype": "bfloat16", "errors": {}, "greedy": GREEDY,
                "counters_greedy": COUNTERS}},
     {"serve greedy == offline dflash2_eager_bf16": True,
      "info: serve greedy vs offline base_eager_bf16": None}, True),
    ("a bfloat16 server that differs from the bfloat16 offline draft fails",
     {"dflash2_eager_bf16": engine("dflash2_eager_bf16"),
      "serve": {"dtype": "bfloat16", "errors": {}, "greedy": [[5, 6, 7], [8, 9, 1]],
                "counters_greedy": COUNTERS}},
     {"serve greedy == offline dflash2_eager_bf16": False}, False),
    ("each engine names the attention backend its layers run",
     {"dflash2_eager_bf16": engine("dflash2_eager_bf16", attention={
         "model.layers.0.self_attn.attn": "FLASH_ATTN (FA3)"})},
     {"info: dflash2_eager_bf16: attention backend by layer": None}, True),
    ("a tree that refused at start fails the run",
     {"new_dflash2_graph": {"draft": "dflash2", "tree": "new", "errors": {
         "startup": "Traceback\nValueError: no DFlash2"}, "error": "exit 1: x"}},
     {"new_dflash2_graph: engine refused": False}, False),
]


@pytest.mark.parametrize("case", SUMMARIES, ids=[c[0] for c in SUMMARIES])
def test_the_summary_judges_and_reports(case, capsys):
    _, results, expected, passes = case
    checks, ok = driver.summarize(results)
    for key, verdict in expected.items():
        if key.startswith("info: "):
            assert f"{key[6:]} (info)" in checks, sorted(checks)
            continue
        assert key in checks, sorted(checks)
        assert checks[key].get("pass") == verdict, checks[key]
    assert ok is passes


# --------------------------------------------------------------------------
# The checkpoints the new configurations run on
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    paths = checkpoints.write_models(out, "tiny")
    return {name: Path(path) for name, path in paths.items()}


def _config(tiny, name):
    return json.loads((tiny[name] / "config.json").read_text())


@pytest.mark.parametrize("name, field, value", [
    ("dflash2_swa", "layer_types", ["sliding_attention"]),
    ("dflash2_swa", "sliding_window", 16),
    ("dflash2_swa", "is_causal", False),
    ("dflash2_short", "max_position_embeddings", 256),
    ("dflash2_spread", "max_position_embeddings", 2048),
    ("target", "max_position_embeddings", 2048),
])
def test_the_variant_drafts_differ_from_dflash2_where_they_say(tiny, name, field, value):
    assert _config(tiny, name)[field] == value


def test_only_the_spread_draft_has_other_weights(tiny):
    def weights(name):
        return (tiny[name] / "model.safetensors").read_bytes()

    assert weights("dflash2_swa") == weights("dflash2") == weights("dflash2_short")
    assert weights("dflash2_spread") != weights("dflash2")


def test_the_variants_inputs_pass_the_draft_limits_and_fit_the_target(tiny):
    prompts = json.loads(tiny["prompts"].read_text())
    window = _config(tiny, "dflash2_swa")["sliding_window"]
    limit = _config(tiny, "dflash2_short")["max_position_embeddings"]
    swa, longctx = driver.VARIANTS["swa"], driver.VARIANTS["longctx"]
    assert min(map(len, prompts[swa["greedy"]])) >= 3 * window
    assert len(prompts[swa["sampled"]]) >= 3 * window
    assert min(map(len, prompts[longctx["greedy"]])) > limit
    for variant in (swa, longctx):
        longest = max(map(len, prompts[variant["greedy"]])) + variant["greedy_tokens"]
        assert longest <= variant["max_model_len"]


def test_the_plain_prompts_stay_as_they_were(tiny):
    # Results of earlier runs stay comparable: the digest of the greedy,
    # sampled and bench prompts of seed 0 as the writer drew them before the
    # variants' prompts were added.
    prompts = json.loads(tiny["prompts"].read_text())
    plain = {k: prompts[k] for k in ("greedy", "sampled", "bench")}
    digest = hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()
    assert digest == "1e5a8e342d5eb1a4c1c93c8d3732ac7c2e114d42f73640fe55376b71b9d9febc"


# --------------------------------------------------------------------------
# The orchestrator, with a stand-in for vLLM in each tree
# --------------------------------------------------------------------------

FAKE_VLLM = {
    "vllm/__init__.py": '''
__version__ = "0.27.1"
import os
from types import SimpleNamespace

from torch.nn import Module
from vllm.model_executor.models import qwen3_dflash2  # noqa: F401
from vllm.v1.worker.gpu.model_runner import GPUModelRunner
from vllm.v1.worker.gpu.spec_decode.dflash2.speculator import DFlash2Speculator

FAULT = os.environ.get("FAKE_VLLM_FAULT", "")


class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class FlashAttentionBackend:
    @staticmethod
    def get_name():
        return "FLASH_ATTN"


class TopKTopPSampler(Module):
    # As vLLM's on CUDA: FlashInfer's path unless VLLM_USE_FLASHINFER_SAMPLER=0.
    def __init__(self):
        off = os.environ.get("VLLM_USE_FLASHINFER_SAMPLER") == "0"
        self.forward = self.forward_native if off else self.forward_cuda

    def forward_native(self):
        pass

    def forward_cuda(self):
        pass


class Attention(Module):
    def __init__(self, layer_name, version):
        self.layer_name = layer_name
        self.attn_backend = FlashAttentionBackend
        self.impl = SimpleNamespace(vllm_flash_attn_version=version)


class LLM:
    def __init__(self, **kwargs):
        if FAULT == "refuse":
            raise ValueError("max_model_len 2048 is longer than the draft's 256")
        self.layers = [Attention("model.layers.0.self_attn.attn", 3), TopKTopPSampler()]
        self.llm_engine = SimpleNamespace(
            vllm_config=SimpleNamespace(use_v2_model_runner=True))
        self.draft = kwargs.get("speculative_config")
        self.parts = [GPUModelRunner()] + ([DFlash2Speculator()] if self.draft else [])
        self.steps = 0

    def generate(self, prompts, params, use_tqdm=False):
        if FAULT == "crash":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        params = params if isinstance(params, list) else [params] * len(prompts)
        self.steps += len(prompts)
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[
                    (sum(p["prompt_token_ids"]) + getattr(q, "seed", 0) + i) % 1000
                    for i in range(q.max_tokens)])])
                for p, q in zip(prompts, params)]

    def collective_rpc(self, method):
        return [method(None)]

    def get_metrics(self):
        if not self.draft:
            return []
        return [SimpleNamespace(name="vllm:spec_decode_num_drafts", value=self.steps),
                SimpleNamespace(name="vllm:spec_decode_num_draft_tokens",
                                value=3 * self.steps),
                SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens",
                                value=self.steps)]
''',
    # The one piece of torch the driver's introspection touches.
    "torch/__init__.py": "from torch import nn\n",
    "torch/nn.py": "class Module:\n    pass\n",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/models/__init__.py": "",
    "vllm/model_executor/models/qwen3_dflash2.py": "# written by dflash2-backport\n",
    "vllm/v1/__init__.py": "",
    "vllm/v1/worker/__init__.py": "",
    "vllm/v1/worker/gpu/__init__.py": "",
    "vllm/v1/worker/gpu/model_runner.py": "class GPUModelRunner:\n    pass\n",
    "vllm/v1/worker/gpu/spec_decode/__init__.py": "",
    "vllm/v1/worker/gpu/spec_decode/dflash/__init__.py": "",
    "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py": (
        "class DFlashSpeculator:\n    def _generate_draft(self):\n        pass\n"),
    "vllm/v1/worker/gpu/spec_decode/dflash2/__init__.py": "",
    "vllm/v1/worker/gpu/spec_decode/dflash2/speculator.py": (
        "# written by dflash2-backport\n"
        "from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator\n"
        "class DFlash2Speculator(DFlashSpeculator):\n    pass\n"),
}


def _fake_tree(root: Path) -> str:
    for name, text in FAKE_VLLM.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"))
    return str(root)


@pytest.mark.parametrize("fault, state", [("crash", "crashed"), ("refuse", "refused")])
def test_an_engine_that_dies_is_its_configurations_result_and_the_run_goes_on(
        tmp_path, monkeypatch, fault, state):
    # The only-pr tree's engine dies; the closure's run on and are judged.
    closure = _fake_tree(tmp_path / "closure")
    only_pr = _fake_tree(tmp_path / "only-pr")
    (Path(only_pr) / "sitecustomize.py").write_text(
        f"import os\nos.environ['FAKE_VLLM_FAULT'] = {fault!r}\n")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / "run"
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu" / "driver.py"), "run",
         "--out", str(out), "--phases", "check", "--timeout", "120",
         "--configs", "base_longctx_graph,dflash2_longctx_graph,pr_dflash2_longctx_graph",
         "--tree-0271", closure, "--tree-0271pr", only_pr,
         "--tree-0280", str(tmp_path / "none"), "--tree-new", str(tmp_path / "none"),
         "--site", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=300)
    checks = json.loads((out / "summary.json").read_text())["checks"]
    assert done.returncode == 0, done.stdout[-3000:]
    reported = checks[f"pr_dflash2_longctx_graph: {state} (info)"]["figure"]
    assert ("illegal memory access" if fault == "crash" else "ValueError") in reported
    assert checks["greedy dflash2_longctx_graph == base_longctx_graph"]["pass"]
    assert checks["dflash2_longctx_graph: runner and speculator"]["pass"]
    if fault == "crash":
        # A CUDA fault ends the engine at once, its result saved.
        seen = json.loads((out / "pr_dflash2_longctx_graph.json").read_text())
        log = (out / "pr_dflash2_longctx_graph.log").read_text()
        assert set(seen["errors"]) == {"greedy"}
        assert "CUDA fault in phase greedy" in log and "] done" not in log
        assert "exit 3" in reported


@pytest.mark.parametrize("listed, expected", [
    # A tree without .pythonpath: itself, then the shared wheels, then the rest.
    (None, ["{tree}", "/site", "/extra"]),
    # The newest upstream's: its own wheels ahead of the shared ones.
    ("{tree}:/sitenew:/site", ["{tree}", "/sitenew", "/site", "/extra"]),
])
def test_an_engine_path_is_its_trees_own_list_where_the_tree_has_one(tmp_path, listed, expected):
    tree = tmp_path / "vtnew"
    tree.mkdir()
    if listed is not None:
        (tree / ".pythonpath").write_text(listed.format(tree=tree) + "\n")
    env = driver._engine_env({"PYTHONPATH": f"/site:{tree}:/extra"}, "new",
                             {"new": str(tree), "closure": "/vt"}, "/site", tmp_path, "x")
    assert env["PYTHONPATH"].split(":") == [p.format(tree=tree) for p in expected]


def test_each_tree_builds_flashinfer_kernels_in_a_workspace_of_its_own(tmp_path):
    trees = {"closure": "/vt", "up": "/vt28"}
    spaces = {(tree, name): driver._engine_env({}, tree, trees, "/site", tmp_path, name)[
        "FLASHINFER_WORKSPACE_BASE"] for tree, name in
        [("closure", "a"), ("closure", "b"), ("up", "c")]}
    # one workspace for the engines of a tree, another for the other tree
    assert spaces["closure", "a"] == spaces["closure", "b"] != spaces["up", "c"]
    assert all(Path(space).is_relative_to(tmp_path) for space in spaces.values())


@pytest.mark.parametrize("python, built_ahead, expected", [
    # a venv whose kernels real_install_venv.sh built ahead: its own
    ("venv/bin/python", True, "venv/flashinfer"),
    # a venv without them, or a tree on PYTHONPATH: the run's, per tree
    ("venv/bin/python", False, "run/flashinfer/closure"),
    (None, True, "run/flashinfer/closure"),
])
def test_an_engine_finds_the_flashinfer_kernels_its_venv_built_ahead(
        tmp_path, python, built_ahead, expected):
    if built_ahead:
        (tmp_path / "venv" / "flashinfer").mkdir(parents=True)
    env = driver._engine_env({}, "closure", {"closure": "/vt"}, "/site", tmp_path / "run",
                             "a", str(tmp_path / python) if python else None)
    assert env["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / expected)


def _sampled_result(draw, greedy=((5, 6, 7),), counters=None):
    """An engine's result: 2000 seeded requests per temperature whose six
    tokens come from `draw(seed)`."""
    sampled = {str(t): [draw(seed) for seed in range(2000)] for t in driver.TEMPERATURES}
    result = {"greedy": [list(g) for g in greedy], "sampled": sampled,
              "seeded_repeat_equal": 64}
    result.update(counters or {})
    return result


def _tokens(rng_seed, weights):
    rng = np.random.default_rng(rng_seed)
    return lambda seed: [int(t) for t in rng.choice(len(weights), size=6, p=weights)]


UNIFORM = [0.25, 0.25, 0.25, 0.25]
SKEWED = [0.4, 0.2, 0.2, 0.2]
GREEDY_COUNTERS = {"counters_greedy": {"num_drafts": 10, "num_draft_tokens": 30,
                                       "num_accepted_tokens": 6}}
OTHER_COUNTERS = {"counters_greedy": {"num_drafts": 10, "num_draft_tokens": 30,
                                      "num_accepted_tokens": 7}}
SAMPLED_COUNTERS = {**GREEDY_COUNTERS, "counters_T0.7": {
    "num_drafts": 40, "num_draft_tokens": 120, "num_accepted_tokens": 70}}
OTHER_SAMPLED_COUNTERS = {**GREEDY_COUNTERS, "counters_T0.7": {
    "num_drafts": 41, "num_draft_tokens": 123, "num_accepted_tokens": 72}}


@pytest.mark.parametrize(
    "ours, theirs, same_noise, identical",
    [
        # one seed, one token, on both: identical either way
        ((1, UNIFORM, (5, 6, 7), GREEDY_COUNTERS), (1, UNIFORM, (5, 6, 7), GREEDY_COUNTERS),
         True, True),
        ((1, UNIFORM, (5, 6, 7), GREEDY_COUNTERS), (1, UNIFORM, (5, 6, 7), GREEDY_COUNTERS),
         False, True),
        # other noise, same distribution: only the distribution is held
        ((1, UNIFORM, (5, 6, 7), None), (2, UNIFORM, (5, 6, 7), None), True, False),
        ((1, UNIFORM, (5, 6, 7), None), (2, UNIFORM, (5, 6, 7), None), False, True),
        # another distribution fails whatever the noise
        ((1, UNIFORM, (5, 6, 7), None), (2, SKEWED, (5, 6, 7), None), False, False),
        # greedy tokens and greedy counters stay token for token
        ((1, UNIFORM, (5, 6, 7), None), (2, UNIFORM, (5, 6, 8), None), False, False),
        ((1, UNIFORM, (5, 6, 7), GREEDY_COUNTERS), (2, UNIFORM, (5, 6, 7), OTHER_COUNTERS),
         False, False),
        # sampled phases' counters follow the sampled tokens: held only with one noise
        ((1, UNIFORM, (5, 6, 7), SAMPLED_COUNTERS),
         (2, UNIFORM, (5, 6, 7), OTHER_SAMPLED_COUNTERS), False, True),
        ((1, UNIFORM, (5, 6, 7), SAMPLED_COUNTERS),
         (1, UNIFORM, (5, 6, 7), OTHER_SAMPLED_COUNTERS), True, False),
    ],
    ids=["same-seeded", "same-by-distribution", "other-noise-seeded",
         "other-noise-by-distribution", "other-distribution", "other-greedy",
         "other-greedy-counters", "other-noise-sampled-counters", "same-noise-sampled-counters"],
)
def test_twins_with_other_sampling_noise_are_held_to_the_same_distribution(
        ours, theirs, same_noise, identical):
    a, b = (_sampled_result(_tokens(seed, weights), (greedy,), counters)
            for seed, weights, greedy, counters in (ours, theirs))
    report = driver.compare_versions(a, b, ("a", "b"), same_noise=same_noise)
    assert report["identical"] is identical


def test_the_closure_and_the_newest_release_are_compared_by_distribution_only():
    assert set(driver.OTHER_NOISE) == {("closure", "new")}
    assert ("closure", "new") in driver.TWIN_COMPARISONS


@pytest.mark.parametrize("attention, line", [
    ({"model.layers.1.self_attn.attn": "FLASH_ATTN (FA3)",
      "model.layers.0.self_attn.attn": "FLASH_ATTN (FA3)",
      "draft.layers.0.self_attn.attn": "TRITON_ATTN"},
     "FLASH_ATTN (FA3): model.layers.0.self_attn.attn, model.layers.1.self_attn.attn; "
     "TRITON_ATTN: draft.layers.0.self_attn.attn"),
    ({}, ""),
])
def test_the_attention_line_groups_layers_by_backend(attention, line):
    assert driver.attention_by_backend(attention) == line


@pytest.mark.parametrize("choices, prompts, tokens", [
    ([{"index": 1, "token_ids": [3]}, {"index": 0, "token_ids": [1, 2]}], 2, [[1, 2], [3]]),
    ([{"index": 0, "token_ids": [7]}], 1, [[7]]),
    ([{"index": 0, "token_ids": [7]}], 2, ValueError),
    ([{"index": 0, "token_ids": [7]}, {"index": 0, "token_ids": [8]}], 2, ValueError),
])
def test_a_served_completion_gives_each_prompts_tokens_in_prompt_order(
        choices, prompts, tokens):
    if tokens is ValueError:
        with pytest.raises(ValueError):
            driver.completion_tokens({"choices": choices}, prompts)
    else:
        assert driver.completion_tokens({"choices": choices}, prompts) == tokens


@pytest.mark.parametrize("specs", [["closure"], ["nowhere=/x"], ["up=/a", "up=/b"],
                                   ["up="]])
def test_a_ready_file_names_one_known_tree(specs):
    with pytest.raises(ValueError):
        driver.ready_files(specs)


def _run_fake(tmp_path, configs, *extra, timeout=120):
    import subprocess

    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu" / "driver.py"), "run",
         "--out", str(tmp_path / "run"), "--phases", "check", "--configs", configs,
         "--tree-0271", _fake_tree(tmp_path / "closure"),
         "--tree-0271pr", str(tmp_path / "none"), "--tree-0280", str(tmp_path / "none"),
         "--tree-new", str(tmp_path / "none"), "--site", str(tmp_path / "site"), *extra],
        capture_output=True, text=True, timeout=timeout + 120)


def test_engines_wait_for_their_trees_ready_file_and_then_run(tmp_path, monkeypatch):
    import threading

    monkeypatch.delenv("PYTHONPATH", raising=False)
    ready = tmp_path / "venv.ready"
    # The install ends while the run waits.
    timer = threading.Timer(4.0, ready.touch)
    timer.start()
    try:
        # Greedy-only configurations: the stand-in's sampled tokens ignore
        # the temperature.
        done = _run_fake(tmp_path, "base_longctx_graph,dflash2_longctx_graph",
                         "--ready", f"closure={ready}", "--timeout", "120")
    finally:
        timer.cancel()
    assert done.returncode == 0, done.stdout[-3000:]
    waited = [line for line in done.stdout.splitlines() if "is there after" in line]
    assert waited and int(waited[0].split("after ")[1].split(" s")[0]) >= 3, done.stdout
    checks = json.loads((tmp_path / "run" / "summary.json").read_text())["checks"]
    assert checks["greedy dflash2_longctx_graph == base_longctx_graph"]["pass"]
    # Read off the engine's own attention layer.
    assert checks["dflash2_longctx_graph: attention backend by layer (info)"]["figure"] == (
        "FLASH_ATTN (FA3): model.layers.0.self_attn.attn")


@pytest.mark.parametrize("flag, path", [((), "forward_native"),
                                        (("--default-sampler",), "forward_cuda")])
def test_the_sampler_each_engine_chose_is_read_off_it(tmp_path, monkeypatch, flag, path):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    done = _run_fake(tmp_path, "base_longctx_graph", *flag, "--timeout", "120")
    assert done.returncode == 0, done.stdout[-3000:]
    checks = json.loads((tmp_path / "run" / "summary.json").read_text())["checks"]
    assert checks["base_longctx_graph: top-k/top-p sampler path (info)"]["figure"] == {path: 1}


def test_an_engine_whose_ready_file_never_comes_is_reported_not_started(
        tmp_path, monkeypatch):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    done = _run_fake(tmp_path, "base_longctx_graph,dflash2_longctx_graph",
                     "--ready", f"closure={tmp_path / 'never'}", "--timeout", "66")
    assert done.returncode == 1, done.stdout[-3000:]
    checks = json.loads((tmp_path / "run" / "summary.json").read_text())["checks"]
    failed = checks["dflash2_longctx_graph: engine failed"]
    assert not failed["pass"] and "never" in failed["figure"], failed


@pytest.mark.parametrize("weights, passes", [(UNIFORM, True), (SKEWED, False)])
def test_bfloat16_engines_get_the_chi_square_on_their_sampled_tokens(weights, passes):
    results = {
        "base_graph_bf16": {**engine("base_graph_bf16"),
                            **_sampled_result(_tokens(1, UNIFORM))},
        "dflash2_graph_bf16": {**engine("dflash2_graph_bf16"),
                               **_sampled_result(_tokens(2, weights))},
    }
    checks, _ = driver.summarize(results)
    key = (f"sampled dflash2_graph_bf16 ~ base_graph_bf16 (chi-square, every p > "
           f"{driver.P_THRESHOLD})")
    assert checks[key]["pass"] is passes


FA3 = {"model.layers.0.self_attn.attn": "FLASH_ATTN (FA3)"}
TRITON = {"model.layers.0.self_attn.attn": "TRITON_ATTN"}
GREEDY_RESULT = {"greedy": [[1, 2, 3], [4, 5]], "attention": FA3,
                 "counters_greedy": {"num_drafts": 4.0, "num_draft_tokens": 12.0,
                                     "num_accepted_tokens": 5.0}}


def _run_dir(folder: Path, version: str, results: dict, checkpoint: bytes = b"w") -> Path:
    (folder / "models" / "tiny").mkdir(parents=True)
    (folder / "models" / "tiny" / "model.safetensors").write_bytes(checkpoint)
    (folder / "summary.json").write_text("{}")
    for name, result in results.items():
        (folder / f"{name}.json").write_text(json.dumps({"version": version, **result}))
    return folder


@pytest.mark.parametrize("second, checkpoint, identical, line", [
    ({"dflash2_eager_bf16": GREEDY_RESULT}, b"w", True,
     "PASS  dflash2_eager_bf16: 0.27.1 vs 0.26.0"),
    ({"dflash2_eager_bf16": {**GREEDY_RESULT, "greedy": [[1, 2, 3], [4, 6]]}}, b"w", False,
     "FAIL  dflash2_eager_bf16: 0.27.1 vs 0.26.0: greedy: 1/2 prompts identical"),
    ({"dflash2_eager_bf16": {**GREEDY_RESULT, "counters_greedy": {"num_drafts": 5.0}}}, b"w",
     False, "FAIL  dflash2_eager_bf16"),
    ({"dflash2_eager_bf16": {**GREEDY_RESULT, "attention": TRITON}}, b"w", False,
     "SKIP  dflash2_eager_bf16: 0.27.1 vs 0.26.0: other attention backends"),
    ({"dflash2_eager_bf16": {"error": "exit 1"}}, b"w", False,
     "SKIP  dflash2_eager_bf16: 0.27.1 vs 0.26.0: an engine did not finish"),
    ({"dflash2_eager_bf16": GREEDY_RESULT}, b"other weights", False,
     "FAIL  the two runs wrote different checkpoints or prompts"),
], ids=["same", "other-greedy", "other-counters", "other-attention", "crashed",
        "other-checkpoints"])
def test_two_runs_are_held_to_each_other_where_both_ran_with_the_same_attention(
        tmp_path, second, checkpoint, identical, line):
    first = _run_dir(tmp_path / "a", "0.27.1", {"dflash2_eager_bf16": GREEDY_RESULT})
    other = _run_dir(tmp_path / "b", "0.26.0", second, checkpoint)
    found, lines = driver.compare_runs(first, other)
    assert found is identical
    assert any(printed.startswith(line) for printed in lines), lines


def test_another_releases_preset_runs_the_closure_trees_engines_alone():
    names = driver.config_names("release")
    assert {driver.config_of(n)["tree"] for n in names} == {"closure"}
    for expected in ("dflash2_eager_bf16", "prod_dflash2_graph", "dflash2_swa_graph",
                     "base_longctx_graph", "dflash2_prob_graph"):
        assert expected in names
    assert not {"pr_dflash2_swa_graph", "up_dflash2_eager", "new_dflash2_prob_graph"} & set(names)


class FakeTensor:
    """What draft_logit_cache reads of a tensor; like torch's, it has a
    `values` method."""

    def __init__(self, shape, dtype="torch.float32", itemsize=4):
        self.shape, self.dtype, self.itemsize = shape, dtype, itemsize

    def numel(self):
        return int(np.prod(self.shape))

    def element_size(self):
        return self.itemsize

    def values(self):
        raise AssertionError("a tensor's values() is not its rows")


class Holder:
    def __init__(self, **fields):
        vars(self).update(fields)


@pytest.mark.parametrize("speculator, expected", [
    # 0.27.1: the tensor itself, max_num_seqs x K x vocab.
    (Holder(draft_logits=FakeTensor((32, 3, 151936))),
     {"shape": [32, 3, 151936], "dtype": "float32", "bytes": 58_343_424}),
    # Later releases: a DraftLogitsCache, its rows in `values`.
    (Holder(draft_logits=Holder(values=FakeTensor((16, 3, 151936), "torch.bfloat16", 2),
                                row_mapping=None)),
     {"shape": [16, 3, 151936], "dtype": "bfloat16", "bytes": 14_585_856}),
    # Greedy drafts allocate none.
    (Holder(draft_logits=None), None),
    (Holder(), None),
])
def test_the_draft_logit_cache_is_read_off_either_layout(speculator, expected):
    assert driver.draft_logit_cache(speculator) == expected


def test_each_engine_names_its_draft_logit_cache():
    cache = {"shape": [32, 3, 1024], "dtype": "float32", "bytes": 393_216}
    results = {"dflash2_prob_graph": engine("dflash2_prob_graph", draft_logits=[cache]),
               "dflash2_graph": engine("dflash2_graph", draft_logits=[None])}
    checks, _ = driver.summarize(results)
    assert checks["dflash2_prob_graph: draft-logit cache (info)"]["figure"] == (
        "32 x 3 x 1024 float32, 0.4 MiB")
    assert "dflash2_graph: draft-logit cache (info)" not in checks
