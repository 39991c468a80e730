"""Scratch directories a process owns: named with its process id and host, removed when it is
done, and those of processes killed before they could remove theirs (kill -9) removed by the
next one on the same host. (A host's name too: containers sharing one temporary directory
number their processes apart, and one must not take another's running process for gone.)"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile


def alive(pid: int) -> bool:
    """Whether a process with this id runs (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def scratch_directory(prefix: str, parent: str | None = None) -> tempfile.TemporaryDirectory[str]:
    """A new directory `<prefix><pid>@<host>-...` in `parent` (the system's temporary directory
    by default), after removing the directories of that prefix whose process on this host is
    gone."""
    parent = parent if parent is not None else tempfile.gettempdir()
    host = socket.gethostname()
    for entry in os.scandir(parent):
        if not entry.name.startswith(prefix):
            continue
        owner = entry.name.removeprefix(prefix).rsplit("-", 1)[0]  # no "-" in tempfile's part
        pid, _, where = owner.partition("@")
        if pid.isdigit() and where in ("", host) and not alive(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}@{host}-", dir=parent)
