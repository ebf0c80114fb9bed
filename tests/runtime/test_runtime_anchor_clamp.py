"""vLLM 0.34.0's own test of the anchor clamp, run on 0.27.1 and 0.26.0 as
`apply` patches each and as `apply --only-pr` patches each.

The test is upstream's `test_score_edges_keeps_out_of_vocabulary_anchors_in_range`
(tests/v1/spec_decode/test_dflash2.py in the 0.34.0 source distribution),
its source taken from that file unchanged. The file itself does not import
on the backport: its first import also names `_grouped_conv` and
`_score_edges_reference`, and the backport's DFlash2 model has no
`_score_edges_reference` (0.34.0's CPU path, a name the backport's
`_score_edges` does not need). So the test runs alone, in a file whose
imports are the two names it reads, from the module path upstream imports
them from: `import torch` and
`from vllm.model_executor.models.qwen3_dflash2 import _score_edges`. Nothing
in the test itself is changed.

With the DFlash2 PR's edits alone the selector indexes its predecessor
codebook with the out-of-vocabulary anchor and the test fails with an
IndexError, as it would on 0.28.0; with the fixes it passes.
"""

from __future__ import annotations

import ast
import builtins

import pytest

from tests.runtime.test_runtime_upstream_fixes import RUN_PYTEST
from tests.upstream import upstream_tests

pytestmark = pytest.mark.runtime

VERSION = "0.34.0"
RELATIVE = "v1/spec_decode/test_dflash2.py"
TEST = "test_score_edges_keeps_out_of_vocabulary_anchors_in_range"
MODULE = "vllm.model_executor.models.qwen3_dflash2"
IMPORTS = f"import torch\n\nfrom {MODULE} import _score_edges\n"


def _free_names(function: ast.FunctionDef) -> set[str]:
    """The names the function reads from its module (not its own, not builtins)."""
    own = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.FunctionDef) and node is not function:
            own.add(node.name)
            own.update(a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg))
    read = {
        node.id
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    return read - own - set(dir(builtins))


def upstream_test_alone(source: str) -> str:
    """The test's source, as upstream's file has it, under `IMPORTS`."""
    tree = ast.parse(source)
    (function,) = [
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == TEST
    ]
    assert not function.decorator_list, "upstream's test gained a decorator"
    assert _free_names(function) == {"torch", "_score_edges"}
    # Upstream imports `_score_edges` from the very module path used here.
    (imported,) = [
        node for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == MODULE
    ]
    assert "_score_edges" in {alias.name for alias in imported.names}
    assert any(
        isinstance(node, ast.Import) and [a.name for a in node.names] == ["torch"]
        for node in tree.body
    )
    return IMPORTS + "\n\n" + ast.get_source_segment(source, function) + "\n"


@pytest.fixture(scope="module")
def outcomes(snippets, edit_set_pythons, tmp_path_factory) -> dict[str, dict]:
    upstream = upstream_tests(VERSION, RELATIVE) / "tests" / RELATIVE
    test_file = tmp_path_factory.mktemp("upstream") / "test_dflash2_anchor_clamp.py"
    test_file.write_text(upstream_test_alone(upstream.read_text()))
    trees = ("only-pr", "patched")
    runs = [snippets.start(edit_set_pythons[tree], RUN_PYTEST, args=[str(test_file)])
            for tree in trees]
    return dict(zip(trees, snippets.gather(runs)))


def test_the_test_is_upstream_s_byte_for_byte() -> None:
    upstream = upstream_tests(VERSION, RELATIVE) / "tests" / RELATIVE
    source = upstream.read_text()
    alone = upstream_test_alone(source)
    body = alone.removeprefix(IMPORTS + "\n\n")
    assert body.rstrip("\n") in source
    assert f"def {TEST}():" in body


def test_upstream_0_34_0_s_anchor_clamp_test_passes_on_the_patched_tree(outcomes) -> None:
    patched = outcomes["patched"]
    assert patched["outcomes"] == {TEST: "passed"}, patched
    assert patched["exit"] == 0


def test_and_fails_with_the_dflash2_pr_s_edits_alone(outcomes) -> None:
    only_pr = outcomes["only-pr"]
    assert list(only_pr["outcomes"]) == [TEST], only_pr
    assert only_pr["outcomes"][TEST].startswith("failed"), only_pr
    assert "IndexError" in only_pr["outcomes"][TEST], only_pr
    assert only_pr["exit"] == 1
