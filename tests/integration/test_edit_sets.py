"""The two edit sets on the real vLLM 0.27.1 tree: `apply` makes the DFlash2
PR's edits and the upstream fixes, `apply --only-pr` the PR's alone (the
spec's result), `apply` alone switches either way, all or nothing, and
`revert` removes everything; `check`, `--json` and `--explain` say which
set a tree and each edit belong to."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration import run
from tests.oracle import seed_patched
from tests.trees import INSTALLED, TARGETS, make_site, snapshot

pytestmark = pytest.mark.wheels


#: Where upstream has each fix, as the research on the releases found it:
#: (upstream PR or None, first release, or "unreleased").
FIXES = {
    "draft-max-position": ("#57941", "0.33.0"),
    "compile-cache-key": ("#53366", "unreleased"),
    "refuse-quant-draft": (None, "0.31.0"),
    "refuse-vocab-draft": (None, "0.34.0"),
    "refuse-speculators": (None, "0.29.0"),
    "refuse-draft-keys": (None, "0.31.0"),
    "dflash-input-guards": ("#51538", "0.28.0"),
    "draft-aot-schedule": ("#54374", "0.30.0"),
    "draft-noise-salt": ("#54282", "0.29.0"),
    "dflash-prefix-block": ("#53505", "0.33.0"),
    "anchor-clamp": (None, "0.34.0"),
    "draft-conv-kernel": (None, "0.31.0"),
    "drafter-keys": (None, "0.29.0"),
    "draft-seqs-cap": (None, "0.33.0"),
    "live-model-len": (None, "0.33.0"),
    "spec-step-seed": (None, "0.33.0"),
}
PR_EDITS = {
    "causality", "subclass-seams", "registry", "vocab-parallel-topk", "gumbel",
    "speculator-selection", "draft-logit-cache",
}
#: The files only fixes touch: `apply --only-pr` leaves them as 0.27.1 has them.
FIX_ONLY_FILES = {
    "vllm/config/speculative.py",
    "vllm/transformers_utils/configs/speculators/base.py",
    "vllm/v1/core/sched/scheduler.py",
    "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
    "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py",
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return make_site("0.27.1", tmp_path / "site")


def test_apply_only_pr_then_apply_then_revert_switch_sets_byte_for_byte(
    site: Path, tmp_path: Path
) -> None:
    pristine = snapshot(site)
    spec = seed_patched(site, tmp_path)

    assert run("apply", "--site-packages", str(site))[0] == 0
    every = snapshot(site)
    code, output = run("apply", "--only-pr", "--site-packages", str(site))
    assert code == 0, output
    only_pr = snapshot(site)
    # The PR's set is the spec's patcher's result, fix files untouched.
    for relative in TARGETS:
        expected = (spec / relative).read_bytes()
        assert only_pr[relative] == expected, relative
    for relative in FIX_ONLY_FILES:
        assert only_pr[relative] == pristine[relative]
    assert all(only_pr[r] == every[r] for r in INSTALLED)

    assert run("apply", "--site-packages", str(site))[0] == 0
    assert snapshot(site) == every
    assert run("apply", "--only-pr", "--site-packages", str(site))[0] == 0
    assert snapshot(site) == only_pr
    code, output = run("revert", "--site-packages", str(site))
    assert code == 0, output
    assert snapshot(site) == pristine


def test_only_pr_on_a_pristine_tree_is_the_same_as_after_the_fixes_are_taken_out(
    site: Path, tmp_path: Path
) -> None:
    other = make_site("0.27.1", tmp_path / "other")
    assert run("apply", "--only-pr", "--site-packages", str(site))[0] == 0
    assert run("apply", "--site-packages", str(other))[0] == 0
    assert run("apply", "--only-pr", "--site-packages", str(other))[0] == 0
    assert snapshot(site) == snapshot(other)


def test_check_says_in_one_line_which_set_a_tree_holds(site: Path) -> None:
    target = ["--site-packages", str(site)]
    run("apply", "--only-pr", *target)
    code, output = run("check", *target)
    assert code == 1
    summary = output.splitlines()[-1]
    assert summary.startswith(
        "pending: this tree holds the DFlash2 PR's edits alone, as `apply --only-pr` "
        "leaves it; `dflash2-backport apply --site-packages "
    )
    assert summary.endswith("adds 16 upstream fixes in 10 files")
    code, output = run("check", "--only-pr", *target)
    assert code == 0, output
    assert output.splitlines()[-1].startswith(
        "nothing to do: the DFlash2 PR's 7 edits are applied, none of the 16 upstream fixes"
    )

    run("apply", *target)
    code, output = run("check", "--only-pr", *target)
    assert code == 1
    summary = output.splitlines()[-1]
    # The hint repeats --only-pr: it is the command that makes that set.
    assert "`dflash2-backport apply --only-pr --site-packages " in summary
    assert summary.startswith("pending: this tree holds the upstream fixes beside")
    code, output = run("check", *target)
    assert code == 0
    assert "all 23 edits are applied (the DFlash2 PR's 7 and 16 upstream fixes)" in output


def test_check_only_pr_on_a_pristine_tree_hints_apply_only_pr(site: Path) -> None:
    code, output = run("check", "--only-pr", "--site-packages", str(site))
    assert code == 1
    assert output.splitlines()[-1] == (
        "pending: 7 edits in 7 files and 3 new files; run "
        f"`dflash2-backport apply --only-pr --site-packages {site}`"
    )


def test_json_gives_each_edit_its_set_and_each_fix_its_upstream(site: Path) -> None:
    run("apply", "--only-pr", "--site-packages", str(site))
    code, output = run("check", "--site-packages", str(site), "--json")
    document = json.loads(output)
    assert code == 1
    assert (document["edit_set"], document["holds"]) == ("all", "pr")
    seen = {}
    for edit in document["edits"]:
        seen.setdefault(edit["edit"], set()).add(
            (edit["set"], edit["upstream_pr"], edit["upstream_release"], edit["state"])
        )
    assert {name for name in seen if seen[name] == {("pr", None, None, "applied")}} == PR_EDITS
    for name, (pr, release) in FIXES.items():
        assert seen[name] == {("fix", pr, release, "pending")}, name
    assert set(seen) == PR_EDITS | set(FIXES)


def test_the_report_and_explain_say_where_upstream_has_a_fix(site: Path) -> None:
    code, output = run("check", "--site-packages", str(site))
    lines = [line for line in output.splitlines() if " draft-max-position " in line]
    assert len(lines) == 2
    assert all(line.endswith("(fix #57941, upstream 0.33.0)") for line in lines)
    assert any(line.endswith("(fix #53366, not yet upstream)") for line in output.splitlines())
    code, output = run("--explain", "draft-max-position")
    assert code == 0
    assert "  set: an upstream fix (upstream #57941, first in vLLM 0.33.0)" in output
    code, output = run("--explain", "causality")
    assert "  set: the DFlash2 PR's own edit" in output


def test_only_pr_takes_the_fixes_out_callers_first(site: Path) -> None:
    from dflash2_backport.transforms.framework.vocabulary import EditSet
    from dflash2_backport.engine.plan import make_plan

    paths = [c.path for c in make_plan(site, True, edit_set=EditSet.ALL).changes]
    # The fix in vllm.py calls one in speculative.py, the rejection sampler's
    # one in gumbel.py: each added after what it calls...
    sampler = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py"
    gumbel = "vllm/v1/worker/gpu/sample/gumbel.py"
    assert paths.index("vllm/config/speculative.py") < paths.index("vllm/config/vllm.py")
    assert paths.index(gumbel) < paths.index(sampler)
    run("apply", "--site-packages", str(site))
    paths = [c.path for c in make_plan(site, True, edit_set=EditSet.PR).changes]
    # ...and taken out before it; every file a fix touches is rewritten.
    assert paths.index("vllm/config/vllm.py") < paths.index("vllm/config/speculative.py")
    assert paths.index(sampler) < paths.index(gumbel)
    assert set(paths) == FIX_ONLY_FILES | {
        "vllm/config/vllm.py",
        gumbel,
        "vllm/model_executor/models/qwen3_dflash.py",
        "vllm/v1/worker/gpu/spec_decode/speculator.py",
    }


def test_the_verdict_cache_keeps_the_sets_apart(site: Path, tmp_path: Path, monkeypatch) -> None:
    """A file's verdicts depend on the direction of each of its edits: undoing
    a fix also asks what else reads the code it removes. A verdict remembered
    for `check` must not answer `check --only-pr`, which undoes the fixes."""
    monkeypatch.setenv("DFLASH2_BACKPORT_VERDICT_CACHE", str(tmp_path / "verdicts"))
    # A fork's tree: no RECORD to fall out of step with the edit below.
    shutil.rmtree(next(site.glob("vllm-*.dist-info")))
    run("apply", "--root", str(site))
    speculative = site / "vllm/config/speculative.py"
    with speculative.open("a") as file:
        file.write("\n\ndef plain_rope(config):\n    return _rope_only_sizes_cache(config)\n")
    for _ in range(2):  # the second round is answered from the cache
        assert run("check", "--root", str(site))[0] == 0
        code, output = run("check", "--only-pr", "--root", str(site))
        assert code == 2, output
        (line,) = [line for line in output.splitlines() if line.lstrip().startswith("drift")]
        assert " draft-max-position " in line and "`plain_rope`" in line
