"""A store in a local folder: keys are files below the root.

Reads are cheap and the disk is shared, so `concurrency` is the number of cores (the reader's
decoding threads) and `get_many` reads in order; `get_ranges` seeks and reads only the bytes
asked for; the metadata cache revalidates on every query (`metadata_ttl` 0), which costs a
`stat` per document. A key's token (`file_version`) is its file's inode, change time,
modification time and size: a file replaced by one of the same size and mtime (a reproducible
archive extracted over the last, a 1-second mtime filesystem) still has a new inode or change
time, which no writer can set back. Keys found missing are counted (`missing_seen`), which
marks a store whose files another process may rewrite under a running scan: such a scan checks
after every unit that its table's documents and coordinate chunks are unchanged before it hands
the unit's rows over (`scan/validity.ChangeGuard`; `ChangeWatching` for a remote store).

Symbolic links are followed while they stay inside the store. A link that leads out of it, or
a loop of links, is refused by name (`refusal`): reading a key below it raises
`StoreReadError`, and the metadata walk keeps such an entry as a problem instead of failing
the whole store, so the rest of the store still reads.

The root is followed as given: a path that is (or lies below) a symbolic link switched to
another folder since the store was opened (an atomic deploy: `current.zarr` -> `v2.zarr`)
is resolved again the next time tokens are taken (`token_many`), one `stat` of the given path
per call, so the keys' tokens are those of the new folder's files and the reads that follow
go there too. Until then reads go on in the folder resolved before.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Sequence
from typing import Any, cast

from zarrsql import counters
from zarrsql.errors import StoreReadError
from zarrsql.store.base import ByteRange, check_key

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: Last key parts that are no file name (`check_key` says why).
_ODD_NAMES = frozenset(("", ".", ".."))
#: Reads worth having in flight on a local disk: one per core, capped like the reader's pool.
LOCAL_CONCURRENCY = max(1, min(os.cpu_count() or 1, 8))


def _read_file(fd: int, hint: int = 0) -> bytes:
    """The whole file open as `fd`, by plain reads (no buffered file object: for a chunk of a
    few KB its setup costs as much as the read). Without a `hint` the first read is sized by
    `fstat`; with one (a size the file is likely under, from its siblings) that `fstat` is
    saved and a second read confirms the end. A regular file's short read is its end when
    `fstat` says it is one; anything else is read until a read returns nothing."""
    if hint > 0:
        first = os.read(fd, hint)
        if len(first) < hint:
            more = os.read(fd, 1 << 20)
            if not more:  # the end, whatever the kind of file
                return first
            parts = [first, more]
        else:
            parts = [first]
        while part := os.read(fd, 1 << 20):
            parts.append(part)
        return b"".join(parts)
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    want = info.st_size + 1  # one byte more: a file that grew since is still read whole
    parts = []
    while True:
        part = os.read(fd, want)
        if part:
            parts.append(part)
        if not part or (len(part) < want and stat.S_ISREG(info.st_mode)):
            break
        want = 1 << 20
    return parts[0] if len(parts) == 1 else b"".join(parts)  # b"" for an empty file


class _Many:
    """What one `get_many` call learns as it goes: the real path of each folder (and of each
    folder's parent), and a read size its files are likely under (`_read_file`'s hint)."""

    __slots__ = ("folders", "hint", "parents")

    def __init__(self) -> None:
        self.folders: dict[str, str] = {}
        self.parents: dict[str, str] = {}
        self.hint = 0


#: What `LocalStore._read_no_follow` answers when the resolving way must read the key.
_RESOLVE = object()
#: Folders whose real paths a store remembers (`LocalStore._checked_folder`); past it they
#: are forgotten together.
MAX_FOLDERS = 4096
#: A hint of at most this many bytes is used; past it every file is sized by `fstat`, since a
#: read into a guess much larger than the file costs an allocation of the guess.
MAX_HINT = 1 << 20


class LocalStore:
    """Reads files below `root`; symbolic links that leave the root are refused."""

    remote = False
    can_list = True
    concurrency = LOCAL_CONCURRENCY
    metadata_ttl = 0.0

    def __init__(self, root: str) -> None:
        #: The root as given, links unresolved: what `token_many` follows (module docstring).
        self.location = os.path.abspath(root)
        self.root = os.path.realpath(root)
        self.url = self.root
        self.cache_key = self.root
        self._root_id = _identity(self.root)
        self._moving = threading.Lock()
        self._missing = 0
        self._missing_lock = threading.Lock()
        self._folders: dict[str, tuple[str, tuple[int, int]]] = {}  # `_checked_folder`'s

    @property
    def missing_seen(self) -> int:
        """How many reads found their key missing so far (it only grows); a store that counts
        them is one `scan/validity.ChangeGuard` checks after every unit."""
        return self._missing

    def _not_found(self) -> None:
        with self._missing_lock:
            self._missing += 1
        counters.count(requests=1)

    def _path(self, key: str) -> str:
        check_key(key)
        path = os.path.join(self.root, *key.split("/")) if key else self.root
        return path

    def _inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self.root + os.sep)

    def refusal(self, key: str) -> str | None:
        """Why `key` is not read: the first link on its path that leads out of the store or
        loops, named; None when every link on the path stays inside."""
        path = self.root
        for part in check_key(key).split("/") if key else []:
            path = os.path.join(path, part)
            if not os.path.islink(path):
                continue
            where = os.path.relpath(path, self.root).replace(os.sep, "/")
            try:
                real = os.path.realpath(path, strict=True)
            except OSError as err:
                if err.errno != errno.ELOOP:  # a dangling link: judged by where it points
                    real = os.path.realpath(path)
                else:
                    return (
                        f"'{where}' in store '{self.root}' is a loop of symbolic links (it leads back to "
                        "itself); remove or fix the link"
                    )
            if not self._inside(real):
                return (
                    f"'{where}' in store '{self.root}' is a symbolic link to '{real}', outside the store; "
                    "zarrsql reads nothing outside the store it is given: copy the data into the store, "
                    "or read the link's target as a store of its own"
                )
        return None

    def _refused(self, key: str) -> StoreReadError:
        reason = self.refusal(key) or f"'{key}' in store '{self.root}' leads outside the store"
        return StoreReadError(f"refusing to read '{key}': {reason}")

    def get(self, key: str) -> bytes | None:
        return self._read(key, None)

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """`get` of each key, with each folder's real path resolved once per call: the chunks
        of a region share a few folders, and resolving every path costs more than reading a
        small chunk. A file is opened without following a final link; a link there, or a
        folder outside the store, takes `get`'s own checks."""
        many = _Many()
        return [self._read_in(k, many) for k in keys]

    def _read_in(self, key: str, many: _Many) -> bytes | None:
        folder, _, name = key.rpartition("/")
        if name in _ODD_NAMES or "\\" in name:
            check_key(key)  # raises: the name is no plain file name
        real = many.folders.get(folder)
        if real is None:  # the folder's checks, once per call: the key's other parts are its
            check_key(key)
            real = self._resolve(folder, many.parents)
            real = many.folders[folder] = real + os.sep if self._inside(real) else ""
        if not real:  # the folder leads outside the store: `get` refuses by name
            return self._read(key, None)
        # the folder as resolved: only the file's own name is left
        data = self._read_no_follow(real + name, None, many.hint)
        if data is _RESOLVE:  # a link as the last part, or any other failure: `get` says which
            return self._read(key, None)
        if isinstance(data, bytes) and len(data) * 2 + 4096 > many.hint:  # room for siblings up to twice its size
            many.hint = 0 if len(data) * 2 + 4096 > MAX_HINT else len(data) * 2 + 4096
        return cast("bytes | None", data)

    def _read_no_follow(self, path: str, byte_range: ByteRange | None, hint: int = 0) -> bytes | None | object:
        """The file at `path`, whose folder is resolved inside the store, read without following
        a link as its last part: its bytes; None when it is absent (counted as missing);
        `_RESOLVE` when the resolving way must decide (a link, any other failure to open)."""
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            self._not_found()
            return None
        except OSError:
            return _RESOLVE
        try:
            data = _read_file(fd, hint) if byte_range is None else _read_range(fd, byte_range)
        except IsADirectoryError:
            self._not_found()
            return None
        except OSError as err:
            raise StoreReadError(f"cannot read '{path}': {err.strerror or err}") from err
        finally:
            os.close(fd)
        counters.count(requests=1, bytes_read=len(data))
        return data

    def _resolve(self, folder: str, parents: dict[str, str]) -> str:
        """The real path of `folder` (a checked key). The chunk folders of a region are
        siblings (`t2m/c/5/0`, `t2m/c/5/1`, ...): when the parent was resolved in this call
        and the last part is no symbolic link, the folder's real path is the parent's joined
        with it, one `lstat` where `realpath` costs one per part of the whole path."""
        parent, _, last = folder.rpartition("/")
        known = parents.get(parent) if parent else None
        if known is not None:
            joined = known + os.sep + last
            try:
                linked = stat.S_ISLNK(os.lstat(joined).st_mode)
            except OSError:  # absent (its keys read as absent) or unreadable: `realpath` decides
                linked = True
            if not linked:
                return joined
        real = os.path.realpath(self._path(folder))
        if parent and known is None:
            parents[parent] = os.path.realpath(self._path(parent))
        return real

    def get_ranges(self, requests: Sequence[tuple[str, ByteRange]]) -> list[bytes | None]:
        return [self._read(k, r) for k, r in requests]

    def _read(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        folder, _, name = check_key(key).rpartition("/")
        real = self._checked_folder(folder) if name else None
        data = _RESOLVE if real is None else self._read_no_follow(real + name, byte_range)
        if data is _RESOLVE:  # the root, a folder outside, absent or unreadable, a link: named below
            return self._read_resolved(key, byte_range)
        return cast("bytes | None", data)

    def _checked_folder(self, folder: str) -> str | None:
        """The real path of `folder` (with a trailing separator) when it is inside the store,
        else None; remembered with the folder's identity (device, inode) across reads.

        Python's `realpath` costs a system call per part of the path and holds the GIL
        between them: tens of microseconds alone, up to a millisecond while other threads
        decode, per chunk. One `stat` of the remembered real path confirms it still names the
        same folder: a part replaced by a link since leads elsewhere, and the folder is
        resolved again (the same check-then-open window the resolving way has)."""
        known = self._folders.get(folder)
        if known is not None:
            try:
                info = os.stat(known[0])
            except OSError:
                info = None
            if info is not None and (info.st_dev, info.st_ino) == known[1]:
                return known[0]
        real = os.path.realpath(self._path(folder))
        if not self._inside(real):
            return None
        try:
            info = os.stat(real)
        except OSError:
            return None
        if len(self._folders) >= MAX_FOLDERS:
            self._folders.clear()
        real += os.sep
        self._folders[folder] = (real, (info.st_dev, info.st_ino))
        return real

    def _read_resolved(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        path = self._path(key)
        real = os.path.realpath(path)  # checked before reading: nothing outside is ever read
        if not self._inside(real):
            raise self._refused(key)
        try:
            with open(real, "rb") as f:
                data = f.read() if byte_range is None else _read_range(f.fileno(), byte_range)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            self._not_found()
            return None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise self._refused(key) from err
            raise StoreReadError(f"cannot read '{path}': {err.strerror or err}") from err
        counters.count(requests=1, bytes_read=len(data))
        return data

    def zarr_python_store(self) -> Any:
        import zarr.storage

        return zarr.storage.LocalStore(self.root, read_only=True)

    def token_many(self, keys: Sequence[str]) -> list[str | None]:
        """Each key's `file_version`, after following the root as given (module docstring)."""
        self._follow_root()
        return [file_version(self._path(k)) for k in keys]

    def _follow_root(self) -> None:
        """Resolve the root again when the path as given now names another folder than the
        one resolved (one `stat`): a link on it switched, or the folder was replaced."""
        if _identity(self.location) == self._root_id:
            return
        with self._moving:
            now = _identity(self.location)
            if now == self._root_id:
                return
            self.root = self.url = self.cache_key = os.path.realpath(self.location)
            self._folders = {}  # real paths of the old folder's folders
            self._root_id = now

    def list_dir(self, prefix: str) -> list[str]:
        key = prefix.rstrip("/")
        path = self._path(key)
        if not self._inside(os.path.realpath(path)):
            raise self._refused(key)
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise self._refused(key) from err
            raise StoreReadError(f"cannot list '{path}': {err.strerror or err}") from err

    def token(self, key: str) -> str | None:
        return self.token_many([key])[0]


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the folder `path` leads to, None when it leads nowhere."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def file_version(path: str) -> str | None:
    """A validator of the file at `path` (links followed) as it is now, None when there is
    none: inode, change time, modification time and size. mtime and size alone miss a file
    replaced by one of the same size with its mtime set back (`tar --mtime`, zip extraction,
    `os.utime`, a filesystem keeping whole seconds); the inode differs for a new file, and the
    change time moves on every write and can be set by no writer."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{st.st_ino}:{st.st_ctime_ns}:{st.st_mtime_ns}:{st.st_size}"


def _read_range(fd: int, byte_range: ByteRange) -> bytes:
    start, end = byte_range.bounds()
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    size = info.st_size
    first = max(0, size + start) if start < 0 else start
    last = size if end is None else min(size, size + end if end < 0 else end)
    parts = []
    while first < last and (part := os.pread(fd, last - first, first)):
        parts.append(part)
        first += len(part)
    return b"".join(parts)
