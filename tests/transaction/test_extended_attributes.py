"""A replaced file keeps its extended attributes, its access control list
above all: without it the owning group would get the mask's permissions and
the users it names would lose theirs."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from tests.faults import run_tool
from tests.trees import make_site

pytestmark = pytest.mark.wheels

REGISTRY = "vllm/model_executor/models/registry.py"
ACL = "system.posix_acl_access"
USER_OBJ, USER, GROUP_OBJ, MASK, OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
NOBODY_ELSE = 0xFFFFFFFF


def acl(*entries: tuple[int, int, int]) -> bytes:
    """An access ACL as the kernel stores it (version 2, then tag, perm, id)."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


#: user::rw- user:1234:rw- group::r-- mask::rw- other::r--
SHARED_WITH_1234 = acl((USER_OBJ, 6, NOBODY_ELSE), (USER, 6, 1234), (GROUP_OBJ, 4, NOBODY_ELSE),
                       (MASK, 6, NOBODY_ELSE), (OTHER, 4, NOBODY_ELSE))

# (the attributes on the file before, the attributes it must keep)
CASES = [
    ({"user.origin": b"site-policy"}, {"user.origin": b"site-policy"}),
    ({ACL: SHARED_WITH_1234}, {ACL: SHARED_WITH_1234}),
    ({ACL: SHARED_WITH_1234, "user.origin": b"x"}, {ACL: SHARED_WITH_1234, "user.origin": b"x"}),
]


def attributes(path: Path) -> dict[str, bytes]:
    return {name: os.getxattr(path, name) for name in os.listxattr(path)
            if not name.startswith("security.")}


@pytest.mark.parametrize("before, kept", CASES)
def test_apply_and_revert_keep_the_extended_attributes_of_the_files_they_replace(
    tmp_path: Path, before: dict[str, bytes], kept: dict[str, bytes]
) -> None:
    site = make_site("0.27.1", tmp_path / "site")
    target = site / REGISTRY
    try:
        for name, value in before.items():
            os.setxattr(target, name, value)
    except OSError as error:
        if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
            pytest.skip(f"this file system does not keep {name} ({error.strerror})")
        raise
    mode = target.stat().st_mode
    for command in ("apply", "revert"):
        inode = target.stat().st_ino
        done = run_tool([command, "--site-packages", str(site)])
        assert done.returncode == 0, done.stderr
        assert target.stat().st_ino != inode, "the file was not replaced"
        assert attributes(target) == kept, command
        assert target.stat().st_mode == mode, command
