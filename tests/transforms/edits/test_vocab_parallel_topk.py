import pytest

from dflash2_backport.transforms.framework.vocabulary import State
from dflash2_backport.transforms.edits.vocab_parallel_topk.judge import (
    GET_TOP_K_TOKENS,
    HELPERS_HUNK,
    IMPORTS_HUNK,
)
from dflash2_backport.transforms.edits.vocab_parallel_topk.writer import VocabParallelTopK

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted_exactly,
    crlf,
    output,
    refusal,
    revert_refusal,
    swap,
    swapped,
    verdicts,
)


HEADER = '''
# SPDX-License-Identifier: Apache-2.0
"""A layer that compute logits from hidden_stats."""

import torch

from vllm.distributed import tensor_model_parallel_all_gather
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
from vllm.platforms import current_platform
'''

# What the edit writes, from its hunk files, where the tests expect it.
IMPORTS = "\n" + IMPORTS_HUNK.after + "\nimport torch\n"
HELPERS = "\nfrom vllm.platforms import current_platform\n" + HELPERS_HUNK.after

CLASS = '''

# --8<-- [start:logits_processor]
class LogitsProcessor(PluggableLayer):
    """Process logits and apply logits processors from sampling metadata."""

    def __init__(self, vocab_size: int, scale: float = 1.0) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.scale = scale

    def _apply_head(self, lm_head, hidden_states, embedding_bias):
        return lm_head.quant_method.apply(lm_head, hidden_states, bias=embedding_bias)

    def extra_repr(self) -> str:
        s = f"vocab_size={self.vocab_size}"
        return s
'''

METHOD = "\n" + GET_TOP_K_TOKENS

EXTRA_REPR = "\n    def extra_repr(self) -> str:\n"

PENDING = HEADER + CLASS
APPLIED = swap(
    swap(HEADER, "\nimport torch\n", IMPORTS),
    "from vllm.platforms import current_platform\n",
    HELPERS.lstrip("\n"),
) + swap(CLASS, EXTRA_REPR, METHOD + EXTRA_REPR)


def pending_and_applied(*changes: tuple[str, str]) -> tuple[str, str]:
    """The same changes made to the pending file and to the expected result."""
    return swapped(PENDING, *changes), swapped(APPLIED, *changes)


APPLY_HEAD = (
    "\n    def _apply_head(self, lm_head, hidden_states, embedding_bias):\n"
    "        return lm_head.quant_method.apply(lm_head, hidden_states, "
    "bias=embedding_bias)\n"
)


COSMETIC = {
    "comment above extra_repr stays with it": pending_and_applied(
        (
            "\n    def extra_repr(self)",
            "\n    # Shown by print(model).\n    def extra_repr(self)",
        )
    ),
    "extra_repr before _apply_head, single quotes in it": tuple(
        text + APPLY_HEAD
        for text in pending_and_applied(
            ('f"vocab_size={self.vocab_size}"', "f'vocab_size={self.vocab_size}'"),
            (APPLY_HEAD, ""),
        )
    ),
    "reworded module docstring, comment above import torch": pending_and_applied(
        ("compute logits from hidden_stats", "computes logits"),
        ("\nimport torch\n", "\n# Third party.\nimport torch\n"),
    ),
    "no module docstring": pending_and_applied(
        ('"""A layer that compute logits from hidden_stats."""\n\n', "")
    ),
    "current_platform imported with another name, wrapped": pending_and_applied(
        (
            "from vllm.platforms import current_platform\n",
            "from vllm.platforms import (\n    CpuArchEnum,\n    current_platform,\n)\n",
        )
    ),
    "cache already imported: only Callable is added": (
        swap(
            PENDING,
            "\nimport torch\n",
            "\nfrom functools import cache, partial\n\nimport torch\n",
        ),
        swap(
            APPLIED,
            "from collections.abc import Callable\nfrom functools import cache\n\nimport torch\n",
            "from functools import cache, partial\n\nfrom collections.abc import Callable\n\n"
            "import torch\n",
        ),
    ),
    "has_flashinfer already imported: not imported twice": (
        swap(
            PENDING,
            "\nimport torch\n",
            "\nimport torch\n\nfrom vllm.utils.flashinfer import has_flashinfer\n",
        ),
        swap(
            swap(
                APPLIED,
                "from vllm.platforms import current_platform\n"
                "from vllm.utils.flashinfer import has_flashinfer\n",
                "from vllm.platforms import current_platform\n",
            ),
            "\nimport torch\n",
            "\nimport torch\n\nfrom vllm.utils.flashinfer import has_flashinfer\n",
        ),
    ),
    "imports after current_platform: the helpers follow the import block": (
        swap(
            PENDING,
            "from vllm.platforms import current_platform\n",
            "from vllm.platforms import current_platform\nfrom vllm.utils import cdiv\n",
        ),
        swap(
            APPLIED,
            "from vllm.utils.flashinfer import has_flashinfer\n",
            "from vllm.utils.flashinfer import has_flashinfer\nfrom vllm.utils import cdiv\n",
        ),
    ),
    "a module statement right after the imports gets two blank lines": (
        swap(
            PENDING,
            "from vllm.platforms import current_platform\n",
            "from vllm.platforms import current_platform\n\nlogger = init_logger(__name__)\n",
        ),
        swap(
            APPLIED,
            "return impl(scores, k, sorted=True, deterministic=True)\n",
            "return impl(scores, k, sorted=True, deterministic=True)\n\n\n"
            "logger = init_logger(__name__)\n",
        ),
    ),
}

ALREADY_APPLIED = {
    "imports grouped with other names": swap(
        APPLIED,
        "from collections.abc import Callable\nfrom functools import cache\n",
        "from collections.abc import Callable, Iterable\nfrom functools import cache, partial\n",
    ),
    "helpers rewrapped, commented, single-quoted docstring": swap(
        swap(
            APPLIED,
            "    return impl(scores, k, sorted=True, deterministic=True)\n",
            "    # Sorted and deterministic, like torch.topk.\n"
            "    return impl(\n        scores,\n        k,\n        sorted=True,\n"
            "        deterministic=True,\n    )\n",
        ),
        '"""FlashInfer\'s radix top-k, or None for torch.topk."""',
        "'''Radix top-k from FlashInfer when it can run here.'''\n",
    ),
    "method elsewhere in the class, reworded docstring, single quotes": swap(
        swap(APPLIED, METHOD, ""),
        "\n    def _apply_head(",
        swap(
            swap(
                METHOD,
                '"""Vocab-parallel top-k without all-gathering full logits.',
                '"""Top-k over a vocab-parallel head.',
            ),
            '-float("inf")',
            "-float('inf')",
        )
        + "\n    def _apply_head(",
    ),
    "helpers and method with different blank lines": swap(
        swap(
            APPLIED,
            "    from flashinfer import top_k\n\n    return top_k\n",
            "    from flashinfer import top_k\n    return top_k\n",
        ),
        "\n        values, ids = _topk(logits, k)\n",
        "\n\n        values, ids = _topk(logits, k)\n",
    ),
}

LOGGED = (
    "    if not has_flashinfer():\n"
    "        logger.info_once(\n"
    '            "flashinfer is unavailable; vocab-parallel top-k uses torch.topk, "\n'
    '            "at roughly half the speed."\n'
    "        )\n"
    "        return None\n"
)

DRIFT = {
    "_flashinfer_topk logs when FlashInfer is missing (upstream 0.28.0)": swap(
        APPLIED,
        "    if not has_flashinfer():\n        return None\n",
        LOGGED,
    ),
    "_flashinfer_topk without @cache": swap(APPLIED, "@cache\n", ""),
    "_topk with another fallback": swap(
        APPLIED,
        "torch.topk(scores, k, dim=-1)",
        "torch.topk(scores, k, dim=-1, sorted=False)",
    ),
    "a pending file with its own _topk": swap(
        PENDING,
        "\n\n# --8<--",
        "\n\ndef _topk(scores, k):\n    return torch.topk(scores, k)\n\n\n# --8<--",
    ),
    "only one of the two helpers": swap(
        APPLIED,
        "def _topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:\n"
        "    impl = _flashinfer_topk()\n"
        "    if impl is None or not scores.is_cuda:\n"
        "        return torch.topk(scores, k, dim=-1)\n"
        "    return impl(scores, k, sorted=True, deterministic=True)\n",
        "",
    ),
    "helpers without the has_flashinfer import": swap(
        APPLIED, "from vllm.utils.flashinfer import has_flashinfer\n", ""
    ),
    "has_flashinfer imported from elsewhere": swap(
        PENDING,
        "\nimport torch\n",
        "\nimport torch\n\nfrom vllm.utils.import_utils import has_flashinfer\n",
    ),
    "get_top_k_tokens scales before selecting": swap(
        APPLIED,
        "        values, ids = _topk(logits, k)\n",
        "        logits = logits * self.scale\n        values, ids = _topk(logits, k)\n",
    ),
    "get_top_k_tokens with an extra keyword (upstream 0.33.0)": swap(
        APPLIED,
        "        embedding_bias: torch.Tensor | None = None,\n    ) -> tuple",
        "        embedding_bias: torch.Tensor | None = None,\n"
        "        *,\n        return_log_probs: bool = False,\n    ) -> tuple",
    ),
    "a pending file with its own get_top_k_tokens": swap(
        PENDING,
        EXTRA_REPR,
        "\n    def get_top_k_tokens(self, lm_head, hidden_states, k):\n"
        "        return self._apply_head(lm_head, hidden_states, None).topk(k)\n"
        + EXTRA_REPR,
    ),
    "extra_repr renamed": swap(PENDING, "def extra_repr(", "def __repr__("),
    "no _apply_head to call": swap(PENDING, "def _apply_head(", "def _project("),
    # The new method passes lm_head first: a fork's order would swap them.
    "_apply_head takes its tensors in another order": swap(
        PENDING,
        "    def _apply_head(self, lm_head, hidden_states, embedding_bias):",
        "    def _apply_head(self, hidden_states, lm_head, embedding_bias):",
    ),
    "tensor_model_parallel_all_gather not imported": swap(
        PENDING, "from vllm.distributed import tensor_model_parallel_all_gather\n", ""
    ),
    "no LogitsProcessor class": swap(
        PENDING, "class LogitsProcessor(", "class Logits("
    ),
    "no current_platform import": swap(
        PENDING, "from vllm.platforms import current_platform\n", ""
    ),
    "no import torch": swap(PENDING, "\nimport torch\n", "\nfrom torch import nn\n"),
    "Callable from typing": swap(
        PENDING, "\nimport torch\n", "\nfrom typing import Callable\n\nimport torch\n"
    ),
    "cache bound to lru_cache": swap(
        PENDING,
        "\nimport torch\n",
        "\nfrom functools import lru_cache as cache\n\nimport torch\n",
    ),
}


PATCHED = {"imports, helpers and method are inserted": (PENDING, APPLIED), **COSMETIC}
HUNKS = ["imports", "top-k helpers", "get_top_k_tokens"]


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_file_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(VocabParallelTopK, before, after)


def test_every_hunk_is_pending_then_applied() -> None:
    assert verdicts(VocabParallelTopK, PENDING) == dict.fromkeys(HUNKS, State.PENDING)
    assert verdicts(VocabParallelTopK, APPLIED) == dict.fromkeys(HUNKS, State.APPLIED)


@pytest.mark.parametrize("source", ALREADY_APPLIED.values(), ids=ALREADY_APPLIED.keys())
def test_cosmetic_variants_of_the_result_count_as_applied(source: str) -> None:
    assert_left_alone(VocabParallelTopK, source)
    assert set(verdicts(VocabParallelTopK, source).values()) == {State.APPLIED}


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused(source: str) -> None:
    assert refusal(VocabParallelTopK, source).edit == "vocab-parallel-topk"


def test_upstream_helper_is_named_in_the_refusal() -> None:
    source = DRIFT["_flashinfer_topk logs when FlashInfer is missing (upstream 0.28.0)"]
    (drifted,) = refusal(VocabParallelTopK, source).drifted
    assert drifted.hunk == "top-k helpers"
    assert "_flashinfer_topk" in drifted.reason
    assert "logger.info_once" in drifted.reason


def test_every_drifted_hunk_is_reported() -> None:
    source = swapped(
        PENDING,
        ("def extra_repr(", "def __repr__("),
        ("from vllm.platforms import current_platform\n", ""),
    )
    drifted = refusal(VocabParallelTopK, source).drifted
    assert [v.hunk for v in drifted] == ["top-k helpers", "get_top_k_tokens"]
    assert "extra_repr" in drifted[1].reason


def test_a_crlf_file_stays_crlf_inside_the_inserted_docstrings() -> None:
    assert output(VocabParallelTopK, crlf(PENDING)) == crlf(APPLIED)


# -- revert ------------------------------------------------------------------


HAS_FLASHINFER_AFTER_TORCH = (
    "\nimport torch\n",
    "\nimport torch\nfrom vllm.utils.flashinfer import has_flashinfer\n",
)

REVERTED_BY_MEANING = {
    # The forward never writes a grouped import: such a line may predate it.
    "imports grouped with other names stay": (
        ALREADY_APPLIED["imports grouped with other names"],
        swap(
            PENDING,
            "\nimport torch\n",
            "\nfrom collections.abc import Callable, Iterable\n"
            "from functools import cache, partial\n\nimport torch\n",
        ),
    ),
    **{
        name: (ALREADY_APPLIED[name], PENDING)
        for name in (
            "helpers rewrapped, commented, single-quoted docstring",
            "method elsewhere in the class, reworded docstring, single quotes",
            "helpers and method with different blank lines",
        )
    },
    "a comment right above the helpers goes with them": (
        swap(APPLIED, "\n@cache\n", "\n# FlashInfer when it can.\n@cache\n"),
        PENDING,
    ),
    "has_flashinfer away from current_platform may predate the edit": (
        swapped(
            APPLIED,
            ("from vllm.utils.flashinfer import has_flashinfer\n", ""),
            HAS_FLASHINFER_AFTER_TORCH,
        ),
        swap(PENDING, *HAS_FLASHINFER_AFTER_TORCH),
    ),
}

PARTLY_APPLIED = {
    "only the method": swap(PENDING, EXTRA_REPR, METHOD + EXTRA_REPR),
    "only the imports": swap(PENDING, "\nimport torch\n", IMPORTS),
    "imports and helpers, not the method": swap(APPLIED, METHOD, ""),
}

REVERT_REFUSED = {
    "cache decorates another function": (
        APPLIED + "\n\n@cache\ndef _vocab_size() -> int:\n    return 0\n",
        "imports",
        "`cache` read by `_vocab_size`",
    ),
    "Callable in another method's annotation": (
        swap(
            APPLIED,
            EXTRA_REPR,
            "\n    def hook(self) -> Callable[[], None] | None:\n        return None\n"
            + EXTRA_REPR,
        ),
        "imports",
        "`Callable` read by `LogitsProcessor.hook`",
    ),
    "has_flashinfer read by another function": (
        APPLIED + "\n\ndef _fast() -> bool:\n    return has_flashinfer()\n",
        "top-k helpers",
        "`has_flashinfer` read by `_fast`",
    ),
    "_topk called by another method": (
        swap(
            APPLIED,
            EXTRA_REPR,
            "\n    def top1(self, logits):\n        return _topk(logits, 1)\n"
            + EXTRA_REPR,
        ),
        "top-k helpers",
        "`_topk` read by `LogitsProcessor.top1`",
    ),
}


@pytest.mark.parametrize(
    "source", [after for _, after in PATCHED.values()], ids=PATCHED.keys()
)
def test_revert_gives_the_same_verdicts(source: str) -> None:
    forward = verdicts(VocabParallelTopK, source)
    assert verdicts(VocabParallelTopK, source, revert=True) == forward


@pytest.mark.parametrize(
    "source,expected", REVERTED_BY_MEANING.values(), ids=REVERTED_BY_MEANING.keys()
)
def test_an_applied_form_written_otherwise_is_reverted_by_meaning(
    source: str, expected: str
) -> None:
    assert set(verdicts(VocabParallelTopK, source).values()) == {State.APPLIED}
    assert_reverted_exactly(VocabParallelTopK, source, expected)


@pytest.mark.parametrize("source", PARTLY_APPLIED.values(), ids=PARTLY_APPLIED.keys())
def test_only_the_applied_hunks_are_reverted(source: str) -> None:
    states = set(verdicts(VocabParallelTopK, source).values())
    assert states == {State.APPLIED, State.PENDING}
    assert_reverted_exactly(VocabParallelTopK, source, PENDING)


@pytest.mark.parametrize(
    "source,hunk,reason", REVERT_REFUSED.values(), ids=REVERT_REFUSED.keys()
)
def test_a_name_other_code_reads_is_not_removed(
    source: str, hunk: str, reason: str
) -> None:
    assert_left_alone(VocabParallelTopK, source)
    (drifted,) = revert_refusal(VocabParallelTopK, source).drifted
    assert drifted.hunk == hunk
    assert reason in drifted.reason


def test_a_crlf_file_is_reverted_byte_for_byte() -> None:
    assert output(VocabParallelTopK, crlf(APPLIED), revert=True) == crlf(PENDING)
