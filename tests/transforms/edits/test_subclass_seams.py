import textwrap

import pytest

from dflash2_backport.transforms.edits.subclass_seams.judge import (
    LAYER_ATTRIBUTE,
    LAYERS,
    MODEL,
    MODEL_ATTRIBUTE,
)
from dflash2_backport.transforms.edits.subclass_seams.writer import SubclassSeams
from dflash2_backport.transforms.framework.edit import Hunk

from .._cases import (
    assert_left_alone,
    assert_patched,
    assert_reverted,
    case,
    refusal,
    revert_refusal,
)

LAYER = """
class DFlashQwen3DecoderLayer(nn.Module):
    def __init__(self, vllm_config, *, config, layer_idx, prefix=""):
        super().__init__()
"""

#: The module with a slot for each hunk: the two classes as 0.27.1 ships
#: them, the hunks' own lines filled in from their files.
MODULE = LAYER + """

@support_torch_compile
class DFlashQwen3Model(nn.Module):
{layer_attribute}    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_substr={{"midlayer.": "layers.0."}},
    )

    def __init__(self, *, vllm_config, start_layer_id=0, prefix=""):
        super().__init__()
        current_vllm_config = get_current_vllm_config()
{layers}

class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):
{model_attribute}    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        nn.Module.__init__(self)
{model}"""


def _module(side: str) -> str:
    """MODULE with each hunk's code as it ships ("before") or as the edit
    leaves it ("after")."""

    def attribute(hunk: Hunk) -> str:
        code = getattr(hunk, side)
        return textwrap.indent(code, "    ") + "\n" if code else ""

    return MODULE.format(
        layer_attribute=attribute(LAYER_ATTRIBUTE),
        layers=textwrap.indent(getattr(LAYERS, side), " " * 8),
        model_attribute=attribute(MODEL_ATTRIBUTE),
        model=textwrap.indent(getattr(MODEL, side), " " * 8),
    )


PENDING = _module("before")
APPLIED = _module("after")

_MAPPER = """\
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_substr={"midlayer.": "layers.0."},
    )
"""
_MAPPER_WITH_RENAMES = """\
    hf_to_vllm_mapper = WeightsMapper(
        orig_to_new_substr={
            "midlayer.": "layers.0.",
            "encoder.output_norm_enc.": "hidden_norm.",
            "encoder.fc.": "fc.",
        },
    )
"""
# before -> after
COSMETIC = {
    "new weight-name renames in the mapper (as in 0.28.0)": (
        PENDING.replace(_MAPPER, _MAPPER_WITH_RENAMES),
        APPLIED.replace(_MAPPER, _MAPPER_WITH_RENAMES),
    ),
    "comments, reordered keywords, no trailing comma, one line": (
        LAYER
        + """
class DFlashQwen3Model(nn.Module):
    # weights come from the EAGLE-style checkpoint layout
    hf_to_vllm_mapper = WeightsMapper(orig_to_new_substr={"midlayer.": "layers.0."})

    def __init__(self, *, vllm_config, start_layer_id=0, prefix=""):
        self.layers = nn.ModuleList([
            # one decoder layer per draft layer
            DFlashQwen3DecoderLayer(
                current_vllm_config,
                prefix=maybe_prefix(prefix, f"layers.{layer_idx + start_layer_id}"),
                layer_idx=layer_idx,
                config=self.config,
                quant_config=self.quant_config,
                cache_config=current_vllm_config.cache_config
            )
            for layer_idx in range(self.config.num_hidden_layers)
        ])


class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        self.model = DFlashQwen3Model(prefix=maybe_prefix(prefix, 'model'), start_layer_id=target_layer_num, vllm_config=vllm_config)  # noqa: E501
""",
        LAYER
        + """
class DFlashQwen3Model(nn.Module):
    decoder_layer_cls = DFlashQwen3DecoderLayer

    # weights come from the EAGLE-style checkpoint layout
    hf_to_vllm_mapper = WeightsMapper(orig_to_new_substr={"midlayer.": "layers.0."})

    def __init__(self, *, vllm_config, start_layer_id=0, prefix=""):
        self.layers = nn.ModuleList([
            # one decoder layer per draft layer
            self.decoder_layer_cls(
                current_vllm_config,
                prefix=maybe_prefix(prefix, f"layers.{layer_idx + start_layer_id}"),
                layer_idx=layer_idx,
                config=self.config,
                quant_config=self.quant_config,
                cache_config=current_vllm_config.cache_config
            )
            for layer_idx in range(self.config.num_hidden_layers)
        ])


class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):
    model_cls = DFlashQwen3Model

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        self.model = self.model_cls(prefix=maybe_prefix(prefix, 'model'), start_layer_id=target_layer_num, vllm_config=vllm_config)  # noqa: E501
""",
    ),
    "class docstrings stay first": (
        LAYER
        + '''
class DFlashQwen3Model(nn.Module):
    """The DFlash1 backbone."""

    def __init__(self, *, vllm_config, start_layer_id=0, prefix=""):
        self.layers = nn.ModuleList(
            [
                DFlashQwen3DecoderLayer(
                    current_vllm_config,
                    config=self.config,
                    layer_idx=layer_idx,
                    cache_config=current_vllm_config.cache_config,
                    quant_config=self.quant_config,
                    prefix=maybe_prefix(prefix, f"layers.{layer_idx + start_layer_id}"),
                )
                for layer_idx in range(self.config.num_hidden_layers)
            ]
        )


class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):
    """The DFlash1 draft head."""
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        self.model = DFlashQwen3Model(
            vllm_config=vllm_config,
            prefix=maybe_prefix(prefix, "model"),
            start_layer_id=target_layer_num,
        )
''',
        LAYER
        + '''
class DFlashQwen3Model(nn.Module):
    """The DFlash1 backbone."""

    decoder_layer_cls = DFlashQwen3DecoderLayer

    def __init__(self, *, vllm_config, start_layer_id=0, prefix=""):
        self.layers = nn.ModuleList(
            [
                self.decoder_layer_cls(
                    current_vllm_config,
                    config=self.config,
                    layer_idx=layer_idx,
                    cache_config=current_vllm_config.cache_config,
                    quant_config=self.quant_config,
                    prefix=maybe_prefix(prefix, f"layers.{layer_idx + start_layer_id}"),
                )
                for layer_idx in range(self.config.num_hidden_layers)
            ]
        )


class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):
    """The DFlash1 draft head."""
    model_cls = DFlashQwen3Model

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        self.model = self.model_cls(
            vllm_config=vllm_config,
            prefix=maybe_prefix(prefix, "model"),
            start_layer_id=target_layer_num,
        )
''',
    ),
    "the layer class may come from a star import": (
        "from .qwen3_dflash_layers import *\n" + PENDING.replace(LAYER, ""),
        "from .qwen3_dflash_layers import *\n" + APPLIED.replace(LAYER, ""),
    ),
    "the layer class is imported rather than defined": (
        "from .qwen3_dflash_layers import DFlashQwen3DecoderLayer\n"
        + PENDING.replace(LAYER, ""),
        "from .qwen3_dflash_layers import DFlashQwen3DecoderLayer\n"
        + APPLIED.replace(LAYER, ""),
    ),
}

# Partly applied. `after` no longer shows which hunks `before` already had, so
# reverting it undoes all four; reverting `before` undoes only the hunks it
# has. Either way the result is PENDING. before -> after
PARTIAL = {
    "attributes already there, constructions not yet": (
        APPLIED.replace("self.decoder_layer_cls(", "DFlashQwen3DecoderLayer(").replace(
            "self.model_cls(", "DFlashQwen3Model("
        ),
        APPLIED,
    ),
    "constructions already rerouted, attributes not yet": (
        PENDING.replace(
            "DFlashQwen3DecoderLayer(\n", "self.decoder_layer_cls(\n"
        ).replace("= DFlashQwen3Model(", "= self.model_cls("),
        APPLIED,
    ),
}

# Already edited, written differently: left exactly as it is.
APPLIED_VARIANTS = {
    "attributes after the mapper and after __init__": APPLIED.replace(
        "    decoder_layer_cls = DFlashQwen3DecoderLayer\n\n", ""
    )
    .replace(_MAPPER, _MAPPER + "    decoder_layer_cls = DFlashQwen3DecoderLayer\n")
    .replace("    model_cls = DFlashQwen3Model\n\n", "")
    + "\n    model_cls = DFlashQwen3Model\n",
    "annotated attribute": APPLIED.replace(
        "decoder_layer_cls = DFlashQwen3DecoderLayer",
        "decoder_layer_cls: type[nn.Module] = DFlashQwen3DecoderLayer",
    ),
    "reordered keywords in the rerouted construction": APPLIED.replace(
        """            vllm_config=vllm_config,
            prefix=maybe_prefix(prefix, "model"),
""",
        """            prefix=maybe_prefix(prefix, "model"),
            vllm_config=vllm_config,
""",
    ),
}

# Reverted by meaning: every binding of an attribute goes, with comments on it,
# and the next member keeps the wider separation (the one it had before the
# edit, where the edit inserts); rerouted constructions name the class again,
# their arguments as written. applied -> reverted
REVERTED = {
    **{
        name: (APPLIED_VARIANTS[name], PENDING)
        for name in (
            "attributes after the mapper and after __init__",
            "annotated attribute",
        )
    },
    "reordered keywords in the rerouted construction": (
        APPLIED_VARIANTS["reordered keywords in the rerouted construction"],
        PENDING.replace(
            """            vllm_config=vllm_config,
            prefix=maybe_prefix(prefix, "model"),
""",
            """            prefix=maybe_prefix(prefix, "model"),
            vllm_config=vllm_config,
""",
        ),
    ),
    "a commented attribute, and one set twice": (
        APPLIED.replace(
            "    model_cls = DFlashQwen3Model\n",
            "    # subclasses swap in their own model\n    model_cls = DFlashQwen3Model\n",
        ).replace(
            _MAPPER,
            _MAPPER + "    decoder_layer_cls = DFlashQwen3DecoderLayer  # again\n",
        ),
        PENDING,
    ),
    "an attribute sharing its line": (
        APPLIED.replace(
            "    model_cls = DFlashQwen3Model\n",
            "    model_cls = DFlashQwen3Model; supports_dflash2 = True\n",
        ),
        PENDING.replace(
            "class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):\n",
            "class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):\n"
            "    supports_dflash2 = True\n\n",
        ),
    ),
}

# source -> the hunks that drift
DRIFT = {
    "layers built with another class": (
        PENDING.replace("DFlashQwen3DecoderLayer(\n", "MyDecoderLayer(\n"),
        ["layers via decoder_layer_cls"],
    ),
    "model built with another class": (
        PENDING.replace("= DFlashQwen3Model(", "= MyModel("),
        ["model via model_cls"],
    ),
    "attribute with another value": (
        APPLIED.replace("model_cls = DFlashQwen3Model", "model_cls = MyModel"),
        ["model_cls attribute"],
    ),
    "attribute defined twice, once with another value": (
        APPLIED.replace(_MAPPER, _MAPPER + "    decoder_layer_cls = None\n"),
        ["decoder_layer_cls attribute"],
    ),
    "seam name taken by a property": (
        PENDING.replace(
            _MAPPER,
            _MAPPER
            + "\n    @property\n    def decoder_layer_cls(self):\n"
            + "        return DFlashQwen3DecoderLayer\n",
        ),
        ["decoder_layer_cls attribute"],
    ),
    "layers construction missing": (
        PENDING.replace("self.layers = nn.ModuleList(", "self.blocks = nn.ModuleList("),
        ["layers via decoder_layer_cls"],
    ),
    "layers built without a list": (
        APPLIED.replace("self.layers = nn.ModuleList(", "self.layers = make_layers("),
        ["layers via decoder_layer_cls"],
    ),
    "model built with other arguments": (
        PENDING.replace("start_layer_id=target_layer_num", "start_layer_id=0"),
        ["model via model_cls"],
    ),
    "rerouted model without start_layer_id": (
        APPLIED.replace("            start_layer_id=target_layer_num,\n", ""),
        ["model via model_cls"],
    ),
    "layers iterate over something else": (
        PENDING.replace(
            "range(self.config.num_hidden_layers)", "range(self.config.num_layers)"
        ),
        ["layers via decoder_layer_cls"],
    ),
    "the wrapper class is missing": (
        PENDING[: PENDING.index("\n\nclass DFlashQwen3ForCausalLM")] + "\n",
        ["model_cls attribute", "model via model_cls"],
    ),
    "no __init__ in the wrapper": (
        PENDING.replace(
            "class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):\n"
            '    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):',
            "class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):\n"
            '    def setup(self, *, vllm_config: VllmConfig, prefix: str = ""):',
        ),
        ["model via model_cls"],
    ),
    "layer class defined below the model (the attribute could not read it)": (
        PENDING.replace(LAYER, "") + LAYER,
        ["decoder_layer_cls attribute"],
    ),
    "layer class imported only for type checkers (absent at run time)": (
        "if TYPE_CHECKING:\n    from .qwen3_dflash_layers import DFlashQwen3DecoderLayer\n"
        + PENDING.replace(LAYER, ""),
        ["decoder_layer_cls attribute"],
    ),
    "every drift is reported, not only the first": (
        PENDING.replace("DFlashQwen3DecoderLayer(\n", "MyDecoderLayer(\n").replace(
            "= DFlashQwen3Model(", "= MyModel("
        ),
        ["layers via decoder_layer_cls", "model via model_cls"],
    ),
}


PATCHED = {"both classes gain both seams": (PENDING, APPLIED), **COSMETIC}
LEFT_ALONE = {"the edited classes": APPLIED, **APPLIED_VARIANTS}


@pytest.mark.parametrize("before,after", PATCHED.values(), ids=PATCHED.keys())
def test_pending_classes_are_patched_then_left_alone(before: str, after: str) -> None:
    assert_patched(SubclassSeams, before, after)


@pytest.mark.parametrize("source", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_applied_seams_are_left_alone(source: str) -> None:
    assert_left_alone(SubclassSeams, source)


@pytest.mark.parametrize("source,hunks", DRIFT.values(), ids=DRIFT.keys())
def test_semantic_variants_are_refused_naming_the_drifted_hunks(
    source: str, hunks: list[str]
) -> None:
    refused = refusal(SubclassSeams, source)
    assert refused.edit == "subclass-seams"
    assert [v.hunk for v in refused.drifted] == hunks


def test_refusal_names_the_argument_that_differs() -> None:
    source, _ = DRIFT["model built with other arguments"]
    message = str(refusal(SubclassSeams, source))
    assert "start_layer_id='0' instead of 'target_layer_num'" in message


@pytest.mark.parametrize("before,after", PARTIAL.values(), ids=PARTIAL.keys())
def test_partly_applied_classes_are_patched_and_revert_whole(
    before: str, after: str
) -> None:
    checks = case(SubclassSeams)
    checks.assertCodemod(before, after)
    checks.assertCodemod(after, after)
    assert_reverted(SubclassSeams, after, PENDING)
    assert_reverted(SubclassSeams, before, PENDING)


@pytest.mark.parametrize("applied,reverted", REVERTED.values(), ids=REVERTED.keys())
def test_applied_seams_written_differently_are_reverted_by_meaning(
    applied: str, reverted: str
) -> None:
    assert_reverted(SubclassSeams, applied, reverted)


@pytest.mark.parametrize("source,hunks", DRIFT.values(), ids=DRIFT.keys())
def test_reverting_refuses_the_same_classes(source: str, hunks: list[str]) -> None:
    drifted = revert_refusal(SubclassSeams, source).drifted
    assert [v.hunk for v in drifted] == hunks
