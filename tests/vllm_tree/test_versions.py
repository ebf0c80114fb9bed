"""vLLM 0.27.0 and 0.26.0 are supported as well as 0.27.1.

Why that is safe for 0.27.0: the two wheels' Python sources differ only in
the version file and in a model DFlash2 does not touch, so every edit lands
on the same bytes. 0.26.0 differs where three edits land; each is written
there in 0.26.0's form, checked here on the wheel's own files. The runtime
tests in tests/runtime (not modules/) then run every probe on the patched
and pristine releases, `verify` included.
"""

from __future__ import annotations

import ast
import filecmp
import json
from pathlib import Path

import pytest

from dflash2_backport.transforms.edits.anchor_clamp.judge import FUNCTION as ANCHOR_CLAMP_FUNCTION
from dflash2_backport.transforms.edits.anchor_clamp.writer import AnchorClamp
from dflash2_backport.transforms.edits.dflash_input_guards.writer import DFlashInputGuards
from dflash2_backport.transforms.edits.draft_max_position.writer import DraftPositions
from tests.vllm_tree.test_interpreter import tool
from tests.transforms._cases import output
from tests.trees import INSTALLED, TARGETS, make_site, snapshot
from tests.wheels import vllm_source

pytestmark = pytest.mark.wheels

DFLASH = "vllm/model_executor/models/qwen3_dflash.py"
DFLASH_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py"
SPECULATIVE = "vllm/config/speculative.py"

# Read off a comparison of the two wheels, and nothing the backport reads.
DIFFERING_SOURCES = {
    "vllm/_version.py",
    "vllm/model_executor/models/qwen3_dspark.py",
}


def python_files(tree: Path) -> set[str]:
    return {str(p.relative_to(tree)) for p in (tree / "vllm").rglob("*.py")}


def test_0_27_0_and_0_27_1_sources_differ_only_outside_what_dflash2_touches() -> None:
    old, new = vllm_source("0.27.0"), vllm_source("0.27.1")
    assert python_files(old) == python_files(new)
    differing = {
        relative for relative in python_files(new)
        if not filecmp.cmp(old / relative, new / relative, shallow=False)
    }
    assert differing == DIFFERING_SOURCES
    assert not differing & set(TARGETS)


def test_apply_patches_0_27_0_exactly_as_0_27_1(tmp_path: Path) -> None:
    old = make_site("0.27.0", tmp_path / "old")
    new = make_site("0.27.1", tmp_path / "new")
    assert tool("check", "--site-packages", old).returncode == 1
    applied = tool("apply", "--site-packages", old)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert applied.stdout.splitlines()[0] == f"vLLM 0.27.0 at {old.resolve()}"
    assert tool("apply", "--site-packages", new).returncode == 0
    ours, reference = snapshot(old), snapshot(new)
    assert {p: ours[p] for p in TARGETS} == {p: reference[p] for p in TARGETS}
    assert tool("check", "--site-packages", old).returncode == 0


@pytest.mark.parametrize("version", ["0.28.0", "0.29.0"])
@pytest.mark.parametrize("command", ["check", "apply"])
def test_a_release_that_ships_dflash2_but_lost_its_modules_is_told_to_reinstall(
    tmp_path: Path, version: str, command: str
) -> None:
    site = make_site(version, tmp_path / "site")
    for relative in INSTALLED:
        (site / relative).unlink()
    before = snapshot(site)
    result = tool(command, "--site-packages", site)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert f"vLLM {version}" in line and line.endswith("reinstall vLLM"), line
    # Forcing a 0.27 backport onto a newer release is never the way out.
    assert "--force" not in line
    assert snapshot(site) == before


@pytest.fixture(scope="module")
def release_0_26_0(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """0.26.0's site, and each edit's state there by `check`."""
    site = make_site("0.26.0", tmp_path_factory.mktemp("0.26.0") / "site")
    checked = tool("check", "--json", "--site-packages", site)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    edits = json.loads(checked.stdout)["edits"]
    return site, {(e["edit"], e["file"]): e["state"] for e in edits}


def test_on_0_26_0_every_edit_finds_its_target_without_force(release_0_26_0) -> None:
    _, states = release_0_26_0
    assert set(states.values()) == {"pending"}


@pytest.mark.parametrize("only_pr", [False, True], ids=["every edit", "only the PR's"])
def test_0_26_0_is_applied_then_left_alone_then_reverted_to_the_wheels_bytes(
    tmp_path: Path, only_pr: bool
) -> None:
    site = make_site("0.26.0", tmp_path / "site")
    wheel = snapshot(site)
    extra = ["--only-pr"] if only_pr else []
    applied = tool("apply", *extra, "--site-packages", site)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert applied.stdout.splitlines()[0] == f"vLLM 0.26.0 at {site.resolve()}"
    patched = snapshot(site)
    assert all(p in patched and p not in wheel for p in INSTALLED)
    assert tool("check", *extra, "--site-packages", site).returncode == 0
    assert tool("apply", *extra, "--site-packages", site).returncode == 0
    assert snapshot(site) == patched
    reverted = tool("revert", "--site-packages", site)
    assert reverted.returncode == 0, reverted.stdout + reverted.stderr
    assert snapshot(site) == wheel


def test_on_0_26_0_the_draft_is_raised_by_0_33_0s_helper_before_the_hf_config_wrap(
    release_0_26_0,
) -> None:
    """0.26.0 raises no draft (0.27.0 added the helper and its EAGLE arm):
    the helper goes in whole, before `_verify_and_get_draft_tp`, and the
    DFlash arm right before the EAGLEConfig wrap; EAGLE is left alone."""
    site, states = release_0_26_0
    assert states["draft-max-position", SPECULATIVE] == "pending"
    pristine = (site / SPECULATIVE).read_text()
    patched = output(DraftPositions, pristine)
    cls = next(n for n in ast.parse(patched).body if getattr(n, "name", "") == "SpeculativeConfig")
    methods = [n.name for n in cls.body if isinstance(n, ast.FunctionDef)]
    helper = methods.index("_maybe_override_draft_max_position_embeddings")
    assert methods[helper + 1] == "_verify_and_get_draft_tp"
    assert (
        '                if self.method == "dflash":\n'
        in patched.split("                # Replace hf_config for EAGLE draft_model\n")[0]
    )
    post_init = next(n for n in cls.body if getattr(n, "name", "") == "__post_init__")
    tests = [ast.unparse(n.test) for n in ast.walk(post_init) if isinstance(n, ast.If)]
    assert "self.method in ('eagle', 'eagle3')" not in tests
    assert output(DraftPositions, patched, revert=True) == pristine


def test_on_0_26_0_the_anchor_clamp_goes_before_the_function_that_follows_its_0_27_anchor(
    release_0_26_0,
) -> None:
    """0.26.0 computes the fc layer's width inline (0.27.0 moved it into
    `_get_dflash_fc_input_size`): the clamp is written where 0.27.x has it,
    right before `_resolve_layer_attention`, and reverting gives the file
    back."""
    site, states = release_0_26_0
    assert states["anchor-clamp", DFLASH] == "pending"
    pristine = (site / DFLASH).read_text()
    assert "def _get_dflash_fc_input_size" not in pristine
    patched = output(AnchorClamp, pristine)
    assert patched == pristine.replace(
        "\n\n\ndef _resolve_layer_attention(",
        "\n\n\n" + ANCHOR_CLAMP_FUNCTION + "\n\ndef _resolve_layer_attention(",
    )
    assert output(AnchorClamp, patched, revert=True) == pristine


def test_on_0_26_0_the_prepare_inputs_kernel_is_hardened_without_the_copy_it_lacks(
    release_0_26_0,
) -> None:
    """0.26.0's kernel lacks the temperature and seed copy 0.27.0 moved into
    it: hardened, it stays without it, and reverting gives the file back."""
    site, states = release_0_26_0
    assert states["dflash-input-guards", DFLASH_SPECULATOR] == "pending"
    pristine = (site / DFLASH_SPECULATOR).read_text()
    patched = output(DFlashInputGuards, pristine)
    (kernel,) = [node for node in ast.parse(pristine).body
                 if getattr(node, "name", "") == "_prepare_dflash_inputs_kernel"]
    # Everything before the kernel and after it stays as it was.
    lines, ends = pristine.splitlines(True), patched.splitlines(True)
    head, tail = kernel.lineno - 2, len(lines) - kernel.end_lineno  # its decorator included
    assert ends[:head] == lines[:head] and ends[len(ends) - tail:] == lines[len(lines) - tail:]
    rewritten = "".join(ends[head:len(ends) - tail])
    for hardening in ("num_valid_ctx = valid_ctx_end - ctx_start",
                      "ctx_resident = is_valid_ctx & (ctx_block_id != 0)",
                      "q_resident = is_query & (q_block_id != 0)",
                      "tl.minimum(last_valid_pos + 1 + num_query_per_req, max_model_len)"):
        assert hardening in rewritten, hardening
    assert "temperature_ptr" not in rewritten
    assert output(DFlashInputGuards, patched, revert=True) == pristine
