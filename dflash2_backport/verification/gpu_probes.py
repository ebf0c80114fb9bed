"""DFlash2 on a CUDA GPU, in the real engine, run inside the interpreter that
has vLLM.

`dflash2-backport verify --gpu` runs this file, by path, in a fresh process of
the target interpreter, which need not have dflash2-backport installed: it
imports only the standard library, torch and vLLM, and loads its siblings
checkpoints.py and probes.py by path.

It starts vLLM's engine twice, as `vllm serve` starts it (the V2 model
runner, torch.compile and CUDA graphs, in float32 so that the comparison is
exact): on the target alone, and with the DFlash2 draft. Each engine runs in
a process of its own; both at once on the small checkpoints this file writes
(checkpoints.py), one after the other on the user's own. Then it judges:

  engine      both engines started, on the V2 model runner with CUDA graphs
  speculator  the engine with the draft built exactly one DFlash2Speculator
  lossless    its greedy tokens equal the engine's without the draft
  counters    vLLM's spec-decode counters moved (the acceptance rate shown)
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
# The user's checkpoints: prompts of random token ids, seeded.
USER_PROMPTS = 8
USER_PROMPT_LENGTHS = (16, 128)


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


def engine_kwargs(spec: dict) -> dict:
    kwargs = dict(
        model=spec["target"], dtype="float32", skip_tokenizer_init=True, seed=0,
        max_num_seqs=spec["max_num_seqs"], disable_log_stats=False,
    )
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

    def greedy() -> None:
        from vllm import SamplingParams

        llm = state["llm"]
        params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"],
                                ignore_eos=True, detokenize=False)
        before = spec_counters(llm)
        outputs = llm.generate([{"prompt_token_ids": p} for p in spec["prompts"]],
                               params, use_tqdm=False)
        result["greedy"] = [list(o.outputs[0].token_ids) for o in outputs]
        result["counters"] = counter_delta(spec_counters(llm), before)

    def kernels() -> None:
        result["kernels"] = state["llm"].collective_rpc(worker_kernels)[0]

    if not phase("start", start):
        return
    phase("introspect", introspect)
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
    for name in ("start", "process", *phases):
        if name in result["errors"]:
            return result["errors"][name]
    return None


def _cached(draft: dict) -> str:
    if draft.get("worker", {}).get("draft_logits"):
        return "cached for probabilistic drafts"
    return "not cached: greedy drafts, vLLM's default"


def judge(base: dict, draft: dict, synthetic: bool, together: bool) -> list[dict]:
    checks = []

    def check(name: str, problem: str | None, passed: str, seconds: float) -> None:
        checks.append({"name": name, "ok": problem is None,
                       "detail": problem or passed, "seconds": round(seconds, 1)})

    def seconds(result: dict, name: str) -> float:
        return result["seconds"].get(name, 0.0)

    # engine
    starts = [seconds(base, "start"), seconds(draft, "start")]
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
          f"({'started together' if together else 'one after the other'})",
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
    if problem is None:
        if len(reference) != len(speculated):
            problem = f"{len(speculated)} outputs with the draft, {len(reference)} without"
        else:
            differ = [(i, next((j for j, (a, b) in enumerate(zip(x, y)) if a != b),
                               min(len(x), len(y))))
                      for i, (x, y) in enumerate(zip(reference, speculated)) if x != y]
            if differ:
                i, j = differ[0]
                problem = (f"greedy tokens differ with the draft: prompt {i} at token {j} "
                           f"({len(reference) - len(differ)} of {len(reference)} prompts "
                           "equal)")
    tokens = sum(map(len, reference))
    check("lossless", problem,
          f"greedy tokens with the draft equal those without: {len(reference)} prompts, "
          f"{tokens} tokens", max(seconds(base, "greedy"), seconds(draft, "greedy")))

    # counters
    counters = draft.get("counters")
    problem = None
    if counters is None:
        problem = "not read: the engine with the draft generated nothing"
    elif not (counters.get("num_drafts", 0) > 0 and counters.get("num_draft_tokens", 0) > 0):
        problem = f"no drafts counted: {acceptance(counters)}"
    elif synthetic and not counters.get("num_accepted_tokens", 0) > 0:
        problem = f"no draft token accepted on checkpoints made to accept: {acceptance(counters)}"
    check("counters", problem, acceptance(counters or {}), 0.0)

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
    import vllm

    synthetic = request.get("target") is None
    started = time.monotonic()
    if synthetic:
        checkpoints = _sibling("checkpoints")
        paths = checkpoints.write_models(scratch / "models", "tiny", drafts=("dflash2",))
        target, draft = Path(paths["target"]), Path(paths["dflash2"])
        prompts = json.loads(Path(paths["prompts"]).read_text())["greedy"]
        # Both engines at once: small, so that they share the GPU with room.
        common = {"max_num_seqs": 32, "memory": {
            "gpu_memory_utilization": 0.1, "kv_cache_memory_bytes": 1 << 28}}
        together = True
    else:
        target, draft = Path(request["target"]), Path(request["draft"])
        prompts = user_prompts(target, draft)
        # One after the other, each with vLLM's own memory settings.
        common = {"max_num_seqs": len(prompts), "max_model_len": 1024}
        together = False
    try:
        steps = num_speculative_tokens(draft)
    except (ValueError, OSError) as error:
        finish({"error": str(error)})
        return
    written = time.monotonic() - started
    spec = {"target": str(target), "prompts": prompts, "max_tokens": MAX_TOKENS,
            "attention_backend": request.get("attention_backend"), **common}
    specs = {"base": {**spec, "draft": None},
             "draft": {**spec, "draft": str(draft), "num_speculative_tokens": steps}}
    # A user's checkpoints may load for longer than the small ones start.
    allowed = min(request["engine_timeout"], SMALL_ENGINE_TIMEOUT) if synthetic else (
        request["engine_timeout"])
    results = run_engines(specs, scratch, request["bootstrap"], together,
                          deadline=time.monotonic() + allowed)
    finish({
        "vllm": {"version": getattr(vllm, "__version__", None),
                 "package": os.path.dirname(os.path.abspath(vllm.__file__))},
        "gpu": gpu,
        "models": {"synthetic": synthetic, "target": str(target), "draft": str(draft),
                   "written_s": round(written, 1), "prompts": len(prompts),
                   "num_speculative_tokens": steps},
        "checks": judge(results["base"], results["draft"], synthetic, together),
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
