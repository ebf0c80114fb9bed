import pytest
from dflash2_backport.transforms.edits.causality.judge import HUNK
from dflash2_backport.transforms.edits.causality.writer import Causality

from dflash2_backport.transforms.framework.vocabulary import Direction

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted,
    case,
    refusal,
    revert_refusal,
    swap,
)

OLD_FUNCTION = "\n" + HUNK.before
NEW_FUNCTION = "\n" + HUNK.after
OLD_DOCSTRING = (
    '    """``dflash_config.causal`` overrides all layers; '
    'else only SWA layers causal."""\n'
)
BEFORE = """
_SLIDING_ATTENTION = "sliding_attention"

"""
AFTER = """

def dflash_has_any_non_causal(config: Qwen3Config) -> bool:
    return not all(
        _dflash_layer_causal(config, i) for i in range(config.num_hidden_layers)
    )
"""
PENDING = BEFORE + OLD_FUNCTION + AFTER
APPLIED = BEFORE + NEW_FUNCTION + AFTER


def two_space(function: str) -> str:
    return function.replace("    ", "  ")


# before -> after; the fallback and comments outside the replaced lines keep
# their own formatting.
COSMETIC = {
    "comments inside the function stay": (
        '''
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            """``dflash_config.causal`` overrides all layers; else only SWA layers causal."""
            # an explicit setting wins
            override = (getattr(config, "dflash_config", None) or {}).get("causal")
            if override is not None:  # set by the checkpoint
                return override
            # legacy: only sliding-window layers are causal
            layer_types = getattr(config, "layer_types", None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        ''',
        '''
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            """Resolve explicit causality before falling back to legacy layer defaults."""
            is_causal = getattr(config, "is_causal", None)
            if is_causal is not None:
                return bool(is_causal)
            # an explicit setting wins
            override = (getattr(config, "dflash_config", None) or {}).get("causal")
            if override is not None:  # set by the checkpoint
                return bool(override)
            # legacy: only sliding-window layers are causal
            layer_types = getattr(config, "layer_types", None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        ''',
    ),
    "two-space indentation is kept": (two_space(OLD_FUNCTION), two_space(NEW_FUNCTION)),
    "a method of the same name elsewhere is not the target": (
        "class Other:\n"
        "    def _dflash_layer_causal(self):\n"
        "        return True\n" + PENDING,
        "class Other:\n"
        "    def _dflash_layer_causal(self):\n"
        "        return True\n" + APPLIED,
    ),
}

_SINGLE_QUOTES = """
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            '''Decide whether layer `layer_idx` attends causally.'''
            override = (getattr(config, 'dflash_config', None) or {}).get('causal')
            if override is not None:
                return override
            layer_types = getattr(config, 'layer_types', None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        """
_REWRAPPED = '''
        def _dflash_layer_causal(
            config: Qwen3Config,
            layer_idx: int,
        ) -> bool:
            """``dflash_config.causal`` overrides all layers; else only SWA layers causal."""

            override = (
                getattr(config, "dflash_config", None,) or {}
            ).get("causal",)

            if override is not None: return (override)

            layer_types = getattr(config, "layer_types", None)
            return (
                bool(layer_types)
                and layer_types[layer_idx] == _SLIDING_ATTENTION
            )
        '''

# Patched, but the edit overwrites what a revert cannot know again: any
# docstring, or none, gives way to the edited one, and `bool(override)`
# replaces the raw value however it was written. Reverting gives 0.27.1's
# docstring and a plain `override`, every other line as it was.
# before -> after -> reverted
LOSSY = {
    "single quotes and a reworded docstring": (
        _SINGLE_QUOTES,
        '''
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            """Resolve explicit causality before falling back to legacy layer defaults."""
            is_causal = getattr(config, "is_causal", None)
            if is_causal is not None:
                return bool(is_causal)
            override = (getattr(config, 'dflash_config', None) or {}).get('causal')
            if override is not None:
                return bool(override)
            layer_types = getattr(config, 'layer_types', None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        ''',
        swap(
            _SINGLE_QUOTES,
            "'''Decide whether layer `layer_idx` attends causally.'''",
            OLD_DOCSTRING.strip(),
        ),
    ),
    "no docstring at all": (
        OLD_FUNCTION.replace(OLD_DOCSTRING, ""),
        NEW_FUNCTION,
        OLD_FUNCTION,
    ),
    "extra blank lines, other wrapping, trailing commas, parentheses": (
        _REWRAPPED,
        '''
        def _dflash_layer_causal(
            config: Qwen3Config,
            layer_idx: int,
        ) -> bool:
            """Resolve explicit causality before falling back to legacy layer defaults."""
            is_causal = getattr(config, "is_causal", None)
            if is_causal is not None:
                return bool(is_causal)

            override = (
                getattr(config, "dflash_config", None,) or {}
            ).get("causal",)

            if override is not None: return bool(override)

            layer_types = getattr(config, "layer_types", None)
            return (
                bool(layer_types)
                and layer_types[layer_idx] == _SLIDING_ATTENTION
            )
        ''',
        swap(_REWRAPPED, "return (override)", "return override"),
    ),
}

# Already edited, written differently: left exactly as it is.
APPLIED_VARIANTS = {
    "upstream docstring reworded, comments, single quotes": '''
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            """Top-level is_causal, then dflash_config.causal, then layer types."""
            is_causal = getattr(config, 'is_causal', None)
            if is_causal is not None:  # DFlash2
                return bool(is_causal)
            override = (getattr(config, 'dflash_config', None) or {}).get('causal')
            if override is not None:
                return bool(override)
            layer_types = getattr(config, 'layer_types', None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        ''',
    "no docstring, comments, one-line ifs, parentheses": """
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            # DFlash2 states it at the top level
            is_causal = getattr(config, "is_causal", None)
            if is_causal is not None: return bool(is_causal)

            # an explicit setting wins
            override = (getattr(config, "dflash_config", None) or {}).get("causal")
            if override is not None:
                return(bool(override))  # set by the checkpoint
            layer_types = getattr(config, "layer_types", None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        """,
    "docstring and is_causal on one line, a comment above them": '''
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            # a DFlash2 config may state it at the top level
            """Resolve explicit causality."""; is_causal = getattr(config, "is_causal", None)
            if is_causal is not None:
                return bool(is_causal)
            override = (getattr(config, "dflash_config", None) or {}).get("causal")
            if override is not None:
                return bool(override)
            layer_types = getattr(config, "layer_types", None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        ''',
}

# Reverted by meaning: the `is_causal` lines (and comments on them) go,
# 0.27.1's docstring comes first and the override is raw again; the rest keeps
# its formatting and comments. applied -> reverted
REVERTED = {
    "upstream docstring reworded, comments, single quotes": (
        APPLIED_VARIANTS["upstream docstring reworded, comments, single quotes"],
        '''
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            """``dflash_config.causal`` overrides all layers; else only SWA layers causal."""
            override = (getattr(config, 'dflash_config', None) or {}).get('causal')
            if override is not None:
                return override
            layer_types = getattr(config, 'layer_types', None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        ''',
    ),
    "no docstring, comments, one-line ifs, parentheses": (
        APPLIED_VARIANTS["no docstring, comments, one-line ifs, parentheses"],
        '''
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            """``dflash_config.causal`` overrides all layers; else only SWA layers causal."""

            # an explicit setting wins
            override = (getattr(config, "dflash_config", None) or {}).get("causal")
            if override is not None:
                return(override)  # set by the checkpoint
            layer_types = getattr(config, "layer_types", None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        ''',
    ),
    "docstring and is_causal on one line, a comment above them": (
        APPLIED_VARIANTS["docstring and is_causal on one line, a comment above them"],
        '''
        def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
            # a DFlash2 config may state it at the top level
            """``dflash_config.causal`` overrides all layers; else only SWA layers causal."""
            override = (getattr(config, "dflash_config", None) or {}).get("causal")
            if override is not None:
                return override
            layer_types = getattr(config, "layer_types", None)
            return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
        ''',
    ),
}

_FALLBACK = """\
    layer_types = getattr(config, "layer_types", None)
    return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION
"""

DRIFT = {
    "a changed fallback below the anchor": PENDING.replace(
        "== _SLIDING_ATTENTION", '== "full_attention"'
    ),
    "a changed fallback below the edited lines": APPLIED.replace(
        "bool(layer_types) and", "layer_types is not None and"
    ),
    "the override negated": PENDING.replace("return override", "return not override"),
    "half edited: is_causal first, raw override": APPLIED.replace(
        "return bool(override)", "return override"
    ),
    "is_causal checked after the override": """
def _dflash_layer_causal(config: Qwen3Config, layer_idx: int) -> bool:
    override = (getattr(config, "dflash_config", None) or {}).get("causal")
    if override is not None:
        return bool(override)
    is_causal = getattr(config, "is_causal", None)
    if is_causal is not None:
        return bool(is_causal)
"""
    + _FALLBACK,
    "an extra parameter": PENDING.replace(
        "layer_idx: int) -> bool", "layer_idx: int, strict: bool = False) -> bool"
    ),
    "a decorator": PENDING.replace(
        "def _dflash_layer_causal", "@functools.cache\ndef _dflash_layer_causal"
    ),
    "the function is missing": PENDING.replace("_dflash_layer_causal", "_is_causal"),
    "the function is defined twice": PENDING + APPLIED,
}


PATCHED = {"0.27.1's function reads is_causal first": (PENDING, APPLIED), **COSMETIC}
LEFT_ALONE = {"the edited function": APPLIED, **APPLIED_VARIANTS}


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_function_is_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(Causality, before, after)


@pytest.mark.parametrize("source", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_applied_function_is_left_alone(source: str) -> None:
    assert_left_alone(Causality, source)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_any_other_function_is_refused(source: str) -> None:
    refused = refusal(Causality, source)
    assert refused.edit == "causality"
    assert [v.hunk for v in refused.drifted] == ["is_causal first"]


def test_refusal_names_the_statement_that_differs() -> None:
    message = str(refusal(Causality, DRIFT["a changed fallback below the anchor"]))
    assert "'full_attention'" in message
    assert "0.27.1's" in message


@pytest.mark.parametrize("before,after,reverted", LOSSY.values(), ids=LOSSY.keys())
def test_what_the_edit_overwrote_reverts_to_0271s(
    before: str, after: str, reverted: str
) -> None:
    checks = case(Causality)
    checks.assertCodemod(before, after)
    checks.assertCodemod(after, after)
    checks.assertCodemod(before, before, direction=Direction.REVERT)
    assert_reverted(Causality, after, reverted)


@pytest.mark.parametrize("applied,reverted", REVERTED.values(), ids=REVERTED.keys())
def test_applied_function_written_differently_is_reverted_by_meaning(
    applied: str, reverted: str
) -> None:
    assert_reverted(Causality, applied, reverted)


@pytest.mark.parametrize("source", DRIFT.values(), ids=DRIFT.keys())
def test_reverting_refuses_the_same_functions(source: str) -> None:
    drifted = revert_refusal(Causality, source).drifted
    assert [v.hunk for v in drifted] == ["is_causal first"]
