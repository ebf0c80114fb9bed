"""Fix: the DFlash prepare-inputs kernel writes no draft KV into the null block.

Target: vllm/v1/worker/gpu/spec_decode/dflash/speculator.py, the module-level
`@triton.jit def _prepare_dflash_inputs_kernel`, one hunk. It must be 0.27.1's
kernel, by meaning, or 0.26.0's (the same without the copy of the
request's temperature and seed, which 0.27.0 moved into it); it becomes
0.28.0's hardened one, or 0.26.0's hardened alike:

* only the accepted context rows count as context (`num_valid_ctx`): the
  rejected suffix gets position 0 and PAD_SLOT_ID, and the query block
  starts right after the accepted rows;
* a context or query slot whose block id is 0 gets PAD_SLOT_ID. Block 0 is
  the null block, and a sliding-window block table holds it for every
  evicted block, so 0.27.1 writes draft KV of long contexts into it;
* `seq_lens` is clamped to `max_model_len`, as the query positions already are.

A kernel that is neither 0.27.1's nor the hardened one is drift: someone
else's kernel, never rewritten.

Why here, in the kernel DFlash1, DSpark and DFlash2 share, rather than in a
DFlash2-only copy: `DFlashSpeculator.propose` calls the module's
`prepare_dflash_inputs` directly and offers no seam, so a DFlash2-only kernel
would need `propose` copied or the module global rebound. Upstream fixed it
here, and DFlash1 and DSpark then run exactly 0.28.0's kernel, as they do
upstream from 0.28.0 on. The launcher, its signature and grid are unchanged.

The fix landed in vLLM 0.28.0 (seen by diffing the 0.27.1 and 0.28.0
wheels). Its pull request, #51538, is cited as upstream's history names it; vLLM's
source distributions do not mention it.

Reverted, the kernel is 0.27.1's again, statement for statement; comments
and lines the hardening did not touch stay as they were.
"""

from __future__ import annotations

from ...framework.edit import Edit, Fix, Judged, Role, exactly_one
from ...framework.hunk_files import HunkFiles
from ...framework.in_place import judge_definition
from ...framework.source import Source

KERNEL = "_prepare_dflash_inputs_kernel"
#: The kernel as 0.27.1 and 0.26.0 ship it and as the fix leaves it: hunks/.
HUNKS = HunkFiles(__package__)
HUNK = HUNKS.hunk(
    "hardened prepare-inputs kernel",
    f"module level, `@triton.jit def {KERNEL}`",
    "Only accepted context rows are context, a row in the null block (block 0, "
    "where a sliding-window table keeps evicted blocks) writes no draft KV, and "
    "seq_lens stays within max_model_len, as in vLLM 0.28.0.",
)
#: 0.26.0's kernel lacks the copy of the request's temperature and seed into
#: the draft's, which 0.27.0 added (0.26.0 copies them on the host, before the
#: launch); the hardening touches none of those lines.
FORMS = HUNKS.forms(HUNK.name, "0.26.0")


def judge(source: Source) -> dict[str, Judged]:
    kernel = exactly_one(source.module.defs(KERNEL), f"one module-level function {KERNEL}")
    if isinstance(kernel, Judged):
        return {HUNK.name: kernel}
    return {HUNK.name: judge_definition(source, kernel, HUNK, f"`{KERNEL}`", FORMS)}


DFLASH_INPUT_GUARDS = Edit(
    "dflash-input-guards",
    "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
    "the DFlash prepare-inputs kernel leaves rejected rows and the null block "
    "alone and clamps seq_lens, as vLLM 0.28.0's does",
    Role.SEAM,
    (HUNK,),
    judge,
    writer="dflash_input_guards:DFlashInputGuards",
    fix=Fix("#51538", "0.28.0"),
)
