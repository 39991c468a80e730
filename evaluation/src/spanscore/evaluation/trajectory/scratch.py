"""Scratch directories a process owns: named with its process id, removed when it is done, and
those of processes killed before they could remove theirs (kill -9) removed by the next one."""

from __future__ import annotations

import os
import shutil
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
    """A new directory `<prefix><pid>-...` in `parent` (the system's temporary directory by
    default), after removing the directories of that prefix whose process is gone."""
    parent = parent if parent is not None else tempfile.gettempdir()
    for entry in os.scandir(parent):
        owner = entry.name.removeprefix(prefix).split("-", 1)[0]
        if entry.name.startswith(prefix) and owner.isdigit() and not alive(int(owner)):
            shutil.rmtree(entry.path, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=parent)
