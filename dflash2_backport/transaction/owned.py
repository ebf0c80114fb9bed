"""The paths this tool may write in a tree, derived from its own declarations.

dpkg and pip act only on paths they derive themselves, never on paths read
from the tree they manage: whoever can write `vllm/` can plant anything
there. The same holds here. The tool writes the targets of its edits, the
modules it installs, the one package directory it may create for them,
vLLM's RECORD in an installed vLLM, and its own record, lock and staged
files beside them. A path read from disk (an intent record, say) is acted on
only when it is one of these, spelled exactly so.
"""

from __future__ import annotations

import dataclasses
import stat

from ..utils.errors import BackportError
from ..utils.safe_files import Tree
from ..vllm_tree.layout import MODULE_FILES, TARGET_FILES


def _creatable_directories() -> tuple[str, ...]:
    """Directories a commit may create: those that hold only new modules.
    Any directory that also holds a target exists already in a vLLM tree."""
    existing = {"vllm"}
    for target in TARGET_FILES:
        parts = target.split("/")
        existing.update("/".join(parts[:i]) for i in range(1, len(parts)))
    creatable = []
    for module in MODULE_FILES:
        parts = module.split("/")
        for i in range(1, len(parts)):
            directory = "/".join(parts[:i])
            if directory not in existing and directory not in creatable:
                creatable.append(directory)
    return tuple(creatable)


CREATABLE_DIRECTORIES = _creatable_directories()


@dataclasses.dataclass(frozen=True)
class Owned:
    #: vLLM's RECORD relative to the root, in an installed vLLM; else None.
    record: str | None = None

    @property
    def files(self) -> tuple[str, ...]:
        return (*TARGET_FILES, *MODULE_FILES, *((self.record,) if self.record else ()))

    @property
    def directories(self) -> tuple[str, ...]:
        return CREATABLE_DIRECTORIES

    @staticmethod
    def may_be_absent(path: str) -> bool:
        """Only a module is ever created or removed; targets and RECORD are replaced."""
        return path in MODULE_FILES

    def check(self, tree: Tree) -> None:
        """Refuse a link or anything but a directory on the way to an owned
        file, or an owned file that is not a regular file, before the tool
        reads, creates (its lock included) or removes anything."""
        package = tree.lstat("vllm/__init__.py")
        if package is None:
            raise BackportError(
                f"{tree.root / 'vllm' / '__init__.py'}: missing, so vllm/ is not an installed "
                "vLLM package; reinstall vLLM or point the tool at the directory that holds it"
            )
        tree.refuse_unless_regular("vllm/__init__.py", package)
        for relative in self.files:
            info = tree.lstat(relative)
            if info is None:
                continue  # a module not installed yet
            if stat.S_ISDIR(info.st_mode):
                if relative == self.record:
                    raise BackportError(
                        f"{tree.root / relative}: is a directory, expected vLLM's RECORD file; "
                        "nothing was written; reinstall vLLM to restore it"
                    )
                continue  # where a module goes: reported as drift, with the module named
            tree.refuse_unless_regular(relative, info)
