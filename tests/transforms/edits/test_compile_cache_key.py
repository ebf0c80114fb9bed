"""The DFlash2 factor of the compile-cache key, as a table."""

import textwrap

import pytest

from dflash2_backport.transforms.edits.compile_cache_key.judge import FACTOR_SOURCE
from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.compile_cache_key.writer import CompileCacheKey

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted_exactly,
    crlf,
    output,
    refusal,
    swap,
    swapped,
    verdicts,
)

PENDING = '''
from vllm.utils.hashing import safe_hash


@config
class SpeculativeConfig:
    num_speculative_tokens: int = None

    def compute_hash(self) -> str:
        """The structure of the computation graph."""
        factors: list[Any] = []
        uses_aux_hidden_states = self.method in (
            "eagle3",
            "extract_hidden_states",
            "dflash",
            "dspark",
        )
        factors.append(uses_aux_hidden_states)

        if uses_aux_hidden_states and self.draft_model_config is not None:
            factors.append(self.draft_model_config.compute_hash())

        hash_str = safe_hash(str(factors).encode(), usedforsecurity=False).hexdigest()
        return hash_str
'''
FACTOR = textwrap.indent(FACTOR_SOURCE, " " * 8)
ANCHOR = "\n        hash_str = safe_hash("
APPLIED = swap(PENDING, ANCHOR, FACTOR + ANCHOR)
HUNK = "speculative tokens factor"


def both(old: str, new: str) -> tuple[str, str]:
    return swap(PENDING, old, new), swap(APPLIED, old, new)


COSMETIC = {
    "the hashing wrapped, single quotes": both(
        "        hash_str = safe_hash(str(factors).encode(), usedforsecurity=False).hexdigest()\n",
        "        hash_str = safe_hash(\n            str(factors).encode(), usedforsecurity=False\n"
        "        ).hexdigest()\n",
    ),
    "a comment above the hashing stays with it": both(
        "\n        hash_str = safe_hash(",
        "\n        # the factors' digest\n        hash_str = safe_hash(",
    ),
}

SEMANTIC = {
    "the hashing reads other factors": swap(
        PENDING, "safe_hash(str(factors).encode()", "safe_hash(str(factors[1:]).encode()"
    ),
    "no compute_hash": swap(PENDING, "def compute_hash(", "def compute_digest("),
    "the factor for every DFlash draft": swap(
        APPLIED,
        '            and "DFlash2DraftModel" in (self.draft_model_config.architectures or [])\n',
        "",
    ),
    "the factor after the hashing": swap(
        PENDING,
        "        return hash_str\n",
        FACTOR.lstrip("\n") + "        return hash_str\n",
    ),
    "the factor twice": swap(APPLIED, "        return hash_str\n", FACTOR + "        return hash_str\n"),
    # The factor is appended: a tuple has no append.
    "the factors a tuple": swapped(
        PENDING,
        ("        factors: list[Any] = []\n", "        factors: tuple[Any, ...] = ()\n"),
        ("        factors.append(uses_aux_hidden_states)\n",
         "        factors += (uses_aux_hidden_states,)\n"),
    ),
    "the factors rebound before the hashing": swap(
        PENDING,
        "        hash_str = safe_hash(",
        "        factors = tuple(factors)\n        hash_str = safe_hash(",
    ),
}


@pytest.mark.parametrize(
    "before,after", [(PENDING, APPLIED), *COSMETIC.values()], ids=["0.27.1", *COSMETIC]
)
def test_pending_code_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(CompileCacheKey, before, after)
    assert verdicts(CompileCacheKey, before) == {HUNK: State.PENDING}
    assert verdicts(CompileCacheKey, after) == {HUNK: State.APPLIED}


@pytest.mark.parametrize("source", SEMANTIC.values(), ids=SEMANTIC)
def test_semantic_variants_are_refused(source: str) -> None:
    assert refusal(CompileCacheKey, source).edit == "compile-cache-key"


def test_the_factor_written_otherwise_is_applied_and_reverted_by_meaning() -> None:
    otherwise = swap(
        APPLIED,
        FACTOR,
        '\n        if (self.method == "dflash" and self.draft_model_config is not None\n'
        '                and "DFlash2DraftModel" in (self.draft_model_config.architectures or [])):\n'
        "            factors.append(self.num_speculative_tokens)  # k+1 is baked in\n",
    )
    assert_left_alone(CompileCacheKey, otherwise)
    assert_reverted_exactly(CompileCacheKey, otherwise, PENDING)


def test_a_crlf_file_is_patched_and_reverted_byte_for_byte() -> None:
    assert output(CompileCacheKey, crlf(PENDING)) == crlf(APPLIED)
    assert output(CompileCacheKey, crlf(APPLIED), revert=True) == crlf(PENDING)
