"""Fixes: what the backport cannot serve is refused when the engine's
config is built, in one line that names the limit and the vLLM release that
lifts it, instead of a crash at load time or a silently wrong draft.

Each refusal is an edit of its own, because each limit is lifted by a
different release. Upstream has no refusal and no PR to cite: it supports
these inputs from the release named (read from each release's source).

`QUANTIZED_DRAFT` (vllm/config/vllm.py, vLLM 0.31.0): a DFlash2 draft with a
quantization method. `VllmConfig._refuse_quantized_dflash2_draft()` goes
right before `_get_quantization_config`, and its call right before
`self.try_verify_and_update_config()` in `__post_init__`. 0.31.0 is the
first release that serves one (read from the 0.28.0 to 0.33.0 sources):
its DFlash2 layers pass the quantization config to the convolutions'
kernel projections, which 0.28.0 to 0.30.0 build unquantized; its DFlash
model projects the draft's context K/V through each layer's quantization
method, where 0.30.0 multiplies by the raw weight, which a quantized layer
does not hold in a form `F.linear` takes; and it offsets a quantization
config's excluded layers to the draft's layer ids. 0.32.0 changes none of
that, and 0.33.0 generalises the mapping of layer names (ModelOpt configs
through the model's weight mapper).

`DRAFT_VOCABULARY` (vllm/config/vllm.py, vLLM 0.34.0):
`VllmConfig._refuse_dflash2_vocabulary_mismatch()` right before
`_is_default_v2_model_runner_model`, called right after
`self.try_verify_and_update_config()`. The DFlash2 candidate selector
indexes the draft's codebooks with the target head's token ids, so it needs
the two vocabularies equal; 0.34.0 serves a draft vocabulary smaller than
the target's, and no release through 0.34.0 maps a reduced draft
vocabulary (`draft_vocab_size`) for DFlash2.

`SPECULATORS_FORMAT` (vllm/transformers_utils/configs/speculators/base.py,
vLLM 0.29.0): a Speculators-format config whose `speculators_model_type` is
"dflash2", by both the ways vLLM reads one: as the model
(`SpeculatorsConfig.build_vllm_speculative_config`, right before its
`return result`) and as `speculative_config.model`
(`SpeculatorsConfig.extract_transformers_pre_trained_config`, right before
its check that the type is supported). 0.27.1 fails on it in pydantic's or
in the registry's words.

All three test for a DFlash2 draft by its architecture (or its Speculators
type): DFlash1 drafts are left as 0.27.1 serves them. Each raises
NotImplementedError, as 0.27.1 does for a method it does not support:
pydantic, which builds vLLM's configs, turns a ValueError into a validation
error of several lines, but lets this one through as it is. Given as
`speculative_config.model`, a Speculators config is parsed under vLLM's
config retry, which logs the same line once more before it gives up.
Reverted, each method and call goes with the comment above it.
"""

from __future__ import annotations

import ast

from ...framework.edit import Edit, Fix, Hunk, Judged, Role, drift, exactly_one
from ...framework.judging import is_call_of, method_before, statement_beside
from ...framework.meaning import same_meaning
from ...framework.names import module_bindings
from ...framework.source import Found, Source
from ...framework.vocabulary import State

CONFIG = "vllm/config/vllm.py"
SPECULATORS = "vllm/transformers_utils/configs/speculators/base.py"
CONFIG_CLASS = "VllmConfig"
ANCHOR_CALL = "try_verify_and_update_config"

QUANTIZED = "_refuse_quantized_dflash2_draft"
QUANTIZED_ANCHOR = "_get_quantization_config"
QUANTIZED_SOURCE = f'''\
def {QUANTIZED}(self) -> None:
    """Refuse a quantized DFlash2 draft in one line, before it is loaded."""
    spec = self.speculative_config
    if spec is None or spec.method != "dflash" or spec.draft_model_config is None:
        return
    draft = spec.draft_model_config
    if "DFlash2DraftModel" not in (draft.architectures or []):
        return
    if draft.quantization is not None:
        raise NotImplementedError(
            f"DFlash2 draft {{draft.model}} is quantized ({{draft.quantization}}): "
            "this DFlash2 backport to vLLM 0.27.1 serves unquantized drafts "
            "only; vLLM 0.31.0 is the first release that serves quantized ones"
        )
'''

#: What earlier versions of this tool wrote: their message named 0.33.0.
#: A tree they patched holds this edit, to be reverted or left as it is.
QUANTIZED_EARLIER = (QUANTIZED_SOURCE.replace("vLLM 0.31.0 is", "vLLM 0.33.0 is"),)

VOCABULARY = "_refuse_dflash2_vocabulary_mismatch"
VOCABULARY_ANCHOR = "_is_default_v2_model_runner_model"
VOCABULARY_SOURCE = f'''\
def {VOCABULARY}(self) -> None:
    """Refuse, in one line, a DFlash2 draft whose vocabulary is not the
    target's: its candidate selector indexes the draft's codebooks with the
    target head's token ids."""
    spec = self.speculative_config
    if (
        spec is None
        or spec.method != "dflash"
        or spec.draft_model_config is None
        or self.model_config is None
    ):
        return
    draft = spec.draft_model_config
    if "DFlash2DraftModel" not in (draft.architectures or []):
        return
    target_vocab_size = self.model_config.get_vocab_size()
    draft_vocab_size = draft.get_vocab_size()
    if draft_vocab_size != target_vocab_size:
        lifted = (
            "vLLM 0.34.0 is the first release that serves a draft vocabulary "
            "smaller than the target's"
            if draft_vocab_size < target_vocab_size
            else "vLLM 0.34.0 serves only a draft vocabulary no larger than "
            "the target's"
        )
        raise NotImplementedError(
            f"DFlash2 draft {{draft.model}} has a vocabulary of "
            f"{{draft_vocab_size}} tokens and the target {{target_vocab_size}}: "
            "this DFlash2 backport to vLLM 0.27.1 needs them equal; "
            f"{{lifted}}"
        )
    reduced = getattr(draft.hf_config, "draft_vocab_size", None)
    if reduced is not None and reduced != draft_vocab_size:
        raise NotImplementedError(
            f"DFlash2 draft {{draft.model}} declares a reduced draft vocabulary "
            f"(draft_vocab_size {{reduced}} of {{draft_vocab_size}}): this DFlash2 "
            "backport to vLLM 0.27.1 drafts over the whole vocabulary, and no "
            "vLLM release through 0.34.0 maps a reduced one for DFlash2"
        )
'''

SPECULATORS_CLASS = "SpeculatorsConfig"
TYPE_ROUTE = "extract_transformers_pre_trained_config"
TYPE_TEST = "speculators_model_type not in SUPPORTED_SPECULATORS_TYPES"
METHOD_ROUTE = "build_vllm_speculative_config"
SPECULATORS_MESSAGE = (
    '"Speculators-format dflash2 checkpoints are not read by this DFlash2 "\n'
    '"backport to vLLM 0.27.1, which reads a DFlash2 draft in its own format "\n'
    "\"(architectures ['DFlash2DraftModel']); vLLM 0.29.0 is the first release \"\n"
    '"that reads the Speculators format for DFlash2"'
)
_RAISE = "    raise NotImplementedError(\n" + "".join(
    f"        {line}\n" for line in SPECULATORS_MESSAGE.splitlines()
) + "    )\n"
TYPE_REFUSAL = 'if speculators_model_type == "dflash2":\n' + _RAISE
METHOD_REFUSAL = 'if result["method"] == "dflash2":\n' + _RAISE
_SPECULATORS_COMMENT = (
    "# The backport reads DFlash2 drafts in their own format only: refused\n"
    "# here in one line, not in a validation error that lists methods.\n"
)

# -- hunks -------------------------------------------------------------------------

QUANTIZED_METHOD = Hunk(
    "quantized draft refusal",
    f"class {CONFIG_CLASS}, right before {QUANTIZED_ANCHOR}",
    None,
    QUANTIZED_SOURCE,
    "A quantized DFlash2 draft is refused in one line naming vLLM 0.31.0, "
    "the first release that serves one, instead of failing at load time.",
)
QUANTIZED_CALL = Hunk(
    "quantized draft refusal call",
    f"{CONFIG_CLASS}.__post_init__, right before `self.{ANCHOR_CALL}()`",
    None,
    f"\nself.{QUANTIZED}()\n",
    QUANTIZED_METHOD.why,
)
VOCABULARY_METHOD = Hunk(
    "vocabulary refusal",
    f"class {CONFIG_CLASS}, right before {VOCABULARY_ANCHOR}",
    None,
    VOCABULARY_SOURCE,
    "A DFlash2 draft whose vocabulary is not the target's is refused in one "
    "line (vLLM 0.34.0 serves a smaller one), instead of drafting from "
    "mismatched token ids.",
)
VOCABULARY_CALL = Hunk(
    "vocabulary refusal call",
    f"{CONFIG_CLASS}.__post_init__, right after `self.{ANCHOR_CALL}()`",
    None,
    f"\nself.{VOCABULARY}()\n",
    VOCABULARY_METHOD.why,
)
_SPECULATORS_WHY = (
    "A Speculators-format dflash2 config is refused in one line naming vLLM "
    "0.29.0, which reads it, instead of an unreadable validation error."
)
TYPE_HUNK = Hunk(
    "speculative_config.model route",
    f"{SPECULATORS_CLASS}.{TYPE_ROUTE}, right before `if {TYPE_TEST}:`",
    None,
    _SPECULATORS_COMMENT + TYPE_REFUSAL,
    _SPECULATORS_WHY,
)
METHOD_HUNK = Hunk(
    "model route",
    f"{SPECULATORS_CLASS}.{METHOD_ROUTE}, right before `return result`",
    None,
    _SPECULATORS_COMMENT + METHOD_REFUSAL,
    _SPECULATORS_WHY,
)


# -- judges ------------------------------------------------------------------------


def _config_parts(source: Source) -> tuple[Found, Found] | Judged:
    cls = exactly_one(
        source.module.classes(CONFIG_CLASS), f"one module-level class {CONFIG_CLASS}"
    )
    if isinstance(cls, Judged):
        return cls
    post_init = exactly_one(cls.defs("__post_init__"), f"one method {CONFIG_CLASS}.__post_init__")
    return post_init if isinstance(post_init, Judged) else (cls, post_init)


def _refusal(
    source: Source,
    method: Hunk,
    name: str,
    anchor: str,
    call: Hunk,
    after: bool,
    earlier: tuple[str, ...] = (),
) -> dict[str, Judged]:
    parts = _config_parts(source)
    if isinstance(parts, Judged):
        return {method.name: parts, call.name: parts}
    cls, post_init = parts
    return {
        method.name: method_before(
            cls,
            method.after,
            anchor,
            expected=f"{CONFIG_CLASS}.{name} as the backport writes it",
            remedy="remove or rename it",
            earlier=earlier,
        ),
        call.name: statement_beside(
            post_init,
            lambda s: is_call_of(s, "self", ANCHOR_CALL),
            f"`self.{ANCHOR_CALL}()`",
            call.after,
            after=after,
        ),
    }


def judge_quantized(source: Source) -> dict[str, Judged]:
    return _refusal(
        source, QUANTIZED_METHOD, QUANTIZED, QUANTIZED_ANCHOR, QUANTIZED_CALL, after=False,
        earlier=QUANTIZED_EARLIER,
    )


def judge_vocabulary(source: Source) -> dict[str, Judged]:
    return _refusal(
        source, VOCABULARY_METHOD, VOCABULARY, VOCABULARY_ANCHOR, VOCABULARY_CALL, after=True
    )


def _mentions_dflash2(test: ast.expr) -> bool:
    return any(isinstance(n, ast.Constant) and n.value == "dflash2" for n in ast.walk(test))


def judge_speculators(source: Source) -> dict[str, Judged]:
    cls = exactly_one(
        source.module.classes(SPECULATORS_CLASS), f"one module-level class {SPECULATORS_CLASS}"
    )
    if isinstance(cls, Judged):
        return {TYPE_HUNK.name: cls, METHOD_HUNK.name: cls}
    judged = {}
    for hunk, method, is_anchor, anchor, code in (
        (
            TYPE_HUNK,
            TYPE_ROUTE,
            lambda s: isinstance(s, ast.If) and same_meaning(s.test, TYPE_TEST),
            f"`if {TYPE_TEST}:`",
            TYPE_REFUSAL,
        ),
        (
            METHOD_HUNK,
            METHOD_ROUTE,
            lambda s: same_meaning(s, "return result"),
            "`return result`",
            METHOD_REFUSAL,
        ),
    ):
        found = exactly_one(cls.defs(method), f"one method {SPECULATORS_CLASS}.{method}")
        if isinstance(found, Judged):
            judged[hunk.name] = found
            continue
        beside = statement_beside(found, is_anchor, anchor, code, after=False)
        # Code of its own for "dflash2" (0.29.0 maps it to "dflash") is not
        # ours to add to, nor to take out.
        tests = found.walk(lambda s: isinstance(s, ast.If) and _mentions_dflash2(s.test))
        ours = 1 if beside.state is State.APPLIED else 0
        if beside.state is not State.DRIFT and len(tests) > ours:
            beside = drift(
                f'no test for "dflash2" in {SPECULATORS_CLASS}.{method} but the '
                "backport's refusal",
                f"{source.describe(tests[0].node.test)} handled otherwise",  # type: ignore[attr-defined]
            )
        judged[hunk.name] = beside
    if "SUPPORTED_SPECULATORS_TYPES" not in module_bindings(source.tree.body):
        judged[TYPE_HUNK.name] = drift(
            "`SUPPORTED_SPECULATORS_TYPES` imported at module level", "none"
        )
    return judged


QUANTIZED_DRAFT = Edit(
    "refuse-quant-draft",
    CONFIG,
    "a quantized DFlash2 draft is refused in one line when the engine's "
    "config is built",
    Role.SEAM,
    (QUANTIZED_METHOD, QUANTIZED_CALL),
    judge_quantized,
    writer="refusals:QuantizedDraft",
    fix=Fix("", "0.31.0"),
)

DRAFT_VOCABULARY = Edit(
    "refuse-vocab-draft",
    CONFIG,
    "a DFlash2 draft whose vocabulary is not the target's is refused in one "
    "line when the engine's config is built",
    Role.SEAM,
    (VOCABULARY_METHOD, VOCABULARY_CALL),
    judge_vocabulary,
    writer="refusals:DraftVocabulary",
    fix=Fix("", "0.34.0"),
)

SPECULATORS_FORMAT = Edit(
    "refuse-speculators",
    SPECULATORS,
    "a Speculators-format dflash2 config is refused in one line, whichever "
    "way it is given",
    Role.SEAM,
    (TYPE_HUNK, METHOD_HUNK),
    judge_speculators,
    writer="refusals:SpeculatorsFormat",
    fix=Fix("", "0.29.0"),
)
