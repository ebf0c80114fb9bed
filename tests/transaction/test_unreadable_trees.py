"""A tree this user may not read is named, with what to do, in one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trees import make_site

pytestmark = [
    pytest.mark.wheels,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="needs root and setpriv to run the tool without root's capabilities",
    ),
]

# Root without its capabilities: the permission bits bind it as any user,
# while the checkout, the venv and the interpreter stay its own to read
# wherever they live.
WITHOUT_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"]
SOMEONE_ELSE = 4242


@pytest.mark.parametrize("closed", ["", "vllm", "vllm/model_executor"])
def test_a_directory_this_user_may_not_read_is_named_with_what_to_do(
    tmp_path: Path, closed: str
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    os.chown(site / closed, SOMEONE_ELSE, SOMEONE_ELSE)
    (site / closed).chmod(0o700)
    done = subprocess.run(
        [*WITHOUT_CAPABILITIES, sys.executable, "-m", "dflash2_backport", "check",
         "--site-packages", str(site)],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, HOME=str(tmp_path), DFLASH2_BACKPORT_VERDICT_CACHE=str(tmp_path)),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert re.fullmatch(
        rf"dflash2-backport: error: {re.escape(str(site))}\S*: (cannot be read \()?Permission "
        r"denied\)?; nothing was written; run as a user who may read it", line), line
