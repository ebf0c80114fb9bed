"""A DFlash or DSpark draft keeps the last block of a prefix-cache hit (vLLM
0.33.0's `needs_eagle_block_drop`), as a table: 0.27.1's scheduler (pending)
and the fix's (applied) written by hand."""

import ast
import textwrap
import types

import pytest

from dflash2_backport.transforms.edits.dflash_prefix_block.judge import BACK_OFF, DECIDED, FLAG_INIT, MANAGER
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.dflash_prefix_block.writer import PrefixBlockDrop
from tests.wheels import vllm_source

from .._cases import (
    assert_applied_and_reverted_exactly,
    assert_patched,
    crlf,
    output,
    refusal,
    swap,
    swapped,
    verdicts,
)

NAME = "dflash-prefix-block"
#: The scheduler as 0.27.1 ships it; the manager's construction, which the
#: fix's hunk holds whole, from its file.
PENDING = '''
from vllm.v1.core.kv_cache_manager import KVCacheManager


class Scheduler(SchedulerInterface):
    def __init__(
        self,
        vllm_config: VllmConfig,
        kv_cache_config: KVCacheConfig,
        hash_block_size: int | None = None,
    ) -> None:
        speculative_config = vllm_config.speculative_config
        self.use_eagle = False
        self.num_spec_tokens = vllm_config.num_speculative_tokens
        self.num_lookahead_tokens = 0
        if speculative_config is not None:
            if speculative_config.use_eagle():
                self.use_eagle = True
                self.num_lookahead_tokens = self.num_spec_tokens
            if speculative_config.use_dflash():
                self.num_lookahead_tokens = self.num_spec_tokens + 1

        # Create the KV cache manager.
{manager}        self.use_pp = self.parallel_config.pipeline_parallel_size > 1

    def _mamba_block_aligned_split(self, request: Request, num_new_tokens: int) -> int:
        block_size = self.cache_config.block_size
        # With Eagle, FullAttn prunes the last matching block, so back off one
        # block to avoid a Mamba cache miss.
        last_cache_position = request.num_tokens - request.num_tokens % block_size
        if self.use_eagle:
            last_cache_position = max(last_cache_position - block_size, 0)

        end = start + num_new_tokens
        return end - start
'''.replace("{manager}", textwrap.indent(MANAGER.before, " " * 8))
DEFAULT = "        self.use_eagle = False\n"
ARM_END = (
    "                self.num_lookahead_tokens = self.num_spec_tokens\n"
    "            if speculative_config.use_dflash():"
)
DECISION = """\
                # DFlash and DSpark build a position's draft KV from the target's
                # hidden state there alone, not from the token after it as EAGLE
                # does: the last block of a prefix-cache hit is theirs to keep.
                self.use_eagle_block_drop = not (
                    speculative_config.use_dflash() or speculative_config.use_dspark()
                )
"""
BACK_OFF_TEST = "        if self.use_eagle:\n"
APPLIED = swapped(
    PENDING,
    (DEFAULT, DEFAULT + "        self.use_eagle_block_drop = False\n"),
    (ARM_END, ARM_END.replace("\n            if", "\n" + DECISION + "            if")),
    ("use_eagle=self.use_eagle,\n", "use_eagle=self.use_eagle_block_drop,\n"),
    (BACK_OFF_TEST, "        if self.use_eagle_block_drop:\n"),
)
HUNKS = [h.name for h in (FLAG_INIT, DECIDED, MANAGER, BACK_OFF)]
MANAGER_0271 = PENDING[
    PENDING.index("        self.kv_cache_manager =") : PENDING.index("        self.use_pp = ")
]
RESET = "\n    def reset_prefix_cache(self) -> None:\n        self.use_eagle_block_drop = True\n"


def both(old: str, new: str) -> tuple[str, str]:
    """The same change made to the pending file and to the expected result."""
    return swap(PENDING, old, new), swap(APPLIED, old, new)


COSMETIC = {
    "a comment on the default stays": both(
        DEFAULT, DEFAULT.replace("\n", "  # EAGLE-style drafting\n")
    ),
    "the other arms reordered": both(
        "            if speculative_config.use_dflash():\n"
        "                self.num_lookahead_tokens = self.num_spec_tokens + 1\n",
        "            if speculative_config.use_dflash():  # in-fill decoding\n"
        "                self.num_lookahead_tokens = self.num_spec_tokens + 1\n",
    ),
    "the back-off's comment reworded": both(
        "        # With Eagle, FullAttn prunes the last matching block, so back off one\n"
        "        # block to avoid a Mamba cache miss.\n",
        "        # Back off a block where the KV cache manager drops one.\n",
    ),
}
# The fix written otherwise: each row the file, and what reverting it writes.
ALREADY_APPLIED = {
    "the decision on one line, as a conditional": (
        swap(
            APPLIED,
            DECISION,
            "                self.use_eagle_block_drop = not (speculative_config.use_dflash()"
            " or speculative_config.use_dspark())\n",
        ),
        PENDING,
    ),
}
# Each row: the file, the hunk refused, and what the refusal says it found.
DRIFT = {
    # The flag is derived in the use_eagle() arm alone: another arm that
    # sets use_eagle would leave the flag False where use_eagle is True.
    "another arm sets use_eagle": (
        swap(
            PENDING,
            "            if speculative_config.use_dflash():\n",
            '            if speculative_config.method == "my_eagle":\n'
            "                self.use_eagle = True\n"
            "            if speculative_config.use_dflash():\n",
        ),
        DECIDED.name,
        "3 settings of it, on lines 12, 17, 20",
    ),
    "the flag set once more after the fix's": (
        swap(
            APPLIED,
            "        self.use_pp = ",
            "        self.use_eagle_block_drop = self.use_eagle\n        self.use_pp = ",
        ),
        FLAG_INIT.name,
        "'self.use_eagle_block_drop = self.use_eagle' on line 45, which the fix did not write",
    ),
    "the flag's default dropping the block": (
        swap(APPLIED, "self.use_eagle_block_drop = False\n", "self.use_eagle_block_drop = True\n"),
        FLAG_INIT.name,
        "'self.use_eagle_block_drop = True' on line 13",
    ),
    "the flag set in another method": (
        APPLIED + RESET,
        FLAG_INIT.name,
        "'self.use_eagle_block_drop = True' on line 59",
    ),
    "0.27.1 with the flag set by other code": (
        PENDING + RESET,
        FLAG_INIT.name,
        "'self.use_eagle_block_drop = True' on line 52",
    ),
    "DFlash drops the block after all": (
        swap(
            APPLIED,
            "not (\n"
            "                    speculative_config.use_dflash() or speculative_config.use_dspark()\n"
            "                )",
            "not speculative_config.use_dspark()",
        ),
        DECIDED.name,
        "as vLLM 0.27.1 has it, or as the fix leaves it, found none",
    ),
    "the arm sets more than 0.27.1's": (
        swap(
            PENDING,
            ARM_END,
            ARM_END.replace("\n            if", "\n                self.use_v2 = True\n            if"),
        ),
        DECIDED.name,
        "as vLLM 0.27.1 has it, or as the fix leaves it, found none",
    ),
    "the manager built with another argument": (
        swap(PENDING, "pcp_world_size=1,\n", "pcp_world_size=self.pcp_world_size,\n"),
        MANAGER.name,
        "as vLLM 0.27.1 has it, or as the fix leaves it, found none",
    ),
    "the manager built twice": (
        swap(PENDING, "        self.use_pp = ", MANAGER_0271 + "        self.use_pp = "),
        MANAGER.name,
        "found 2 of them",
    ),
    "the back-off two blocks": (
        swap(APPLIED, "last_cache_position - block_size", "last_cache_position - 2 * block_size"),
        BACK_OFF.name,
        "found none",
    ),
    "no _mamba_block_aligned_split": (
        swap(PENDING, "def _mamba_block_aligned_split(", "def _mamba_split("),
        BACK_OFF.name,
        "expected one method Scheduler._mamba_block_aligned_split, found none",
    ),
    "no Scheduler": (
        swap(PENDING, "class Scheduler(", "class AsyncScheduler("),
        FLAG_INIT.name,
        "expected one module-level class Scheduler, found none",
    ),
}


def test_the_hunks_are_the_declared_ones() -> None:
    assert list(verdicts(PrefixBlockDrop, PENDING)) == HUNKS


@pytest.mark.parametrize(
    "before,after", [(PENDING, APPLIED), *COSMETIC.values()], ids=["0.27.1", *COSMETIC]
)
def test_pending_code_is_patched_then_left_alone_and_reverted_exactly(
    before: str, after: str
) -> None:
    assert_patched(PrefixBlockDrop, before, after)
    assert set(verdicts(PrefixBlockDrop, before).values()) == {State.PENDING}
    assert set(verdicts(PrefixBlockDrop, after).values()) == {State.APPLIED}


@pytest.mark.parametrize("source,back", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED)
def test_the_fix_written_otherwise_is_applied_and_reverts_exactly(source: str, back: str) -> None:
    assert_applied_and_reverted_exactly(PrefixBlockDrop, source, back)


def test_a_fix_made_in_part_is_finished() -> None:
    # The manager left to use_eagle: every other hunk applied, that one pending.
    part = swap(APPLIED, "use_eagle=self.use_eagle_block_drop,", "use_eagle=self.use_eagle,")
    assert verdicts(PrefixBlockDrop, part) == {
        FLAG_INIT.name: State.APPLIED,
        DECIDED.name: State.APPLIED,
        MANAGER.name: State.PENDING,
        BACK_OFF.name: State.APPLIED,
    }
    assert output(PrefixBlockDrop, part) == APPLIED


@pytest.mark.parametrize("source,hunk,found", DRIFT.values(), ids=DRIFT)
def test_code_that_is_neither_is_refused_naming_what_it_found(
    source: str, hunk: str, found: str
) -> None:
    refused = refusal(PrefixBlockDrop, source)
    assert refused.edit == NAME
    (drifted,) = [h for h in refused.drifted if h.hunk == hunk]
    assert found in drifted.reason, drifted.reason


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(PrefixBlockDrop, crlf(PENDING)) == crlf(APPLIED)
    assert output(PrefixBlockDrop, crlf(APPLIED), revert=True) == crlf(PENDING)


# -- against vLLM 0.33.0, where the fix comes from ------------------------------------

UPSTREAM = "0.33.0"
METHODS = [None, "eagle", "eagle3", "mtp", "dflash", "dspark", "ngram", "draft_model", "suffix"]


def _speculative_config(version: str) -> type:
    """A stand-in for `SpeculativeConfig` with the release's own methods that
    say which drafter it is."""
    source = (vllm_source(version) / "vllm/config/speculative.py").read_text()
    (cls,) = [
        n for n in ast.parse(source).body
        if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig"
    ]
    wanted = {"use_eagle", "use_dflash", "use_dspark", "needs_eagle_block_drop"}
    cls.body = [m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name in wanted]
    cls.decorator_list, cls.bases = [], []
    namespace: dict[str, object] = {}
    exec(compile(ast.Module(body=[cls], type_ignores=[]), version, "exec"), namespace)
    return namespace["SpeculativeConfig"]  # type: ignore[return-value]


def _config(version: str, method: str | None) -> object:
    if method is None:
        return None
    config = _speculative_config(version)()
    config.method = method  # type: ignore[attr-defined]
    return config


def _drops_in_table(method: str | None) -> bool:
    """What the table's applied `Scheduler.__init__` sets the flag to, up to
    the KV cache manager, with 0.27.1's SpeculativeConfig."""
    (cls,) = [n for n in ast.parse(APPLIED).body if isinstance(n, ast.ClassDef)]
    init = cls.body[0]
    assert isinstance(init, ast.FunctionDef) and init.name == "__init__"
    upto = next(i for i, s in enumerate(init.body) if "kv_cache_manager" in ast.unparse(s))
    scheduler = types.SimpleNamespace()
    vllm_config = types.SimpleNamespace(
        speculative_config=_config("0.27.1", method), num_speculative_tokens=3
    )
    code = compile(ast.Module(body=init.body[:upto], type_ignores=[]), "table", "exec")
    exec(code, {"self": scheduler, "vllm_config": vllm_config})
    return scheduler.use_eagle_block_drop


@pytest.mark.wheels
@pytest.mark.parametrize("method", METHODS)
def test_the_block_is_dropped_for_the_methods_0_33_0_drops_it_for(method: str | None) -> None:
    config = _config(UPSTREAM, method)
    upstream = config is not None and config.needs_eagle_block_drop()  # type: ignore[attr-defined]
    assert _drops_in_table(method) is upstream


@pytest.mark.wheels
def test_the_kv_cache_manager_is_told_the_flag_as_0_33_0_tells_it() -> None:
    def use_eagle(source: str) -> list[str]:
        return [
            ast.unparse(k.value)
            for call in ast.walk(ast.parse(source))
            if isinstance(call, ast.Call) and ast.unparse(call.func) == "KVCacheManager"
            for k in call.keywords
            if k.arg == "use_eagle"
        ]

    upstream = (vllm_source(UPSTREAM) / "vllm/v1/core/sched/scheduler.py").read_text()
    assert use_eagle(APPLIED) == use_eagle(upstream) == ["self.use_eagle_block_drop"]
