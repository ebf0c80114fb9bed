"""What a speed run runs: the engines and their vLLM arguments, the cells
each engine repeats, and the order of a round."""

from __future__ import annotations

from speed_models import PROMPT_TOKENS, SPEED_SHAPES

SHAPE = "8b"
# engine: (tree, draft); trees as driver.py names them: 0.27.1 patched by
# the tool, upstream 0.28.0, and the newest upstream release, whose version
# the run reads off its tree (or its venv) and records in each result.
ENGINES = {"base": ("closure", None), "dflash2": ("closure", "dflash2"),
           "up_base": ("up", None), "up_dflash2": ("up", "dflash2"),
           "new_base": ("new", None), "new_dflash2": ("new", "dflash2")}
VERSIONS = {"closure": "0.27.1", "up": "0.28.0"}
PREFIXES = {"closure": "", "up": "up_", "new": "new_"}
# The versions a run compares when no newest tree is there, as today.
TWO_VERSIONS = ("closure", "up")
KINDS = ("base", "dflash2")
# Every engine's attention backend unless the run names another; "auto"
# leaves the choice to vLLM (FlashAttention 3 on an H200 in bfloat16).
ATTENTION_BACKEND = "TRITON_ATTN"
AUTO = "auto"
REGIMES = ("high", "low")
LOADS = {"c1": 1, "b32": 32}
CELLS = [f"{regime}_{load}" for regime in REGIMES for load in LOADS]
C1_REQUESTS = 2
OUTPUT_TOKENS = 128
# Timed cycles per engine. A DFlash2 engine's repetitions spread four to
# eight times as much as a no-speculation engine's (its step waits on the
# host), and a cycle of its cells costs the same four seconds.
REPS = {"base": 8, "dflash2": 16}
WARMUPS = 2
# Paired, an engine is told whether it runs a cell first or second, and
# runs this many tokens of one request untimed just before.
POSITIONS = ("first", "second")
PRIME_TOKENS = 16
# The host profile: requests of the high regime one at a time, and the
# functions kept by their own time.
HOST_PROFILE_REQUESTS = 8
HOST_PROFILE_ROWS = 60
# What a run keeps free for it: eight requests of a quarter second, slowed
# by the profiler.
HOST_PROFILE_S = 30.0
# One request and 32, each also as a verification step of 16 tokens a
# request: every decode step of every cell replays a captured graph.
CAPTURE_SIZES = [1, 16, 32, 512]
GPU_MEMORY_UTILIZATION = 0.3
# Seconds an engine needs to save its figures and exit after its last one.
EXIT_MARGIN = 20.0


def version_order(round_number: int, trees=TWO_VERSIONS) -> list[str]:
    """The order of the versions in a round: rotated by one every round, so
    that each runs first, second, ... once in as many rounds as there are
    versions (two: A B, then B A). With an odd number of versions every
    other such block runs reversed, so that over twice as many rounds each
    version also runs just before and just after each other one as often
    (three: ABC BCA CAB, then CBA ACB BAC: every order once)."""
    n = len(trees)
    shift = (round_number - 1) % n
    order = list(trees[shift:]) + list(trees[:shift])
    if n % 2 and (round_number - 1) // n % 2:
        order.reverse()
    return order


def round_order(round_number: int, trees=TWO_VERSIONS) -> list[str]:
    """A round's engines: the no-speculation engines, then the DFlash2
    ones, each kind's versions in version_order. With two versions: A/B/A/B,
    each kind's pair in the other order every other round, so that neither
    version always runs first on a warm machine."""
    versions = version_order(round_number, trees)
    return [PREFIXES[tree] + kind for kind in KINDS for tree in versions]


def engine_kwargs(name: str, models: dict, attention_backend: str = ATTENTION_BACKEND) -> dict:
    """The LLM(...) arguments of an engine; builds nothing. The attention
    backend is named for the target and the draft alike, unless it is
    "auto", which leaves it to vLLM."""
    s = SPEED_SHAPES[SHAPE]
    _, draft = ENGINES[name]
    kwargs = dict(
        model=models["target"], dtype="bfloat16", skip_tokenizer_init=True, seed=0,
        max_model_len=PROMPT_TOKENS + OUTPUT_TOKENS + s["block_size"],
        max_num_seqs=max(LOADS.values()),
        gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
        kv_cache_memory_bytes=s["kv_bytes"], enforce_eager=False,
        disable_log_stats=False, enable_prefix_caching=False,
        attention_config={"backend": attention_backend},
        compilation_config={"cudagraph_capture_sizes": CAPTURE_SIZES},
    )
    named = attention_backend not in (None, "", AUTO)
    if not named:
        del kwargs["attention_config"]
    if draft:
        kwargs["speculative_config"] = {
            "method": "dflash", "model": models[draft],
            "num_speculative_tokens": s["block_size"] - 1,
        }
        if named:
            kwargs["speculative_config"]["attention_backend"] = attention_backend
    return kwargs


def engine_reps(name: str, override: int | None = None) -> int:
    """Timed cycles of an engine: `override` when given, else its kind's."""
    if override is not None:
        return override
    return REPS["dflash2" if ENGINES[name][1] else "base"]
