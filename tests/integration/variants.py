"""Variants of the real vLLM 0.27.1 target files, for the drift suite.

A variant is a list of edits to the pristine tree: (file, old text, new text)
replacements, or a ruff reformat or import sort of all the target files.
Cosmetic variants keep the meaning and must be patched; semantic variants
change it and must be refused. Replacements are strict on the pristine tree
(the old text must occur exactly once, so a variant that stops applying fails
loudly instead of silently testing nothing).
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

from tests.trees import TARGETS

DF1 = "vllm/model_executor/models/qwen3_dflash.py"
REG = "vllm/model_executor/models/registry.py"
LP = "vllm/model_executor/layers/logits_processor.py"
GUM = "vllm/v1/worker/gpu/sample/gumbel.py"
SEL = "vllm/v1/worker/gpu/spec_decode/__init__.py"
CFG = "vllm/config/vllm.py"
SPEC = "vllm/v1/worker/gpu/spec_decode/speculator.py"
SPECULATIVE = "vllm/config/speculative.py"
SPECULATORS = "vllm/transformers_utils/configs/speculators/base.py"
DFL = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
DSP = "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py"
SCHED = "vllm/v1/core/sched/scheduler.py"


@dataclasses.dataclass(frozen=True)
class Replace:
    path: str
    old: str
    new: str

    def apply(self, site: Path, strict: bool) -> None:
        file = site / self.path
        text = file.read_text()
        count = text.count(self.old)
        if strict:
            assert count == 1, f"{self.path}: {self.old!r} occurs {count} times"
        if count == 1:
            file.write_text(text.replace(self.old, self.new))


@dataclasses.dataclass(frozen=True)
class Ruff:
    options: tuple[str, ...]

    def apply(self, site: Path, strict: bool) -> None:
        subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--isolated", "--quiet", *self.options,
             *(str(site / t) for t in TARGETS)],
            check=True,
        )


@dataclasses.dataclass(frozen=True)
class RuffImports:
    """ruff's isort rules, fixed in place: the imports sorted, merged or split."""

    options: tuple[str, ...]

    def apply(self, site: Path, strict: bool) -> None:
        subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--isolated", "--quiet", "--select", "I",
             "--fix", *self.options, *(str(site / t) for t in TARGETS)],
            check=True,
        )


def move_method(path: str, text_of_method: str, before: str) -> list[Replace]:
    """Cut a method (given by its exact text) and paste it before `before`."""
    return [Replace(path, text_of_method, ""), Replace(path, before, text_of_method + before)]


def _method(site: Path, path: str, name: str) -> str:
    """The exact text of method `name`, decorators and trailing blank lines included."""
    text = (site / path).read_text()
    lines = text.splitlines(keepends=True)
    (node,) = [
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.FunctionDef) and n.name == name and n.col_offset == 4
    ]
    start = min([n.lineno for n in node.decorator_list] + [node.lineno]) - 1
    end = node.end_lineno
    while end < len(lines) and not lines[end].strip():
        end += 1
    return "".join(lines[start:end])


def cosmetic(pristine: Path) -> dict[str, list]:
    extra_repr = _method(pristine, LP, "extra_repr")
    validate = _method(pristine, SPEC, "_validate_local_argmax_reduction")
    multi_kv = _method(pristine, CFG, "_dflash_needs_multi_kv_group")
    return {
        "ruff format, line length 79": [Ruff(("--line-length", "79"))],
        "ruff format, line length 120": [Ruff(("--line-length", "120"))],
        "single quotes everywhere": [Ruff(("--config", "format.quote-style='single'"))],
        "isort, one import a line": [
            RuffImports(("--config", "lint.isort.force-single-line = true"))
        ],
        "a comment inside every target": [
            Replace(DF1, "-> bool:\n    \"\"\"``dflash_config.causal``",
                    "-> bool:\n    # resolved once per layer\n    \"\"\"``dflash_config.causal``"),
            Replace(DF1, "class DFlashQwen3Model(nn.Module):\n",
                    "class DFlashQwen3Model(nn.Module):\n    # draft backbone\n"),
            Replace(DF1, "            [\n                DFlashQwen3DecoderLayer(\n",
                    "            [\n                # one per draft layer\n"
                    "                DFlashQwen3DecoderLayer(  # the DFlash1 layer\n"),
            Replace(DF1, "class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):\n",
                    "class DFlashQwen3ForCausalLM(Qwen3ForCausalLM):\n    # wrapper\n"),
            Replace(DF1, "        self.model = DFlashQwen3Model(\n",
                    "        self.model = DFlashQwen3Model(  # backbone\n"),
            Replace(REG, '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n',
                    "    # block-diffusion drafters\n"
                    '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),  # v1\n'),
            Replace(LP, '"""A layer that compute logits from hidden_stats."""\n\nimport torch\n',
                    '"""A layer that compute logits from hidden_stats."""\n\n# third party\nimport torch\n'),
            Replace(LP, "    def extra_repr(self) -> str:\n",
                    "    # shown by print(model)\n    def extra_repr(self) -> str:\n"),
            Replace(GUM, "@triton.jit\ndef gumbel_block_argmax(",
                    "# the sampler's block argmax\n@triton.jit\ndef gumbel_block_argmax("),
            Replace(SEL, '    if speculative_config.method == "dflash":\n',
                    '    if speculative_config.method == "dflash":  # block diffusion\n'
                    "        # lazily imported: pulls in Triton kernels\n"),
            Replace(CFG, "        if self._dflash_needs_multi_kv_group():\n            return True\n",
                    "        if self._dflash_needs_multi_kv_group():\n"
                    "            # hybrid drafts\n            return True  # V2 only\n"),
            Replace(SPEC, "                self.vocab_size,\n                dtype=torch.float32,\n",
                    "                self.vocab_size,  # full vocabulary\n"
                    "                dtype=torch.float32,\n"),
        ],
        "extra blank lines": [
            Replace(DF1, "    if override is not None:\n        return override\n",
                    "\n    if override is not None:\n\n        return override\n"),
            Replace(SEL, "            DFlashSpeculator,\n        )\n\n        return",
                    "            DFlashSpeculator,\n        )\n\n\n\n        return"),
            Replace(CFG, "        if self._dflash_needs_multi_kv_group():\n",
                    "\n\n        if self._dflash_needs_multi_kv_group():\n"),
            Replace(LP, "    def extra_repr(self) -> str:\n",
                    "\n\n    def extra_repr(self) -> str:\n"),
        ],
        "reordered class members": [
            *move_method(LP, extra_repr, "    def _gather_logits("),
            *move_method(SPEC, validate, "    def load_draft_model("),
            *move_method(CFG, multi_kv, "    @property\n    def use_v2_model_runner("),
        ],
        "trailing commas": [
            Replace(SEL, "return DFlashSpeculator(vllm_config, device)",
                    "return DFlashSpeculator(vllm_config, device,)"),
            Replace(REG, '("qwen3_dflash", "DFlashQwen3ForCausalLM")',
                    '("qwen3_dflash", "DFlashQwen3ForCausalLM",)'),
            Replace(DF1, "        return override\n", "        return (override)\n"),
        ],
        "reworded docstrings": [
            Replace(DF1, '"""``dflash_config.causal`` overrides all layers; else only SWA layers causal."""',
                    '"""Whether layer `layer_idx` attends causally."""'),
            Replace(CFG, '"""Whether a DFlash draft mixes sliding-window and full attention."""',
                    '"""True when the draft has both sliding and full attention layers."""'),
        ],
        "extra registry entries": [
            Replace(REG, '    "EagleMiniCPMForCausalLM": ("minicpm_eagle", "EagleMiniCPMForCausalLM"),\n',
                    '    "EagleMiniCPMForCausalLM": ("minicpm_eagle", "EagleMiniCPMForCausalLM"),\n'
                    '    "MyDraftModel": ("my_draft", "MyDraftForCausalLM"),\n'),
            Replace(REG, '    "DSparkDraftModel": ("vllm.models.deepseek_v4", "DSparkDeepseekV4ForCausalLM"),\n',
                    '    "MyOtherDraftModel": ("my_draft", "MyOtherDraftForCausalLM"),\n'
                    '    "DSparkDraftModel": ("vllm.models.deepseek_v4", "DSparkDeepseekV4ForCausalLM"),\n'),
        ],
        "the fixes' anchors commented and rewrapped": [
            Replace(SPECULATIVE,
                    "                if self.method in (\"eagle\", \"eagle3\"):\n",
                    "                if self.method in (\"eagle\", \"eagle3\"):  # EAGLE only\n"),
            Replace(SPECULATIVE,
                    "            or draft_max_position_embeddings >= target_max_model_len\n"
                    "        ):\n            return\n",
                    "            or draft_max_position_embeddings >= target_max_model_len\n"
                    "        ):\n            return  # nothing to raise\n\n"),
            Replace(SPECULATIVE,
                    "        hash_str = safe_hash(str(factors).encode(), usedforsecurity=False).hexdigest()\n"
                    "        return hash_str\n",
                    "        # one digest of every factor\n"
                    "        hash_str = safe_hash(\n            str(factors).encode(), usedforsecurity=False\n"
                    "        ).hexdigest()\n        return hash_str\n"),
            Replace(SPECULATIVE, "    def use_dflash(self) -> bool:\n",
                    "    # DFlash and its variants\n    def use_dflash(self) -> bool:\n"),
            Replace(CFG, "        self.try_verify_and_update_config()\n",
                    "        # model-specific fix-ups first\n"
                    "        self.try_verify_and_update_config()  # may touch hf_config\n"),
            Replace(CFG, "            self.parallel_config.is_moe_model = self.model_config.is_moe\n",
                    "            self.parallel_config.is_moe_model = (\n"
                    "                self.model_config.is_moe  # MoE targets stay on V1\n            )\n"),
            Replace(SPECULATORS,
                    "        if speculators_model_type not in SUPPORTED_SPECULATORS_TYPES:\n",
                    "\n        # registered in algos.py\n"
                    "        if speculators_model_type not in SUPPORTED_SPECULATORS_TYPES:\n"),
            Replace(SPECULATORS, "        return result\n",
                    "\n        return result  # vLLM's own fields\n"),
            Replace(DFL, "    ctx_slot = ctx_block_id * block_size + (ctx_pos % block_size)\n",
                    "    # the slot the draft's KV goes to\n"
                    "    ctx_slot = (\n        ctx_block_id * block_size + (ctx_pos % block_size)\n    )\n"),
            Replace(DFL, "from vllm.v1.kv_cache_interface import KVCacheConfig\n",
                    "from vllm.v1.kv_cache_interface import (\n    KVCacheConfig,  # the draft's groups\n)\n"),
            Replace(DFL, "            target_attn_groups,\n        )\n\n        self.draft_kv_cache_group_ids",
                    "            target_attn_groups,\n        )  # builds the draft's groups\n\n\n"
                    "        self.draft_kv_cache_group_ids"),
            Replace(GUM, "    is_valid_req = req_state_idx >= 0\n",
                    "    is_valid_req = (req_state_idx >= 0)  # padded rows are -1\n"),
            Replace(SPEC, "                positions + 1,\n                apply_temperature=True,\n"
                    "                output_processed_logits=draft_logits,\n",
                    "                positions + 1,  # the target's positions\n"
                    "                apply_temperature=True,\n"
                    "                output_processed_logits=draft_logits,\n"),
            Replace(DSP, "                    sample_pos[:, i] - 1,\n",
                    "                    sample_pos[:, i] - 1,  # the anchor's position\n"),
            Replace(SCHED, "        self.use_eagle = False\n",
                    "        # EAGLE-like drafts\n        self.use_eagle = False  # set below\n"),
            Replace(SCHED, "        if self.use_eagle:\n            last_cache_position = max(",
                    "        if (self.use_eagle):  # one block back\n            last_cache_position = max("),
        ],
        "a comment that mentions DFlash2DraftModel": [
            Replace(REG, '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n',
                    "    # TODO: DFlash2DraftModel once the backport lands\n"
                    '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n'),
        ],
    }


SEMANTIC: dict[str, tuple[str, list[Replace]]] = {
    "changed causality fallback": ("causality", [
        Replace(DF1, "return bool(layer_types) and layer_types[layer_idx] == _SLIDING_ATTENTION",
                "return bool(layer_types) and layer_types[layer_idx] != _SLIDING_ATTENTION"),
    ]),
    "layers built with another class": ("subclass-seams", [
        Replace(DF1, "            [\n                DFlashQwen3DecoderLayer(\n",
                "            [\n                Qwen3DecoderLayer(\n"),
    ]),
    "model built with another class": ("subclass-seams", [
        Replace(DF1, "        self.model = DFlashQwen3Model(\n",
                "        self.model = Qwen3Model(\n"),
    ]),
    "dflash arm renamed": ("speculator-selection", [
        Replace(SEL, 'if speculative_config.method == "dflash":',
                'if speculative_config.method == "dflash1":'),
    ]),
    "dflash arm removed": ("speculator-selection", [
        Replace(SEL, '    if speculative_config.method == "dflash":\n'
                "        from vllm.v1.worker.gpu.spec_decode.dflash.speculator import (\n"
                "            DFlashSpeculator,\n        )\n\n"
                "        return DFlashSpeculator(vllm_config, device)\n"
                '    elif speculative_config.method == "dspark":\n',
                '    if speculative_config.method == "dspark":\n'),
    ]),
    "multi-kv-group branch removed": ("speculator-selection", [
        Replace(CFG, "        if self._dflash_needs_multi_kv_group():\n            return True\n", ""),
    ]),
    "draft_logits with another shape": ("draft-logit-cache", [
        Replace(SPEC, "                self.num_speculative_steps,\n                self.vocab_size,\n",
                "                self.vocab_size,\n                self.num_speculative_steps,\n"),
    ]),
    "draft_logits with another dtype": ("draft-logit-cache", [
        Replace(SPEC, "                self.vocab_size,\n                dtype=torch.float32,\n",
                "                self.vocab_size,\n                dtype=torch.bfloat16,\n"),
    ]),
    "gumbel_block_argmax renamed": ("gumbel", [
        Replace(GUM, "def gumbel_block_argmax(", "def gumbel_block_argmax_v1("),
    ]),
    "no extra_repr": ("vocab-parallel-topk", [
        Replace(LP, "    def extra_repr(self) -> str:\n", "    def describe(self) -> str:\n"),
    ]),
    "DFlash2DraftModel already maps elsewhere": ("registry", [
        Replace(REG, '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n',
                '    "DFlashDraftModel": ("qwen3_dflash", "DFlashQwen3ForCausalLM"),\n'
                '    "DFlash2DraftModel": ("my_dflash2", "MyDFlash2ForCausalLM"),\n'),
    ]),
    "draft_logits_spec already exists with another body": ("draft-logit-cache", [
        Replace(SPEC, "    def _validate_local_argmax_reduction(self) -> None:\n",
                "    def draft_logits_spec(self, vllm_config):\n"
                "        return vllm_config.model_config.head_dtype, 0.0\n\n"
                "    def _validate_local_argmax_reduction(self) -> None:\n"),
    ]),
    "the EAGLE raise keyed on eagle alone": ("draft-max-position", [
        Replace(SPECULATIVE, '                if self.method in ("eagle", "eagle3"):\n',
                '                if self.method == "eagle":\n'),
    ]),
    "the max_position_embeddings helper takes another argument": ("draft-max-position", [
        Replace(SPECULATIVE, "        target_max_model_len: int,\n    ) -> None:\n"
                '        """Raise an EAGLE draft',
                "        target_max_model_len: int,\n        margin: int = 0,\n    ) -> None:\n"
                '        """Raise an EAGLE draft'),
    ]),
    "is_moe_model set elsewhere": ("draft-max-position", [
        Replace(CFG, "            self.parallel_config.is_moe_model = self.model_config.is_moe\n", ""),
    ]),
    "compute_hash hashes something else": ("compile-cache-key", [
        Replace(SPECULATIVE,
                "        hash_str = safe_hash(str(factors).encode(), usedforsecurity=False).hexdigest()\n"
                "        return hash_str\n",
                "        hash_str = safe_hash(repr(factors).encode(), usedforsecurity=False).hexdigest()\n"
                "        return hash_str\n"),
    ]),
    "num_speculative_tokens already a factor": ("compile-cache-key", [
        Replace(SPECULATIVE,
                "        hash_str = safe_hash(str(factors).encode(), usedforsecurity=False).hexdigest()\n"
                "        return hash_str\n",
                "        factors.append(self.num_speculative_tokens)\n"
                "        hash_str = safe_hash(str(factors).encode(), usedforsecurity=False).hexdigest()\n"
                "        return hash_str\n"),
    ]),
    "try_verify_and_update_config no longer called": ("refuse-quant-draft", [
        Replace(CFG, "        self.try_verify_and_update_config()\n", ""),
    ]),
    "_get_quantization_config renamed": ("refuse-quant-draft", [
        Replace(CFG, "    def _get_quantization_config(\n", "    def _quantization_config(\n"),
    ]),
    "_is_default_v2_model_runner_model renamed": ("refuse-vocab-draft", [
        Replace(CFG, "    def _is_default_v2_model_runner_model(self) -> bool:\n",
                "    def _is_default_v2_model(self) -> bool:\n"),
        Replace(CFG, "        if not self._is_default_v2_model_runner_model():\n",
                "        if not self._is_default_v2_model():\n"),
    ]),
    "speculators already map dflash2 (0.29.0's support)": ("refuse-speculators", [
        Replace(SPECULATORS,
                '            result.update({"method": "eagle3", "parallel_drafting": True})\n',
                '            result.update({"method": "eagle3", "parallel_drafting": True})\n'
                '        elif result["method"] == "dflash2":\n            result["method"] = "dflash"\n'),
    ]),
    "gumbel_noised_argmax already exists with another body": ("gumbel", [
        Replace(GUM, "@triton.jit\ndef gumbel_block_argmax(",
                "@triton.jit\ndef gumbel_noised_argmax(logits, keys, mask, seed, pos, temp):\n"
                "    return tl.max(logits, axis=0, return_indices=True)\n\n\n"
                "@triton.jit\ndef gumbel_block_argmax("),
    ]),
    "the prepare-inputs kernel slots by another formula": ("dflash-input-guards", [
        Replace(DFL, "    ctx_slot = ctx_block_id * block_size + (ctx_pos % block_size)\n",
                "    ctx_slot = ctx_block_id * block_size + ctx_pos\n"),
    ]),
    "the prepare-inputs kernel stores seq_lens otherwise": ("dflash-input-guards", [
        Replace(DFL, "tl.store(out_seq_lens_ptr + req_idx, last_valid_pos + 1 + num_query_per_req)",
                "tl.store(out_seq_lens_ptr + req_idx, last_valid_pos + num_query_per_req)"),
    ]),
    "set_attn no longer calls the base class": ("draft-aot-schedule", [
        Replace(DFL, "        super().set_attn(\n            model_state,\n",
                "        DraftModelSpeculator.set_attn(\n            self,\n            model_state,\n"),
    ]),
    "gumbel_block_argmax scales by temperature otherwise": ("draft-noise-salt", [
        Replace(GUM, "        logits = logits / temp\n", "        logits = logits * temp\n"),
    ]),
    "the draft model samples at other positions": ("draft-noise-salt", [
        Replace(SPEC, "                positions + 1,\n                apply_temperature=True,\n"
                "                output_processed_logits=draft_logits,\n",
                "                positions,\n                apply_temperature=True,\n"
                "                output_processed_logits=draft_logits,\n"),
    ]),
    "dspark samples without temperature": ("draft-noise-salt", [
        Replace(DSP, "                    sample_pos[:, i] - 1,\n                    apply_temperature=True,\n",
                "                    sample_pos[:, i] - 1,\n                    apply_temperature=False,\n"),
    ]),
    "the KV cache manager told use_eagle otherwise": ("dflash-prefix-block", [
        Replace(SCHED, "            use_eagle=self.use_eagle,\n            log_stats=self.log_stats,\n",
                "            use_eagle=False,\n            log_stats=self.log_stats,\n"),
    ]),
    "the Mamba back-off keyed on something else": ("dflash-prefix-block", [
        Replace(SCHED, "        if self.use_eagle:\n            last_cache_position = max(",
                "        if self.use_eagle and block_size > 1:\n            last_cache_position = max("),
    ]),
}


def canonical(source: str) -> str:
    """Meaning of a file: no comments, formatting or docstrings, and methods
    in name order (the order of class members carries no meaning here)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = node.body = body[1:] or [ast.Pass()]
        if isinstance(node, ast.ClassDef):
            methods = sorted(
                (n for n in body if isinstance(n, ast.FunctionDef)), key=lambda n: n.name
            )
            others = [n for n in body if not isinstance(n, ast.FunctionDef)]
            node.body = others + methods
    return ast.dump(tree, annotate_fields=False)
