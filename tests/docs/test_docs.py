"""The repository's documentation: a README short enough to be a user's
guide, a GPU how-to, links that lead somewhere, and the release counts the
tool declares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
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
