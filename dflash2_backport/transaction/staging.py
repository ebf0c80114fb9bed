"""Writing a file beside the one it replaces, and the directory work
around it, through descriptors that follow no link (`safe_files.Tree`).

A staged file is created afresh (never over anything already there), with
the owner, mode and extended attributes of the file it will replace, and
fsynced before anything is renamed into place.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ..utils.errors import BackportError
from ..utils.safe_files import STAGED_SUFFIX, Tree
from .owned import Owned


def staged_name(relative: str, nonce: str | None = None) -> str:
    """The staged name of `relative`: with a run's nonce, that run's alone;
    without one, the record's own copy (or a staged file of an earlier
    version of the tool)."""
    directory, _, name = relative.rpartition("/")
    staged = f".{name}.{nonce}{STAGED_SUFFIX}" if nonce else f".{name}{STAGED_SUFFIX}"
    return f"{directory}/{staged}" if directory else staged


def stage(
    tree: Tree,
    relative: str,
    data: bytes,
    owner: os.stat_result,
    mode: int,
    nonce: str | None = None,
) -> None:
    """Write `data` to a new file beside `relative`, owned like `owner`, with
    `mode` and the extended attributes of the file it replaces, if any, and
    fsync it. Never opened over anything already there."""
    staged = staged_name(relative, nonce)
    directory, name = tree.parent_of(staged)
    try:
        descriptor = os.open(
            name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=directory,
        )
    except FileExistsError:
        raise BackportError(
            f"{tree.root / staged}: a file this run did not stage stands "
            "where it stages its next version of "
            f"{Path(relative).name}; nothing was written; if it is not yours, remove it "
            "and run the command again"
        ) from None
    except OSError as error:
        raise _not_staged(tree.root / relative, error) from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view):]
        chown_like(tree.root / relative, descriptor, owner)
        os.fchmod(descriptor, mode)
        _copy_extended_attributes(tree, relative, descriptor)
        os.fsync(descriptor)
    except BaseException as error:
        # Created here, so ours to remove: a full disk leaves no half file.
        os.unlink(name, dir_fd=directory)
        if isinstance(error, OSError):
            raise _not_staged(tree.root / relative, error) from None
        raise
    finally:
        os.close(descriptor)


def _copy_extended_attributes(tree: Tree, relative: str, descriptor: int) -> None:
    """The replaced file's extended attributes, onto its new version: its
    access control list above all, whose loss would hand the owning group
    the mask's permissions and take away those of the users it names. A
    file the commit creates has none to carry (the kernel gives it the
    directory's default list)."""
    directory, name = tree.parent_of(relative)
    try:
        source = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory
        )
    except FileNotFoundError:
        return
    try:
        try:
            names = os.listxattr(source)
        except OSError as error:
            if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                return  # a file system without them
            raise
        for attribute in names:
            value = os.getxattr(source, attribute)
            try:
                os.setxattr(descriptor, attribute, value)
            except OSError as error:
                if attribute.startswith("system."):
                    raise BackportError(
                        f"{tree.root / relative}: its {attribute} could not be carried over "
                        f"to its new version ({error.strerror}); nothing was written; run "
                        "as its owner or as root"
                    ) from None
                # security.* and trusted.* need privileges this user lacks;
                # the new file has what the kernel and the policy give it.
    finally:
        os.close(source)


#: What frees a write that failed for want of room.
_REMEDIES = {
    errno.ENOSPC: "free space on its file system",
    errno.EDQUOT: "free space within your disk quota",
}


def _not_staged(path: Path, error: OSError) -> BackportError:
    """The file named as the user knows it, not by the staged copy's name,
    which is gone by the time they read this."""
    remedy = _REMEDIES.get(error.errno or 0)
    return BackportError(
        f"{path}: could not be written ({error.strerror}); nothing was written"
        + (f"; {remedy}, then run the command again" if remedy else "")
    )


def chown_like(path: Path, descriptor: int, reference: os.stat_result) -> None:
    mine = os.fstat(descriptor)
    if (mine.st_uid, mine.st_gid) == (reference.st_uid, reference.st_gid):
        return
    try:
        os.fchown(descriptor, reference.st_uid, reference.st_gid)
    except PermissionError:
        if os.geteuid() == 0:
            raise
        raise BackportError(
            f"{path}: owned by uid {reference.st_uid} gid {reference.st_gid}, and replacing "
            "it as this user would change that; nothing was written; run as its owner "
            "or as root"
        ) from None


def make_directories(tree: Tree, directories: Iterable[str]) -> None:
    # A new directory takes the owner, group and mode of the one it goes into.
    for relative in directories:
        parent, name = tree.parent_of(relative)
        info = os.fstat(parent)
        with tree.naming(relative):
            os.mkdir(name, 0o700, dir_fd=parent)
        descriptor = tree.directory(relative)
        os.fchmod(descriptor, stat.S_IMODE(info.st_mode))
        chown_like(tree.root / relative, descriptor, info)


def remove_empty_directory(tree: Tree, relative: str) -> None:
    parent, name = tree.parent_of(relative)
    if parent is None:
        return
    try:
        os.rmdir(name, dir_fd=parent)
    except OSError:
        pass  # not empty: something else lives there now


def sync_directories(tree: Tree, paths: Iterable[str]) -> None:
    for directory in sorted({p.rpartition("/")[0] for p in paths}):
        descriptor = tree.directory(directory)
        if descriptor is not None:
            fsync(descriptor)


def fsync(descriptor: int) -> None:
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename stands


def remove_bytecode(tree: Tree, removed: Iterable[str]) -> None:
    """Bytecode of removed modules, and their package directory once empty.
    Names are matched against the module's own, never as a pattern."""
    for relative in removed:
        directory = relative.rpartition("/")[0]
        stem = relative.rpartition("/")[2].removesuffix(".py")
        cache = f"{directory}/__pycache__"
        info = tree.lstat(cache)
        # Anything but a plain directory there holds no bytecode of ours.
        descriptor = tree.directory(cache) if info and stat.S_ISDIR(info.st_mode) else None
        if descriptor is not None:
            for name in os.listdir(descriptor):
                if name.startswith(f"{stem}.") and name.endswith(".pyc"):
                    info = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode):
                        os.unlink(name, dir_fd=descriptor)
            remove_empty_directory(tree, cache)
        if directory not in Owned().directories:
            continue  # only the package directory the tool created goes with it
        if not any(m.startswith(f"{directory}/") and tree.lstat(m) for m in Owned().files):
            remove_empty_directory(tree, directory)
