"""The repository's documentation: a README short enough to be a user's
guide, a GPU how-to, links that lead somewhere, the release counts the
tool declares, and the `verify --gpu` output and times the docs quote, held
to the committed run."""

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


VERIFY_RUN = REPOSITORY / "scripts" / "gpu" / "runs" / "verify-0.27.1" / "results"


def _wall_seconds(step: str) -> int:
    """A verify step's wall time as its results recorded it, in whole seconds."""
    text = (VERIFY_RUN / f"verify-{step}.txt").read_text()
    return round(float(re.search(r"^exit \d+, wall ([\d.]+) s$", text, re.M)[1]))


def test_the_verify_gpu_output_the_gpu_page_shows_is_what_the_committed_run_printed() -> None:
    printed = (VERIFY_RUN / "verify-warm.txt").read_text().splitlines()
    shown = [f"    {line.rstrip()}" for line in printed if not line.startswith("exit ")]
    assert "\n".join(shown) in (REPOSITORY / "docs" / "gpu.md").read_text()


@pytest.mark.parametrize("page", ["gpu.md", "versions.md"])
def test_the_verify_gpu_wall_times_the_docs_give_are_the_committed_runs(page: str) -> None:
    text = " ".join((REPOSITORY / "docs" / page).read_text().split())
    for step in ("warm", "cold"):
        assert f"{_wall_seconds(step)} s" in text, (page, step)
