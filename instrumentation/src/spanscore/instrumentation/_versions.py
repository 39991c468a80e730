"""Which installed version of a framework a shim supports (one rule for every shim)."""

from __future__ import annotations

import logging
from importlib import metadata

log = logging.getLogger("spanscore.instrumentation")

VersionRange = tuple[tuple[int, ...], tuple[int, ...]]  # [min, max)


def version_tuple(version: str) -> tuple[int, ...]:
    """`1.66.0rc1` -> (1, 66, 0): the leading numbers of the first three parts."""
    numbers = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def supported_version(distribution: str, supported: VersionRange, requirement: str) -> str | None:
    """The installed version of `distribution` when it is in `supported`; None (and a log
    line saying why the shim is skipped) otherwise."""
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        log.info("%s is not installed; its shim is skipped", distribution)
        return None
    low, high = supported
    if not low <= version_tuple(version) < high:
        log.warning(
            "%s %s is not supported (%s); its shim is skipped", distribution, version, requirement
        )
        return None
    return version
