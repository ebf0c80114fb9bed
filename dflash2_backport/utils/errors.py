"""Expected failures: each is one line for the user, never a traceback."""

from __future__ import annotations

import signal


#: What to do where a file system is mounted read-only (a container's
#: read-only root, a read-only bind mount): no permission would help; the
#: edits belong where that image or mount is made.
READ_ONLY_MOUNT_REMEDY = (
    "run the command where it can be written (in the image's build, or on a "
    "read-write mount of it)"
)


class BackportError(Exception):
    """Something about the target stops the tool; the message says what to do."""


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived; raised only where stopping leaves
    the tree whole (before a commit starts, or after it has finished)."""

    def __init__(self, signum: int, after_commit: bool = False) -> None:
        self.signum = signum
        self.after_commit = after_commit
        #: Files the finished commit wrote, when it was one.
        self.written: list[str] = []
        name = signal.Signals(signum).name
        if after_commit:
            message = (
                f"interrupted by {name} during the commit; the commit was finished "
                "first, so every change is in place"
            )
        else:
            message = f"interrupted by {name}; nothing was written"
        super().__init__(message)
