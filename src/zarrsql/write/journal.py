"""Undoing an append: the backup of a store's documents, the journal of the keys it changed.

Before an append writes (`commit.append_commit`, local disk), the documents of every node are
copied into `.zarrsql-append-backup.json`. The append then writes through a `journaled` store:
before it first creates, replaces or deletes any other key, the key is noted in
`.zarrsql-append-journal` (one JSON line, on disk before the change), and a file it replaces
or deletes is first kept (hard-linked, else copied) in `.zarrsql-append-saved/`. If the append
fails, `restore` puts every journaled key back (a created file removed, a kept one moved back),
restores the documents and removes the backup; if the writer is killed, the next writer (which
finds the dead writer's lock) runs `recover`, which does the same unless the commit point had
already moved, and removes the temporary files zarr left for journaled keys. So no chunk of a
failed append survives it (a later append that writes no chunk there would otherwise show
it), and no file the append did not write is touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

BACKUP_NAME = ".zarrsql-append-backup.json"


#: The keys an append changed (JSON lines) and the files it replaced or deleted, kept.
JOURNAL_NAME = ".zarrsql-append-journal"


SAVED_NAME = ".zarrsql-append-saved"


#: The documents a node may have, by Zarr format.
DOCUMENTS = {3: ("zarr.json",), 2: (".zgroup", ".zarray", ".zattrs", ".zmetadata")}


#: The key whose replacement commits a write, by Zarr format.
COMMIT_KEY = {3: "zarr.json", 2: ".zmetadata"}


#: Temporary files zarr's local store writes before renaming (`<name>.<32 hex>.partial`).
_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")


#: The same, with the name of the key it is written for (`Path.with_suffix`: without its last suffix).
_TEMPORARY = re.compile(r"(.*)\.[0-9a-f]{32}\.partial")


#: What a writer killed while taking the lock leaves beside it (see `write.lock`).
_LOCK_LEFTOVER = re.compile(r"^\.zarrsql-write\.lock\.[0-9a-f]{32}\.(tmp|stale)$")


def digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    temp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    temp.write_bytes(data)
    os.replace(temp, path)


def _node_dirs(root: Path, zarr_format: int) -> Iterator[Path]:
    """Every group and array directory of the store (arrays' chunk directories not entered)."""
    stack = [root]
    while stack:
        here = stack.pop()
        yield here
        if _is_array(here, zarr_format):
            continue
        with contextlib.suppress(OSError):
            stack.extend(p for p in here.iterdir() if p.is_dir() and not p.name.startswith("."))


def _is_array(here: Path, zarr_format: int) -> bool:
    if zarr_format == 2:
        return (here / ".zarray").is_file()
    try:
        doc = json.loads((here / "zarr.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("node_type") == "array"


def node_documents(root: Path, zarr_format: int) -> dict[str, str]:
    """The text of every metadata document of the store, by key ('/'-joined, from the root)."""
    out: dict[str, str] = {}
    for here in _node_dirs(root, zarr_format):
        prefix = here.relative_to(root).as_posix()
        for name in DOCUMENTS[zarr_format]:
            doc = here / name
            if doc.is_file():
                key = name if prefix == "." else f"{prefix}/{name}"
                out[key] = doc.read_text(encoding="utf-8")
    return out


def restore(root: Path, documents: Mapping[str, str]) -> None:
    """Put every key the append changed and every document back as it was before the append;
    drop the backup, then the journal (a writer killed in between repeats this harmlessly)."""
    _undo_journal(root)
    for key, text in documents.items():
        target = root / key
        with contextlib.suppress(OSError):
            if target.read_text(encoding="utf-8") == text:
                continue
        write_atomic(target, text.encode())
    (root / BACKUP_NAME).unlink(missing_ok=True)
    drop_journal(root)


def recover(root: Path, zarr_format: int) -> None:
    """Repair what a killed append left: the journaled keys and the documents come back as
    they were unless the commit point had moved already (then the append is complete and only
    the backup and the journal go); zarr's temporary `.partial` files in node directories are
    removed."""
    for here in _node_dirs(root, zarr_format):
        for p in here.iterdir():
            if p.is_file() and (_PARTIAL.search(p.name) or (here == root and _LOCK_LEFTOVER.match(p.name))):
                p.unlink(missing_ok=True)
    backup_path = root / BACKUP_NAME
    try:
        backup = json.loads(backup_path.read_text(encoding="utf-8"))
    except FileNotFoundError:  # no append under way: a journal left is a finished writer's
        drop_journal(root)
        return
    except ValueError:  # never half-written (atomic), but refuse to guess if it is not JSON
        backup_path.unlink()
        drop_journal(root)
        return
    commit = COMMIT_KEY[zarr_format]
    current = (root / commit).read_text(encoding="utf-8") if (root / commit).is_file() else None
    if digest(current) != backup.get("commit_sha256"):
        backup_path.unlink(missing_ok=True)  # committed: the new documents are the store
        drop_journal(root)
        return
    restore(root, backup.get("documents", {}))


class Journal:
    """The keys an append changes, each noted on disk before its first change (see the module
    doc); a file about to be replaced or deleted is kept first. The documents in the backup
    are left to it (`documents`)."""

    def __init__(self, root: Path, documents: frozenset[str]) -> None:
        self.root = root
        self.documents = documents
        self.seen: set[str] = set()
        self.file = (root / JOURNAL_NAME).open("a", encoding="utf-8")

    def before_change(self, key: str) -> None:
        if key in self.seen or key in self.documents:
            return
        self.seen.add(key)
        target = self.root / key
        kept: str | None = None
        if target.exists():
            kept = str(len(self.seen))
            saved = self.root / SAVED_NAME
            saved.mkdir(exist_ok=True)
            _keep(target, saved / kept)  # before the line: a line names only a kept file that exists
        self.file.write(json.dumps({"key": key, "kept": kept}) + "\n")
        self.file.flush()  # in the file system before the change: a killed writer's is complete

    def close(self) -> None:
        self.file.close()


def _keep(target: Path, kept: Path) -> None:
    """Keep `target` as `kept`: a hard link (zarr replaces a key by renaming a new file over it,
    so the link keeps the old bytes), or a copy where links are not allowed."""
    if target.is_dir():
        shutil.copytree(target, kept)
        return
    try:
        os.link(target, kept)
    except OSError:
        shutil.copy2(target, kept)


def _journaled_class() -> type:
    """`journaled`'s class, built on first use (zarr is imported lazily)."""
    from zarr.storage import WrapperStore

    class Journaled(WrapperStore):  # type: ignore[type-arg]
        """A store that notes every key in the journal before it writes or deletes it."""

        def __init__(self, store: Any, journal: Journal) -> None:
            super().__init__(store)
            self._journal = journal

        def _with_store(self, store: Any) -> Any:
            return type(self)(store, self._journal)

        async def set(self, key: str, value: Any) -> None:
            self._journal.before_change(key)
            await self._store.set(key, value)

        async def set_if_not_exists(self, key: str, value: Any) -> None:
            self._journal.before_change(key)
            await self._store.set_if_not_exists(key, value)

        async def _set_many(self, values: Any) -> None:
            for key, value in values:
                await self.set(key, value)

        async def delete(self, key: str) -> None:
            self._journal.before_change(key)
            await self._store.delete(key)

        async def delete_dir(self, prefix: str) -> None:
            for key in [k async for k in self._store.list_prefix(prefix)]:
                await self.delete(key)

        async def clear(self) -> None:
            await self.delete_dir("")

    return Journaled


def journaled(store: Any, journal: Journal) -> Any:
    return _journaled_class()(store, journal)


def _journal_entries(root: Path) -> list[tuple[str, str | None]]:
    """The (key, kept file) pairs of the journal, oldest first; a last line cut short by a kill
    is skipped (it was written before its change, which then never began)."""
    try:
        lines = (root / JOURNAL_NAME).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        key, kept = (entry.get("key"), entry.get("kept")) if isinstance(entry, dict) else (None, None)
        if isinstance(key, str) and key and not key.startswith("/") and ".." not in key.split("/"):
            entries.append((key, kept if isinstance(kept, str) else None))
    return entries


def _undo_journal(root: Path) -> None:
    """Put every journaled key back, newest first: a created file is removed (with the folders
    it emptied), a kept one moved back. Done twice (a kill in between), it changes nothing."""
    entries = _journal_entries(root)
    _remove_temporaries(root, [key for key, _ in entries])
    for key, kept in reversed(entries):
        target = root / key
        if kept is None:
            if target.is_file() or target.is_symlink():
                target.unlink(missing_ok=True)
                _prune(target.parent, root)
            continue
        source = root / SAVED_NAME / kept
        if not (source.exists() or source.is_symlink()):
            continue  # moved back already
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            if target.exists() or target.is_symlink():
                remove_path(target)
            os.rename(source, target)
        else:
            os.replace(source, target)


def _remove_temporaries(root: Path, keys: list[str]) -> None:
    """Remove what zarr's local store left of a killed write of `keys`: it writes a key to
    `<name without its last suffix>.<32 hex>.partial` beside it (`Path.with_suffix`) and then
    renames that file. Only such names of these keys go, each folder listed once (a v2 chunk
    `0.1` and its neighbour `0.2` share the temporary's prefix `0.`: both are this store's)."""
    stems: dict[Path, set[str]] = {}
    for key in keys:
        stems.setdefault((root / key).parent, set()).add((root / key).stem)
    for folder, names in stems.items():
        with contextlib.suppress(OSError):
            left = [e for e in folder.iterdir() if (m := _TEMPORARY.fullmatch(e.name)) and m.group(1) in names]
            for entry in left:
                if entry.is_file():
                    entry.unlink(missing_ok=True)
            if left:
                _prune(folder, root)


def _prune(folder: Path, root: Path) -> None:
    """Remove `folder` and its parents below `root` while they are empty."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def drop_journal(root: Path) -> None:
    (root / JOURNAL_NAME).unlink(missing_ok=True)
    shutil.rmtree(root / SAVED_NAME, ignore_errors=True)


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
