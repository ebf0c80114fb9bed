"""The hint after an interrupted commit is a command to paste into a shell:
it must run the command it names, whatever the target's path holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash2_backport.transaction.intent import Intent, Phase, interrupted_message

ROOT = Path("/srv/my env;$(touch PWNED)")


@pytest.mark.parametrize("command, edit_set, options, expected", [
    ("apply", "all", ("--site-packages", str(ROOT)),
     "dflash2-backport apply --site-packages '/srv/my env;$(touch PWNED)'"),
    ("apply", "pr", ("--root", "/srv/vllm src"),
     "dflash2-backport apply --only-pr --root '/srv/vllm src'"),
    ("revert", "none", ("--python", "/opt/venv/bin/python"),
     "dflash2-backport revert --python /opt/venv/bin/python"),
    ("apply", None, (), "dflash2-backport apply"),
])
def test_the_hint_to_finish_an_interrupted_commit_is_quoted_as_a_shell_reads_it(
    command: str, edit_set: str | None, options: tuple[str, ...], expected: str
) -> None:
    intent = Intent(command, Phase.COMMITTING, (), (), 1, None, edit_set, None)
    message = interrupted_message(ROOT, intent, options)
    assert message.endswith(f"run `{expected}` to finish it"), message
