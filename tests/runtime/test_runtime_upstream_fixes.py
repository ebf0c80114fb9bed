"""Upstream's own tests of the fixes the backport carries, from the source
distribution of the release that has each, run unchanged against vLLM 0.27.1
as 0.27.1 ships, as `apply --only-pr` patches it and as `apply` patches it.

They run with pytest in the testkit venvs (env.testkit_env), without
upstream's conftest.py (`--noconftest`): it imports half of vLLM's test
suite, and the files run here need only what they import themselves. Tests
that fetch configs from the Hugging Face Hub are deselected by name.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.runtime.harness import snippet_env
from tests.upstream import upstream_tests

pytestmark = pytest.mark.runtime

#: The draft max_position_embeddings fix (#57941), 0.33.0: the helper's
#: tests, which need no Hub ("override" in their names).
MAX_POSITION = ("0.33.0", "config/test_speculative_draft_max_position_embeddings.py", "override")
#: What 0.27.1 fails of them: its helper raises a draft whatever its RoPE.
UNFIXED_FAILURES = {
    f"test_override_skips_other_rope_types[rope_parameters{i}]" for i in range(4)
}


def run_upstream(python: Path, version: str, relative: str, select: str, snippets,
                 scratch: Path) -> dict[str, str]:
    """Each selected test's outcome ("passed", "failed", "error", "skipped")."""
    root = upstream_tests(version, relative)
    report = scratch / "report.xml"
    environment = snippet_env(
        snippets.cache_root, plugin_dir=snippets.plugin_dir,
        # The cached files stay as fetched: no bytecode beside them.
        extra={"PYTHONDONTWRITEBYTECODE": "1"},
    )
    done = subprocess.run(
        [str(python), "-m", "pytest", f"tests/{relative}", "-k", select, "--noconftest",
         "-p", "no:cacheprovider", "-q", f"--junitxml={report}", "--rootdir", str(root)],
        cwd=root, env=environment, capture_output=True, text=True, timeout=600,
    )
    assert report.exists(), done.stdout[-4000:] + done.stderr[-4000:]
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        found = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[case.get("name")] = {"failure": "failed"}.get(found[0], found[0]) if found else "passed"
    return outcomes


@pytest.fixture(scope="module")
def max_position(edit_set_pythons, snippets, tmp_path_factory) -> dict[str, dict[str, str]]:
    return {
        name: run_upstream(python, *MAX_POSITION, snippets, tmp_path_factory.mktemp(name))
        for name, python in edit_set_pythons.items()
    }


def test_upstream_s_max_position_tests_pass_on_the_patched_tree(max_position) -> None:
    outcomes = max_position["patched"]
    assert len(outcomes) == 10
    assert set(outcomes.values()) == {"passed"}, outcomes


@pytest.mark.parametrize("tree", ["pristine", "only-pr"])
def test_upstream_s_max_position_tests_fail_where_the_fix_is_missing(
    max_position, tree: str
) -> None:
    outcomes = max_position[tree]
    assert set(outcomes) == set(max_position["patched"])
    assert {name for name, outcome in outcomes.items() if outcome != "passed"} == (
        UNFIXED_FAILURES
    )
    assert {outcomes[name] for name in UNFIXED_FAILURES} == {"failed"}
