"""Swapping two directories in one step, so that a replaced store never leaves its path empty.

`mode="w"` over a store puts the complete new store where the old one was. With two renames
(the old store aside, the new one in) there is a moment with nothing at the path: a reader
then finds no store, and a writer killed in it leaves none. Linux can swap two paths in one
system call, `renameat2(..., RENAME_EXCHANGE)` (kernel 3.15, glibc 2.28, and the file systems
that implement it: ext4, xfs, btrfs, tmpfs among others), which `exchange` calls through
ctypes. Where the call or the flag is not supported (another system, an older C library, NFS
or a FUSE file system that refuses the flag), `exchange` says so and changes nothing; the
caller then falls back to the two renames, whose leftovers `write.staging` repairs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path

#: `renameat2`'s "relative to the current directory" (the paths given are absolute anyway).
_AT_FDCWD = -100

#: `renameat2`'s flag that swaps the two paths (linux/fs.h).
_RENAME_EXCHANGE = 2

#: What `renameat2` answers when the kernel or the file system cannot swap: no such system
#: call, a flag it does not know or a file system that refuses it.
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def _renameat2() -> Callable[..., int] | None:
    """The C library's `renameat2`, or None (not Linux, or a C library without it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    call.restype = ctypes.c_int
    return call  # type: ignore[no-any-return]


def exchange(first: Path, second: Path) -> bool:
    """Swap the two existing paths at once: False, with nothing changed, when this system or
    file system cannot; an `OSError` for any other failure (nothing changed either)."""
    call = _renameat2()
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))
