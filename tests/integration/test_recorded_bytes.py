"""`apply` on every supported release writes the bytes an earlier version of
the tool wrote, both edit sets, and `revert` then restores the pristine tree
byte for byte.

The digests are data, never computed from the code under test: recorded
by scripts/record_apply_digests.py from the tool's output before its edits
were reshaped, and recorded again only for the files a new fix changes
(in the full set: the speculator for `live-model-len`, qwen3_dflash.py for
`drafter-keys`, config/vllm.py for `refuse-draft-keys`, and RECORD).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.integration import run
from tests.trees import make_site, snapshot

pytestmark = pytest.mark.wheels

RECORDED = json.loads(
    (Path(__file__).resolve().parent.parent / "data" / "apply_digests.json").read_text()
)
COMMANDS = {"all": ("apply",), "pr": ("apply", "--only-pr")}
CASES = [(version, edit_set) for version in RECORDED for edit_set in RECORDED[version]]


@pytest.mark.parametrize(("version", "edit_set"), CASES)
def test_apply_writes_the_recorded_bytes_and_revert_restores_the_pristine_tree(
    version: str, edit_set: str, tmp_path: Path
) -> None:
    site = make_site(version, tmp_path / "site")
    pristine, directories = snapshot(site), _directories(site)
    code, output = run(*COMMANDS[edit_set], "--site-packages", str(site))
    assert code == 0, output
    applied = snapshot(site)
    written = {
        path: hashlib.sha256(data).hexdigest()
        for path, data in applied.items()
        if pristine.get(path) != data
    }
    assert written == RECORDED[version][edit_set]
    assert set(pristine) <= set(applied)

    code, output = run("revert", "--site-packages", str(site))
    assert code == 0, output
    assert snapshot(site) == pristine
    assert _directories(site) == directories


def _directories(site: Path) -> set[str]:
    return {str(p.relative_to(site)) for p in site.rglob("*") if p.is_dir()}
