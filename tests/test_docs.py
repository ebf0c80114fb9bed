"""The repository's documentation: a README short enough to be a user's
guide, a GPU how-to, links that lead somewhere, the release counts the tool
declares, and no words of how a GPU machine was once come by."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
README = REPOSITORY / "README.md"
GPU_README = REPOSITORY / "scripts" / "gpu" / "README.md"
DOCS = sorted((REPOSITORY / "docs").glob("*.md"))
SUMMARIES = sorted((REPOSITORY / "scripts" / "gpu" / "runs").glob("*/summary.md"))


@pytest.mark.parametrize("page, most", [(README, 300), (GPU_README, 400)],
                         ids=["README.md", "scripts/gpu/README.md"])
def test_the_guides_stay_short_enough_to_read(page: Path, most: int) -> None:
    assert len(page.read_text().splitlines()) <= most


@pytest.mark.parametrize("page", [README, GPU_README, *DOCS, *SUMMARIES],
                         ids=lambda page: str(page.relative_to(REPOSITORY)))
def test_every_relative_link_leads_to_a_file_of_the_repository(page: Path) -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", page.read_text())
    for link in links:
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = (page.parent / link.split("#")[0]).resolve()
        assert target.exists(), f"{page.name}: {link}"


@pytest.mark.parametrize("page", DOCS, ids=lambda page: page.name)
def test_every_page_of_docs_is_linked_from_the_readme(page: Path) -> None:
    assert f"](docs/{page.name}" in README.read_text()


def test_the_release_pages_count_the_edits_the_tool_declares() -> None:
    from dflash2_backport.vllm_tree.installer import SHIPPED
    from transforms import EDITS

    names = {edit.name for edit in EDITS}
    from_the_pr = {edit.name for edit in EDITS if edit.fix is None}
    (every, files) = re.findall(r"\| 0\.27\.1 \| all (\d+) edits and the (\d+) new files \|",
                                README.read_text())[0]
    assert (int(every), int(files)) == (len(names), len(SHIPPED))
    versions = (REPOSITORY / "docs" / "versions.md").read_text()
    (every, pr, fixes, files) = re.findall(
        r"all (\d+) \(the PR's (\d+) and (\d+) upstream fixes\) and the (\d+) new\s+files",
        versions)[0]
    assert tuple(map(int, (every, pr, fixes, files))) == (
        len(names), len(from_the_pr), len(names - from_the_pr), len(SHIPPED))


# Words of a GPU machine on loan: the spells it is had for, what each may
# spend, the commands sent to it, a machine given or taken back. Spelt here
# so that this file does not match itself; `calls` of a function (`each call of f`, `the
# call's arguments`) are not the device's.
VOCABULARY = (
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|t[e]nth|elev[e]nth"
    r"|twelfth|next|last|a|the|each|every|per|one|this|later|earlier|another|its) h[o]ld\b"
    r"|\b(two|three|four|five|six|seven|eight|nine|ten|eleven|twelve) h[o]lds\b"
    r"|\bh[e]ld (machine|gpu|device|host)|\b(machine|gpu|device|host) (is|was|stays?) h[e]ld"
    r"|\bbu[d]gets?\b|\bl[e]nt\b|\bl[e]nding\b|\bb[o]rrow"
    r"|\bmachine (was )?l[o]st|\bl[o]st (the|a|its) (machine|gpu|device|host)"
    r"|\b(per|each|every|this|a later|the next|later|another|over|across|between) c[a]lls?\b"
    r"(?! (of|that|on|with)\b)(?!\))"
    r"|\bthe c[a]ll's\b(?! arguments)|\bdevice (c[a]lls?|t[i]me)|\bc[a]lls? \d"
)


def test_no_tracked_file_speaks_of_a_borrowed_machine() -> None:
    found = subprocess.run(["git", "grep", "--untracked", "-n", "-I", "-i", "-P", VOCABULARY],
                           cwd=REPOSITORY, capture_output=True, text=True)
    if found.returncode == 128 or "fatal" in found.stderr:
        pytest.skip(f"not a git checkout with PCRE: {found.stderr.strip()}")
    assert found.stdout == ""
