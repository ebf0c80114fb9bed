"""The fault hook: copied as `sitecustomize.py` onto a tool subprocess's
PYTHONPATH (see faults.py), so it loads before the tool and reads its orders
from the environment.

FAULT_ROOT: the tree whose calls count. FAULT_OPS: the `os` functions
counted (`create` and `write` as faults.py describes them). FAULT_MATCH:
count only calls on a path ending so. FAULT_AT, FAULT_ACT: the call to act
at, and the line of Python that acts. FAULT_LOG: a file every counted call,
and every fsync in the tree, is written to. FAULT_ON_IMPORT: act as this
module is about to be imported instead.

FAULT_FORK_AT, FAULT_CONTROL: the kills of a sweep, forked after the plan
(`_serve_kills`).
"""

import os
import signal
import sys

_root = os.environ["FAULT_ROOT"]
_at = int(os.environ["FAULT_AT"])
_act = os.environ["FAULT_ACT"]
_match = os.environ.get("FAULT_MATCH", "")
_count = [0]
_log = os.environ.get("FAULT_LOG")
_fork_at = os.environ.get("FAULT_FORK_AT", "")
_forked = [False]


def _where(descriptor):
    return os.readlink(f"/proc/self/fd/{descriptor}")


def _paths(name, args, kwargs):
    if name == "write":
        try:
            return [_where(args[0])]
        except OSError:
            return []
    if name == "create" and not args[1] & os.O_CREAT:
        return []
    # The tool acts through directory descriptors: name each path in full.
    names = [os.fspath(a) for a in args[:2] if isinstance(a, (str, os.PathLike))]
    descriptors = (
        [kwargs.get("dir_fd")] * 2 if "dir_fd" in kwargs
        else [kwargs.get("src_dir_fd"), kwargs.get("dst_dir_fd")]
    )
    return [
        os.path.join(_where(descriptor), name)
        if descriptor is not None and not os.path.isabs(name) else name
        for name, descriptor in zip(names, descriptors)
    ]


def _wrap(name):
    attribute = {"create": "open"}.get(name, name)
    real = getattr(os, attribute)

    def wrapped(*args, **kwargs):
        paths = _paths(name, args, kwargs)
        if paths and any(str(p).startswith(_root) for p in paths):
            if not _match or any(str(p).endswith(_match) for p in paths):
                _count[0] += 1
                if _fork_at and not _forked[0] and any(str(p).endswith(_fork_at) for p in paths):
                    _forked[0] = True
                    _serve_kills()
                if _log:
                    with open(_log, "a") as log:
                        log.write(f"{_count[0]} {name} {' '.join(paths)}\n")
                if _count[0] == _at:
                    exec(_act, {"os": os, "signal": signal, "paths": paths, "root": _root,
                                "args": args, "real": real})
        return real(*args, **kwargs)

    setattr(os, attribute, wrapped)


# -- kills forked after the plan -----------------------------------------------------


def _serve_kills():
    """Fork one child per kill the test asks for, each the continuation of
    this very run from this call on, and report how each ended.

    Everything up to here (interpreter start, imports, the lock, recovery,
    the plan) is done once; every child goes on from this call with the
    count, the plan, the nonce and the signal handlers it has, counts the
    calls that follow as a run of its own would, and meets its kill. The
    test puts the tree back as it stands now before each one.

    What this process holds open in the tree is opened anew before each
    fork (the tree was put back since), and closed after it: the lock the
    tool took is then held by the child alone, as by a run of its own, and
    a killed child leaves it free for the run that recovers.
    """
    import fcntl
    import json
    import socket

    global _at, _act, _log
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address = os.environ["FAULT_CONTROL"]  # "@name": a name in the abstract namespace
    control.connect("\0" + address[1:] if address.startswith("@") else address)
    orders = control.makefile("r")
    held = _held_in_tree()
    paths = sorted(path for path, _ in held.values())
    control.sendall(json.dumps({"at": _count[0], "held": paths}).encode() + b"\n")
    # Let go of them (of the lock with them) until the first fork.
    for descriptor in held:
        os.close(descriptor)
    for line in orders:
        order = json.loads(line)
        if order is None:
            break
        for descriptor, (path, flags) in held.items():
            again = _open(path, flags)
            if path.endswith(os.sep + ".dflash2-backport.lock"):
                fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if again != descriptor:
                os.dup2(again, descriptor, inheritable=False)
                os.close(again)
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            orders.close()
            control.close()
            output = _open(order["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(output, 1)
            os.dup2(output, 2)
            os.close(output)
            _at, _act, _log = order["at"], order["act"], order["log"] or _log
            return
        for descriptor in held:
            os.close(descriptor)
        _, status = os.waitpid(child, 0)
        control.sendall(json.dumps(os.waitstatus_to_exitcode(status)).encode() + b"\n")
    # Nothing of this run's own goes further: its output, its exit handlers
    # and its lock's release belong to the children.
    os._exit(0)


def _held_in_tree():
    """Descriptor -> (path, flags), for what this process holds open in the tree."""
    held = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            path = _where(int(name))
        except OSError:
            continue
        if path == _root or path.startswith(_root + os.sep):
            held[int(name)] = (path, _flags(int(name)))
    return held


def _flags(descriptor):
    with open(f"/proc/self/fdinfo/{descriptor}") as info:
        for line in info:
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    raise OSError(f"no flags for descriptor {descriptor}")


_open = os.open  # never counted, whatever FAULT_OPS wraps


for _name in os.environ.get("FAULT_OPS", "replace rename unlink remove rmdir mkdir").split():
    _wrap(_name)


def _log_fsync():
    # Logged in order with the writes, never counted as one.
    real = os.fsync

    def fsync(descriptor):
        result = real(descriptor)
        where = _where(descriptor if isinstance(descriptor, int) else descriptor.fileno())
        if _log and where.startswith(_root):
            with open(_log, "a") as log:
                log.write(f"- fsync {where}\n")
        return result

    os.fsync = fsync


_log_fsync()


def _trip_on_import(module):
    # Acts as `module` is about to be imported, before any of it runs.
    import sys

    class Tripwire:
        def find_spec(self, name, path=None, target=None):
            if name == module:
                exec(_act, {"os": os, "signal": signal})
            return None

    sys.meta_path.insert(0, Tripwire())


if os.environ.get("FAULT_ON_IMPORT"):
    _trip_on_import(os.environ["FAULT_ON_IMPORT"])
