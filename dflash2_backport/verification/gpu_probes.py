"""DFlash2 on a CUDA GPU, in the real engine, run inside the interpreter that
has vLLM.

`dflash2-backport verify --gpu` runs this file, by path, in a fresh process of
the target interpreter, which need not have dflash2-backport installed: it
imports only the standard library, torch and vLLM, and loads its siblings
checkpoints.py and probes.py by path.

It starts vLLM's engine twice, as `vllm serve` starts it (the V2 model
runner, torch.compile and CUDA graphs, in the dtype asked for, bfloat16 by
default, with the attention backend vLLM picks for it): on the target alone,
and with the DFlash2 draft. Each engine runs in a process of its own; both
at once on the small checkpoints this file writes (checkpoints.py), one
after the other on the user's own. Then it judges:

  engine      both engines started, on the V2 model runner with CUDA graphs;
              the attention backend of the target's and the draft's layers
  speculator  the engine with the draft built exactly one DFlash2Speculator
  lossless    float32: its greedy tokens equal the engine's without the draft;
              bfloat16 and float16: where they first differ, the two tokens
              are a near-tie of the target's logits (NEAR_TIE)
  counters    vLLM's spec-decode counters moved; on the small checkpoints,
              drafts accepted as often as they make likely (ACCEPTED_SHARE)
  kernels     the DFlash2 speculator's Triton kernels compiled and launched

    python gpu_probes.py REQUEST_JSON RESULT_JSON
    python gpu_probes.py --engine SPEC_JSON RESULT_JSON     (one engine)

The result is {"checks": [{name, ok, detail, seconds}], "vllm": ..., "gpu":
...} or {"error": "one line"} when there is nothing to check (no GPU).
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DFLASH2_SPECULATOR_MODULE = "vllm.v1.worker.gpu.spec_decode.dflash2.speculator"
V2_RUNNER_PACKAGE = "vllm.v1.worker.gpu."
JIT_TYPES = ("JITFunction", "Autotuner", "Heuristics")

# The small checkpoints: the driver's greedy prompts, 64 new tokens each.
MAX_TOKENS = 64
# The small engines start in about a minute once vLLM's kernels are built; the
# first DFlash2 engine of a fresh install also has FlashInfer compile its
# top-k kernel (seen on an H200 host: about three minutes alone, over five
# beside other engines doing the same).
SMALL_ENGINE_TIMEOUT = 600
# The token counts of the small run's decode steps: up to 24 requests, one
# token each without the draft and four with it.
SMALL_CAPTURE_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96]
# The user's checkpoints: prompts of random token ids, seeded.
USER_PROMPTS = 8
USER_PROMPT_LENGTHS = (16, 128)
DTYPES = ("bfloat16", "float16", "float32")
# The plain engine's logits returned at each position: its own token and the
# next most likely, so that a first difference can be weighed.
TOP_LOGITS = 5
# Two greedy runs of one target in bfloat16 need not agree: the engine with
# the draft scores K + 1 positions of each request per step, the plain one
# one, so their matrix products reduce in other orders and other kernels, and
# bfloat16 keeps 8 significant bits (each rounding is off by up to 2^-9 of
# the value; a unit in the last place is 2^-7 to 2^-8 of it). Where the two
# outputs first differ, their tokens must be a near-tie in the plain run's raw
# logits: apart by at most 1/32 of the larger, four to eight units in the
# last place of bfloat16, far above what rounding order moves a logit by
# (vLLM's own bfloat16 comparisons accept any token among the other run's
# top five) and far below what a target fed the wrong context moves it by.
NEAR_TIE = 1 / 32
# The small checkpoints make a draft likely to be accepted after a cycle
# token (checkpoints.py): a drafter that continued the cycle there and knew
# nothing else would get `likely_accepted` tokens accepted. The real one
# must get at least this share of that; a broken selector (its candidates
# shifted by one id, say) gets almost none.
ACCEPTED_SHARE = 0.5


def _sibling(name: str):
    """checkpoints.py or probes.py, loaded by path once."""
    key = f"dflash2_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def one_line(error: BaseException) -> str:
    probes = _sibling("probes")
    return probes._error({"error": probes.describe(error)})


# -- one engine (its own process) ---------------------------------------------


def spec_counters(llm) -> dict:
    """vLLM's spec-decode counters, as its metrics reader gives them."""
    found = {}
    for metric in llm.get_metrics():
        if not metric.name.startswith("vllm:spec_decode"):
            continue
        name = metric.name.removeprefix("vllm:spec_decode_")
        if hasattr(metric, "values"):
            found[name] = [float(v) for v in metric.values]
        else:
            found[name] = float(metric.value)
    return found


def counter_delta(after: dict, before: dict) -> dict:
    out = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, list):
            old = old or [0.0] * len(value)
            out[key] = [a - b for a, b in zip(value, old)]
        else:
            out[key] = value - (old or 0.0)
    return out


def acceptance(counters: dict) -> str:
    drafts = counters.get("num_drafts", 0.0)
    proposed = counters.get("num_draft_tokens", 0.0)
    accepted = counters.get("num_accepted_tokens", 0.0)
    rate = accepted / proposed if proposed else 0.0
    length = 1 + accepted / drafts if drafts else 0.0
    return (f"drafts {drafts:.0f}, draft tokens {proposed:.0f}, accepted {accepted:.0f}: "
            f"acceptance rate {rate:.2f}, mean acceptance length {length:.2f}")


def worker_introspect(_worker=None) -> dict:
    """What the worker built: speculators by class, model runner modules, and
    whether the DFlash2 speculator caches draft logits."""
    # The engine freezes its start-up heap (gc.freeze), which hides it from
    # gc.get_objects; unfreezing only lets the collector see it again.
    gc.unfreeze()
    speculators, runners, draft_logits = {}, set(), None
    for obj in gc.get_objects():
        cls = type(obj)
        # Not every class's __module__ and __name__ are strings (a metaclass
        # can define either as a descriptor), and the heap holds every class.
        module, name = getattr(cls, "__module__", None), getattr(cls, "__name__", None)
        if not isinstance(module, str) or not isinstance(name, str):
            continue
        if module.startswith("vllm.v1.worker.gpu.spec_decode") and name.endswith("Speculator"):
            speculators[name] = speculators.get(name, 0) + 1
            if name == "DFlash2Speculator":
                draft_logits = getattr(obj, "draft_logits", None) is not None
        elif name == "GPUModelRunner" and module.startswith("vllm."):
            runners.add(module)
    return {"speculators": speculators, "model_runners": sorted(runners),
            "draft_logits": draft_logits}


def compiled_variants(kernel) -> int | None:
    """How many specialisations of a Triton kernel were compiled (each on its
    first launch), or None where this Triton keeps them elsewhere."""
    while type(kernel).__name__ in ("Autotuner", "Heuristics"):
        kernel = kernel.fn
    caches = getattr(kernel, "device_caches", None)
    if not isinstance(caches, dict):
        return None
    return sum(len(entry[0] if isinstance(entry, tuple) else entry)
               for entry in caches.values())


def worker_kernels(_worker=None) -> dict:
    """The Triton kernels defined in the DFlash2 speculator module: name ->
    compiled variants."""
    module = sys.modules.get(DFLASH2_SPECULATOR_MODULE) or importlib.import_module(
        DFLASH2_SPECULATOR_MODULE
    )
    found = {}
    for name, value in vars(module).items():
        if type(value).__name__ not in JIT_TYPES:
            continue
        inner = value
        while type(inner).__name__ in ("Autotuner", "Heuristics"):
            inner = inner.fn
        if getattr(getattr(inner, "fn", None), "__module__", None) == module.__name__:
            found[name] = compiled_variants(value)
    return found


def attention_label(layer) -> str:
    """An attention layer's backend as vLLM names it, with FlashAttention's
    version where the backend is FlashAttention."""
    backend = layer.attn_backend
    name = backend.get_name() if hasattr(backend, "get_name") else type(backend).__name__
    version = getattr(getattr(layer, "impl", None), "vllm_flash_attn_version", None)
    return f"{name} (FlashAttention {version})" if version else name


def worker_attention(worker) -> dict:
    """The attention backend of every attention layer the worker built, the
    target's and the draft's apart: {"target": {label: layers}, "draft": ...}."""
    layers = worker.vllm_config.compilation_config.static_forward_context
    speculator = getattr(worker.model_runner, "speculator", None)
    drafts = set(getattr(speculator, "draft_attn_layer_names", None) or ())
    found: dict = {"target": {}, "draft": {}}
    for name, layer in layers.items():
        if getattr(layer, "attn_backend", None) is None:
            continue
        side = found["draft" if name in drafts else "target"]
        label = attention_label(layer)
        side[label] = side.get(label, 0) + 1
    return found


def engine_kwargs(spec: dict) -> dict:
    kwargs = dict(
        model=spec["target"], dtype=spec["dtype"], skip_tokenizer_init=True, seed=0,
        max_num_seqs=spec["max_num_seqs"], disable_log_stats=False,
    )
    if spec.get("top_logits"):
        # Raw logits, not log-probabilities: a near-tie is judged against the
        # logits' own scale.
        kwargs.update(logprobs_mode="raw_logits", max_logprobs=spec["top_logits"])
    if spec.get("compilation"):
        kwargs["compilation_config"] = spec["compilation"]
    kwargs.update(spec.get("memory", {}))
    if spec.get("max_model_len"):
        kwargs["max_model_len"] = spec["max_model_len"]
    backend = spec.get("attention_backend")
    if backend:
        kwargs["attention_config"] = {"backend": backend}
    if spec.get("draft"):
        kwargs["speculative_config"] = {
            "method": "dflash", "model": spec["draft"],
            "num_speculative_tokens": spec["num_speculative_tokens"],
        }
        if backend:
            kwargs["speculative_config"]["attention_backend"] = backend
    return kwargs


def inspect_models_in_process() -> None:
    """vLLM learns what a model class supports by importing it in a fresh
    interpreter, once per architecture, so that its own process does not
    initialise CUDA before it starts workers; it keeps the answer in its
    cache, which verify starts empty. Each such interpreter imports torch and
    vLLM again: seconds per architecture, the target's and the draft's one
    after the other, on the engine's start. This engine runs its worker in
    its own process and uses CUDA anyway, so it imports the class where it
    runs: the same import and the same answer, without the second
    interpreter."""
    from vllm.model_executor.models import registry

    if callable(getattr(registry, "_run_in_subprocess", None)):
        registry._run_in_subprocess = lambda build: build()


def run_engine(spec: dict, result_file: Path) -> None:
    """Start one engine, generate greedily, and record what it built and did;
    the result file is rewritten after every phase, so a crash keeps them."""
    result: dict = {"seconds": {}, "errors": {}}

    def save() -> None:
        result_file.write_text(json.dumps(result))

    def phase(name: str, body) -> bool:
        started = time.monotonic()
        try:
            body()
            return True
        except Exception as error:  # noqa: BLE001 - the failure is the observation
            result["errors"][name] = one_line(error)
            return False
        finally:
            result["seconds"][name] = round(time.monotonic() - started, 1)
            save()

    state: dict = {}

    def load() -> None:
        import vllm

        result["vllm"] = {"version": getattr(vllm, "__version__", None),
                          "package": os.path.dirname(os.path.abspath(vllm.__file__))}
        inspect_models_in_process()

    def start() -> None:
        from vllm import LLM

        state["llm"] = llm = LLM(**engine_kwargs(spec))
        config = llm.llm_engine.vllm_config
        compilation = config.compilation_config
        result["engine"] = {
            "use_v2_model_runner": bool(getattr(config, "use_v2_model_runner", False)),
            "cudagraph_mode": getattr(compilation.cudagraph_mode, "name",
                                      str(compilation.cudagraph_mode)),
            "compilation_mode": getattr(getattr(compilation, "mode", None), "name",
                                        str(getattr(compilation, "mode", None))),
        }

    def introspect() -> None:
        result["worker"] = state["llm"].collective_rpc(worker_introspect)[0]

    def attention() -> None:
        result["attention"] = state["llm"].collective_rpc(worker_attention)[0]

    def greedy() -> None:
        from vllm import SamplingParams

        llm = state["llm"]
        params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"],
                                ignore_eos=True, detokenize=False,
                                logprobs=spec.get("top_logits"))
        before = spec_counters(llm)
        outputs = llm.generate([{"prompt_token_ids": p} for p in spec["prompts"]],
                               params, use_tqdm=False)
        result["greedy"] = [list(o.outputs[0].token_ids) for o in outputs]
        result["counters"] = counter_delta(spec_counters(llm), before)
        if spec.get("top_logits"):
            # Per prompt and position: [[token, raw logit], ...], the engine's
            # own token among them.
            result["top_logits"] = [
                [[[token, float(entry.logprob)] for token, entry in step.items()]
                 for step in output.outputs[0].logprobs]
                for output in outputs
            ]

    def kernels() -> None:
        result["kernels"] = state["llm"].collective_rpc(worker_kernels)[0]

    if not phase("import", load) or not phase("start", start):
        return
    phase("introspect", introspect)
    phase("attention", attention)
    phase("greedy", greedy)
    if spec.get("draft"):
        phase("kernels", kernels)
    result["done"] = True
    save()


# -- both engines, and the verdict ------------------------------------------------


def user_prompts(target: Path, draft: Path) -> list[list[int]]:
    """Prompts of random token ids within the target's vocabulary, seeded,
    avoiding the draft's mask token and the lowest ids (often special)."""
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    mask = _draft_settings(draft).get("mask_token_id")
    rng = random.Random(0)
    low, high = min(100, vocab // 2), min(vocab, 32000)
    prompts = []
    for i in range(USER_PROMPTS):
        length = USER_PROMPT_LENGTHS[0] + i * (
            USER_PROMPT_LENGTHS[1] - USER_PROMPT_LENGTHS[0]) // (USER_PROMPTS - 1)
        prompts.append([t for t in (rng.randrange(low, high) for _ in range(length))
                        if t != mask] or [low])
    return prompts


def _draft_settings(draft: Path) -> dict:
    config = json.loads((draft / "config.json").read_text())
    return {**config, **(config.get("dflash_config") or {})}


def declared_dtype(target: Path) -> str:
    """The dtype a user's target declares (`torch_dtype`, or `dtype` as newer
    transformers write it), where it is one `verify --gpu` runs; else bfloat16."""
    config = json.loads((target / "config.json").read_text())
    declared = config.get("torch_dtype") or config.get("dtype")
    return declared if declared in DTYPES else "bfloat16"


def num_speculative_tokens(draft: Path) -> int:
    """A DFlash draft predicts a block: its anchor and block_size - 1 drafts."""
    block = _draft_settings(draft).get("block_size")
    if not isinstance(block, int) or block < 2:
        raise ValueError(f"{draft}/config.json gives no block_size of 2 or more")
    return block - 1


def run_engines(specs: dict, scratch: Path, bootstrap: str, together: bool,
                deadline: float) -> dict:
    """Each spec in an engine process of this interpreter; their results."""
    results, running = {}, {}
    allowed = deadline - time.monotonic()

    def launch(name: str) -> None:
        spec_file = scratch / f"engine-{name}.json"
        spec_file.write_text(json.dumps(specs[name]))
        log = open(scratch / f"engine-{name}.log", "wb")
        environ = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
        process = subprocess.Popen(
            [sys.executable, "-c", bootstrap, str(Path(__file__).resolve()), "--engine",
             str(spec_file), str(scratch / f"result-{name}.json")],
            cwd=scratch, env=environ, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT,
        )
        running[name] = (process, log)

    def collect(name: str) -> None:
        process, log = running.pop(name)
        stopped = False
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            stopped = True
        log.close()
        path = scratch / f"result-{name}.json"
        result = json.loads(path.read_text()) if path.exists() else {
            "seconds": {}, "errors": {}}
        if stopped and not result.get("done"):
            # Not a failure of the engine's own: say so, and what it was doing.
            result["errors"].setdefault("process", (
                f"still running when the time for the engines ran out "
                f"({round(allowed)} s), so it was stopped; run `verify --gpu` again "
                f"(a first start may build kernels for minutes). Its log ends: "
                f"{_log_tail(scratch / f'engine-{name}.log')}"))
        elif process.returncode != 0 and not result.get("done"):
            result["errors"].setdefault("process", _log_error(
                scratch / f"engine-{name}.log", process.returncode))
        results[name] = result

    names = list(specs)
    if together:
        for name in names:
            launch(name)
        for name in names:
            collect(name)
    else:
        for name in names:
            launch(name)
            collect(name)
    return results


def _log_lines(log: Path) -> list[str]:
    return [line.strip() for line in log.read_text(errors="replace").splitlines()
            if line.strip()]


def _log_tail(log: Path) -> str:
    return (_log_lines(log) or ["(empty)"])[-1][:300]


def _log_error(log: Path, code: int) -> str:
    lines = _log_lines(log)
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or [f"exit status {code}"])[-1][:300]


def _failure(result: dict, *phases: str) -> str | None:
    for name in ("import", "start", "process", *phases):
        if name in result["errors"]:
            return result["errors"][name]
    return None


def _cached(draft: dict) -> str:
    if draft.get("worker", {}).get("draft_logits"):
        return "cached for probabilistic drafts"
    return "not cached: greedy drafts, vLLM's default"


def attention_line(draft: dict) -> str:
    """The attention backends the engine with the draft reports: its
    target's layers and its draft's."""
    found = draft.get("attention") or {}

    def side(name: str) -> str:
        labels = found.get(name) or {}
        return " and ".join(sorted(labels)) or "not seen"

    if "attention" in draft.get("errors", {}):
        return f"attention backends not seen: {draft['errors']['attention']}"

    return f"attention: target {side('target')}, draft {side('draft')}"


def first_difference(reference: list[int], speculated: list[int]) -> int:
    return next((j for j, (a, b) in enumerate(zip(reference, speculated)) if a != b),
                min(len(reference), len(speculated)))


def near_tie(top: list, plain: int, drafted: int) -> tuple[float | None, float]:
    """(how far the drafted token's raw logit lies below the plain one's,
    the most a near-tie allows there); the first None where the drafted
    token is not among the plain run's top logits."""
    logits = {token: logit for token, logit in top}
    if plain not in logits or drafted not in logits:
        return None, 0.0
    a, b = logits[plain], logits[drafted]
    return a - b, NEAR_TIE * max(abs(a), abs(b))


def lossless_problem(reference: list, speculated: list, top_logits: list | None,
                     exact: bool) -> tuple[str | None, str]:
    """(what is wrong, or None; what held): the greedy outputs of the plain
    engine and the one with the draft, prompt by prompt."""
    if len(reference) != len(speculated):
        return f"{len(speculated)} outputs with the draft, {len(reference)} without", ""
    tokens = sum(map(len, reference))
    differ = [(i, first_difference(x, y))
              for i, (x, y) in enumerate(zip(reference, speculated)) if x != y]
    if exact:
        if differ:
            i, j = differ[0]
            return (f"greedy tokens differ with the draft: prompt {i} at token {j} "
                    f"({len(reference) - len(differ)} of {len(reference)} prompts "
                    "equal)"), ""
        return None, (f"greedy tokens with the draft equal those without: "
                      f"{len(reference)} prompts, {tokens} tokens")
    gaps = []
    for i, j in differ:
        x, y = reference[i], speculated[i]
        if j >= len(x) or j >= len(y):
            return f"prompt {i}: {len(y)} tokens with the draft, {len(x)} without", ""
        top = (top_logits or [[]] * len(reference))[i]
        gap, allowed = near_tie(top[j] if j < len(top) else [], x[j], y[j])
        if gap is None:
            return (f"prompt {i} at token {j}: the draft's run chose {y[j]} where the "
                    f"plain one chose {x[j]}, not among the plain run's "
                    f"{TOP_LOGITS} most likely tokens there: not a near-tie"), ""
        if gap > allowed:
            return (f"prompt {i} at token {j}: the draft's run chose {y[j]} where the "
                    f"plain one chose {x[j]}, {gap:.3g} below it in the plain run's "
                    f"logits, more than a near-tie's {allowed:.3g} (1/32 of the "
                    "larger logit)"), ""
        gaps.append(gap)
    held = (f"{len(reference) - len(differ)} of {len(reference)} prompts give the "
            f"plain run's greedy tokens with the draft ({tokens} tokens)")
    if gaps:
        held += (f"; {len(gaps)} part from it at near-ties of the target's logits "
                 f"(at most {max(gaps):.3g} apart, within 1/32 of the larger)")
    return None, held


def likely_accepted(prompts: list, outputs: list, steps: int, cycle: list) -> int:
    """The draft tokens a drafter would get accepted that continued the
    cycle after a cycle token and drafted nothing acceptable elsewhere, on
    these greedy outputs: each step drafts `steps` tokens after its last
    accepted one, and the next step starts after what it got accepted."""
    successor = {token: cycle[(n + 1) % len(cycle)] for n, token in enumerate(cycle)}
    total = 0
    for prompt, output in zip(prompts, outputs):
        sequence = [prompt[-1], *output]
        at = 0
        while at < len(sequence) - 1:
            accepted, token = 0, sequence[at]
            while (accepted < steps and at + accepted + 1 < len(sequence)
                   and successor.get(token) == sequence[at + accepted + 1]):
                token = sequence[at + accepted + 1]
                accepted += 1
            total += accepted
            at += accepted + 1
    return total


def judge(base: dict, draft: dict, synthetic: bool, together: bool, exact: bool = True,
          likely: int | None = None) -> list[dict]:
    """The checks, from the two engines' records. `exact`: the run's dtype
    is float32, where greedy outputs must be equal; `likely`: on the small
    checkpoints, the draft tokens they make likely to be accepted
    (likely_accepted)."""
    checks = []

    def check(name: str, problem: str | None, passed: str, seconds: float) -> None:
        checks.append({"name": name, "ok": problem is None,
                       "detail": problem or passed, "seconds": round(seconds, 1)})

    def seconds(result: dict, name: str) -> float:
        return result["seconds"].get(name, 0.0)

    # engine
    starts = [seconds(base, "import") + seconds(base, "start"),
              seconds(draft, "import") + seconds(draft, "start")]
    problem = None
    for label, result in (("with the draft", draft), ("without the draft", base)):
        failure = _failure(result)
        if failure:
            problem = f"the engine {label} did not start: {failure}"
            break
    engine = draft.get("engine", {})
    runners = draft.get("worker", {}).get("model_runners", [])
    if problem is None:
        if not engine.get("use_v2_model_runner"):
            problem = "the engine with the draft is not configured for the V2 model runner"
        elif _failure(draft, "introspect"):
            problem = f"its model runner not seen: {_failure(draft, 'introspect')}"
        elif not any(r.startswith(V2_RUNNER_PACKAGE) for r in runners):
            problem = f"the engine with the draft runs {runners or 'no'} model runner, not V2"
        elif engine.get("cudagraph_mode") in (None, "NONE"):
            problem = "the engine with the draft runs without CUDA graphs"
    check("engine", problem,
          f"V2 model runner, torch.compile ({engine.get('compilation_mode')}) and CUDA "
          f"graphs ({engine.get('cudagraph_mode')}), with and without the draft "
          f"({'started together' if together else 'one after the other'}); "
          f"{attention_line(draft)}",
          max(starts) if together else sum(starts))

    # speculator
    found = draft.get("worker", {}).get("speculators")
    problem = _failure(draft, "introspect")
    if problem is not None:
        problem = f"not seen: {problem}"
    elif found != {"DFlash2Speculator": 1}:
        problem = f"the engine with the draft built {found or 'no speculator'}, " \
                  "want exactly one DFlash2Speculator"
    elif base.get("worker", {}).get("speculators"):
        problem = f"the engine without the draft built {base['worker']['speculators']}"
    check("speculator", problem,
          "exactly one DFlash2Speculator, in the engine with the draft "
          f"(draft logits {_cached(draft)})", seconds(draft, "introspect"))

    # lossless
    problem = _failure(base, "greedy") and (
        f"without the draft: {_failure(base, 'greedy')}")
    problem = problem or (_failure(draft, "greedy") and (
        f"with the draft: {_failure(draft, 'greedy')}"))
    reference, speculated = base.get("greedy", []), draft.get("greedy", [])
    held = ""
    if problem is None:
        problem, held = lossless_problem(reference, speculated, base.get("top_logits"),
                                         exact)
    check("lossless", problem, held,
          max(seconds(base, "greedy"), seconds(draft, "greedy")))

    # counters
    counters = draft.get("counters")
    problem = None
    if counters is None:
        problem = "not read: the engine with the draft generated nothing"
    elif not (counters.get("num_drafts", 0) > 0 and counters.get("num_draft_tokens", 0) > 0):
        problem = f"no drafts counted: {acceptance(counters)}"
    elif synthetic and not counters.get("num_accepted_tokens", 0) > 0:
        problem = f"no draft token accepted on checkpoints made to accept: {acceptance(counters)}"
    elif synthetic and likely and counters["num_accepted_tokens"] < ACCEPTED_SHARE * likely:
        problem = (f"{acceptance(counters)}: fewer than {ACCEPTED_SHARE:.0%} of the "
                   f"{likely} these checkpoints make likely")
    passed = acceptance(counters or {})
    if synthetic and likely:
        passed += f" (the checkpoints make {likely} likely)"
    check("counters", problem, passed, 0.0)

    # kernels
    kernels = draft.get("kernels")
    problem = _failure(draft, "kernels")
    if problem is not None:
        problem = f"not seen: {problem}"
    elif kernels is None:
        problem = "not seen: the engine with the draft did not get that far"
    elif not kernels:
        problem = f"{DFLASH2_SPECULATOR_MODULE} defines no Triton kernel"
    else:
        unknown = [name for name, n in kernels.items() if n is None]
        compiled = {name: n for name, n in kernels.items() if n}
        needed = set(kernels) if draft.get("worker", {}).get("draft_logits") else None
        if unknown:
            problem = f"this Triton keeps no compiled-kernel cache to read for {unknown}"
        elif not compiled or (needed and set(compiled) != needed):
            problem = f"Triton kernels not compiled: {sorted(set(kernels) - set(compiled))}"
    described = "; ".join(
        f"{name} compiled ({n} variant{'' if n == 1 else 's'}) and launched" if n
        else f"{name} not launched"
        for name, n in sorted((kernels or {}).items()))
    check("kernels", problem, f"{described} (dflash2/speculator.py)",
          seconds(draft, "kernels"))
    return checks


def imported_vllm(results: dict) -> dict:
    """The vLLM the engines imported ({version, package}); imported here only
    where neither got that far. The engines start without waiting for this
    process to import it too."""
    for name in ("draft", "base"):
        if results.get(name, {}).get("vllm"):
            return results[name]["vllm"]
    import vllm

    return {"version": getattr(vllm, "__version__", None),
            "package": os.path.dirname(os.path.abspath(vllm.__file__))}


def main(request_file: str, result_file: str) -> None:
    request = json.loads(Path(request_file).read_text())
    scratch = Path(request["scratch"])

    def finish(document: dict) -> None:
        Path(result_file).write_text(json.dumps(document))

    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
        finish({"error": f"no CUDA GPU is visible (torch {torch.__version__}, {build}); "
                "`verify --gpu` needs one, plain `verify` runs on the CPU"})
        return
    gpu = torch.cuda.get_device_name(0)

    synthetic = request.get("target") is None
    started = time.monotonic()
    if synthetic:
        checkpoints = _sibling("checkpoints")
        paths = checkpoints.write_models(scratch / "models", "tiny", drafts=("dflash2",))
        target, draft = Path(paths["target"]), Path(paths["dflash2"])
        prompts = json.loads(Path(paths["prompts"]).read_text())["greedy"]
        # Both engines at once: small, so that they share the GPU with room;
        # CUDA graphs captured for the batches these prompts make, not for
        # vLLM's default of every multiple of 8 up to twice the largest.
        common = {"max_num_seqs": 32, "memory": {
            "gpu_memory_utilization": 0.1, "kv_cache_memory_bytes": 1 << 28},
            "compilation": request.get("compilation") or {
                "cudagraph_capture_sizes": SMALL_CAPTURE_SIZES}}
        together = True
    else:
        target, draft = Path(request["target"]), Path(request["draft"])
        prompts = user_prompts(target, draft)
        # One after the other, each with vLLM's own memory settings.
        common = {"max_num_seqs": len(prompts), "max_model_len": 1024}
        together = False
    try:
        steps = num_speculative_tokens(draft)
        dtype = request.get("dtype") or (
            "bfloat16" if synthetic else declared_dtype(target))
    except (ValueError, OSError) as error:
        finish({"error": str(error)})
        return
    exact = dtype == "float32"
    written = time.monotonic() - started
    spec = {"target": str(target), "prompts": prompts, "max_tokens": MAX_TOKENS,
            "dtype": dtype, "attention_backend": request.get("attention_backend"),
            **common}
    specs = {"base": {**spec, "draft": None, "top_logits": None if exact else TOP_LOGITS},
             "draft": {**spec, "draft": str(draft), "num_speculative_tokens": steps}}
    # A user's checkpoints may load for longer than the small ones start.
    allowed = min(request["engine_timeout"], SMALL_ENGINE_TIMEOUT) if synthetic else (
        request["engine_timeout"])
    results = run_engines(specs, scratch, request["bootstrap"], together,
                          deadline=time.monotonic() + allowed)
    likely = None
    if synthetic and results["base"].get("greedy"):
        likely = likely_accepted(prompts, results["base"]["greedy"], steps,
                                 _sibling("checkpoints").CYCLE)
    finish({
        "vllm": imported_vllm(results),
        "gpu": gpu,
        "dtype": dtype,
        "attention": results["draft"].get("attention"),
        "models": {"synthetic": synthetic, "target": str(target), "draft": str(draft),
                   "written_s": round(written, 1), "prompts": len(prompts),
                   "num_speculative_tokens": steps},
        "checks": judge(results["base"], results["draft"], synthetic, together,
                        exact=exact, likely=likely),
    })


if __name__ == "__main__":
    if sys.argv[1] == "--engine":
        run_engine(json.loads(Path(sys.argv[2]).read_text()), Path(sys.argv[3]))
        # The record is written: the engine's own shutdown is not under test,
        # and waiting on it could only cost time.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    else:
        main(sys.argv[1], sys.argv[2])
