"""Build hooks; the project's metadata is in pyproject.toml.

A wheel or sdist built from a git checkout of this repository records the
commit it was built from (dflash2_backport/BUILD_COMMIT), which
`dflash2-backport --version` shows; a wheel built from such an sdist keeps
it.
"""

import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
_info = runpy.run_path(str(HERE / "dflash2_backport" / "build_info.py"))
RECORD = Path("dflash2_backport") / _info["RECORD_NAME"]


def _write_record(directory: Path) -> None:
    commit = _info["git_commit"](HERE)
    if commit is not None:
        (directory / RECORD).write_text(commit + "\n")
    elif (HERE / RECORD).is_file():  # building from an sdist that has it
        (directory / RECORD).write_text((HERE / RECORD).read_text())


class BuildPyRecordingTheCommit(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            _write_record(Path(self.build_lib))


class SdistRecordingTheCommit(sdist):
    def make_release_tree(self, base_dir, files) -> None:
        super().make_release_tree(base_dir, files)
        _write_record(Path(base_dir))


setup(cmdclass={"build_py": BuildPyRecordingTheCommit, "sdist": SdistRecordingTheCommit})
