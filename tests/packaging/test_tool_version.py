"""`--version` names the commit the installed tool was built from, where
there is one: the README has users pin installs to a commit, and this is how
they see which one they have. Each case installs the tool with pip, as a
user does, from a git repository of this project's files; the expected
commit is what git says of that repository."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dflash2_backport import __version__
from dflash2_backport.build_info import vcs_commit
from tests.checkout import copy_of_the_project

pytestmark = pytest.mark.wheels

REPOSITORY = Path(__file__).resolve().parents[2]


def git(repository: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@example.invalid",
         *args],
        check=True, capture_output=True, text=True,
    ).stdout.strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of this project's files, one commit deep."""
    repository = copy_of_the_project(tmp_path_factory.mktemp("clone"))
    git(repository, "init", "--quiet")
    git(repository, "add", "--all")
    git(repository, "commit", "--quiet", "--message", "the tool")
    return repository


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the tool's requirements; each test installs the tool."""
    directory = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(directory)], check=True)
    pip(directory / "bin" / "python", "install", "typer", "libcst")
    yield directory / "bin" / "python"
    shutil.rmtree(directory, ignore_errors=True)


def pip(python: Path, *args: str) -> None:
    subprocess.run(
        [python, "-m", "pip", "--quiet", "--disable-pip-version-check", "--no-cache-dir", *args],
        check=True,
    )


def version_after(python: Path, *source: str) -> str:
    pip(python, "install", "--no-deps", "--force-reinstall", *source)
    result = subprocess.run([python.with_name("dflash2-backport"), "--version"],
                            capture_output=True, text=True, cwd=python.parent)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.installs
def test_an_install_from_a_clones_path_names_its_commit(clone: Path, venv: Path) -> None:
    head = git(clone, "rev-parse", "HEAD")
    assert version_after(venv, str(clone)) == f"dflash2-backport {__version__} (commit {head})\n"


@pytest.mark.installs
def test_an_install_from_git_pinned_to_a_commit_names_that_commit(
    clone: Path, venv: Path
) -> None:
    head = git(clone, "rev-parse", "HEAD")
    shown = version_after(venv, f"git+{clone.as_uri()}@{head}")
    assert shown == f"dflash2-backport {__version__} (commit {head})\n"


@pytest.mark.installs
def test_a_wheel_built_from_an_sdist_of_a_clone_names_its_commit(
    clone: Path, venv: Path, tmp_path: Path
) -> None:
    here = shutil.copytree(clone, tmp_path / "clone")
    head = git(here, "rev-parse", "HEAD")
    # The sdist as the build frontend users run makes it.
    pip(venv, "install", "build")
    subprocess.run([venv, "-m", "build", "--sdist", "--outdir", here / "dist", here],
                   check=True, capture_output=True)
    (sdist,) = (here / "dist").glob("*.tar.gz")
    # pip unpacks the sdist where no git repository is, and builds the wheel there.
    assert version_after(venv, str(sdist)) == f"dflash2-backport {__version__} (commit {head})\n"


@pytest.mark.installs
def test_a_clone_with_uncommitted_changes_says_so(clone: Path, venv: Path, tmp_path: Path) -> None:
    changed = shutil.copytree(clone, tmp_path / "changed")
    head = git(changed, "rev-parse", "HEAD")
    with (changed / "README.md").open("a") as readme:
        readme.write("\nA local note.\n")
    shown = version_after(venv, str(changed))
    assert shown == f"dflash2-backport {__version__} (commit {head}, with uncommitted changes)\n"


@pytest.mark.installs
def test_files_from_no_git_repository_give_the_version_alone(venv: Path, tmp_path: Path) -> None:
    copy = copy_of_the_project(tmp_path / "copy")
    assert version_after(venv, str(copy)) == f"dflash2-backport {__version__}\n"


DIRECT_URLS = {
    "git, pinned": (
        '{"url": "https://example.invalid/x.git", "vcs_info": {"vcs": "git", '
        '"requested_revision": "main", "commit_id": "0123456789abcdef0123456789abcdef01234567"}}',
        "0123456789abcdef0123456789abcdef01234567",
    ),
    "a local directory": ('{"url": "file:///src/x", "dir_info": {}}', None),
    "an archive": ('{"url": "https://example.invalid/x.whl", "archive_info": {}}', None),
    "vcs_info without a commit": ('{"url": "u", "vcs_info": {"vcs": "git"}}', None),
    "not JSON": ("{", None),
    "none": (None, None),
}


@pytest.mark.parametrize(("text", "commit"), DIRECT_URLS.values(), ids=DIRECT_URLS.keys())
def test_the_commit_of_a_vcs_install_is_read_from_pep_610s_direct_url(text, commit) -> None:
    assert vcs_commit(text) == commit
    if text and commit:
        assert json.loads(text)["vcs_info"]["commit_id"] == commit
