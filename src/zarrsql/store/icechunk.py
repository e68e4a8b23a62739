"""Icechunk repositories as stores: one snapshot's keys, read through the repository's store.

A repository (a local folder, or `s3://`, `gs://`, `az://` through Icechunk's own storage
configuration) holds snapshots; a read picks one with `branch` (default `main`), `tag`,
`snapshot` (an id) or `as_of` (the last snapshot of a branch at a time). The version is
resolved to a snapshot id each time a store opens (a branch's tip is one small read, so a
new commit is seen by the next query) and the store's `cache_key` names that id: a snapshot
never changes, so its metadata tree is cached for good (`metadata_ttl` infinite) and a moved
branch simply opens another snapshot. A store opened at a branch's tip also says whether the
branch moved since (`version_moved`, one lookup of the branch, the `FollowsName` capability of
scan/validity.py) and opens the new tip (`reopened`): a relation fetched again after a commit
reads the branch as it is then, or refuses an answer kept from the old snapshot, as it does
for a plain store rewritten. A read pinned to a tag, a snapshot id or a time never moves.

Keys are read as raw bytes with the repository store's own `get`, many at once on a private
event loop, never through zarr-python's arrays: zarrsql decodes the chunks itself, as for any
other store. Icechunk's batched `get_partial_values` is not used, because it answers "missing"
for a chunk it failed to fetch (an unauthorized virtual chunk container, a referenced file
gone), which would read as fill values; each `get` raises instead.

Virtual chunks point into other files. Icechunk reads them only from containers the
repository declares and the reader authorizes (`virtual_chunks := MAP {'file:///data/':
NULL}`); an authorized prefix the repository does not declare, and a chunk in a container not
authorized, are errors naming the prefix.

An Icechunk `Session` or store object given from Python is registered here under a location
`icechunk-session:<n>` (`session_location`), which the SQL text then carries; such a read uses
that session as it is, uncommitted changes included.

`icechunk` is imported only when a repository is opened.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import os
import re
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from zarrsql import counters
from zarrsql.errors import ParameterError, StoreNotFoundError, StoreReadError
from zarrsql.store.base import METADATA_DOCUMENTS, ByteRange, check_key, is_url
from zarrsql.store.choice import StoreChoice, container_access
from zarrsql.store.icechunk_native import NativeChunks
from zarrsql.store.options import split_settings
from zarrsql.store.redaction import redacted_url
from zarrsql.store.refsets import is_parquet_layout

if TYPE_CHECKING:  # asyncio loads with the first repository, not with every local store's check
    import asyncio

#: The location prefix of a session registered from Python (`session_location`).
SESSION_PREFIX = "icechunk-session:"
#: Reads in flight on a local repository: Icechunk's own threads do the I/O.
LOCAL_CONCURRENCY = max(2, min(2 * (os.cpu_count() or 1), 16))
#: Open repositories and snapshot sessions kept for later queries.
_KEPT = 32
#: Keys a snapshot store remembers having read, so that their tokens cost no request.
_SEEN = 4096

T = TypeVar("T")


def looks_like_repository(location: str) -> bool:
    """Whether `location` is a local folder laid out as an Icechunk repository (its
    `snapshots/` folder beside `refs/` (format 1, Icechunk 1.x) or the `repo` object (format 2,
    Icechunk 2.x), no Zarr root document), or a registered session."""
    if location.startswith(SESSION_PREFIX):
        return True
    if is_url(location) and not location.lower().startswith("file://"):
        return False  # a remote layout costs a request to see: format := 'icechunk' says it
    path = os.path.expanduser(location.removeprefix("file://"))
    return _has_repository_layout(path) and not os.path.exists(os.path.join(path, "zarr.json"))


def _has_repository_layout(path: str) -> bool:
    versioned = os.path.isdir(os.path.join(path, "refs")) or os.path.isfile(os.path.join(path, "repo"))
    return versioned and os.path.isdir(os.path.join(path, "snapshots"))


# -- the event loop the repository's coroutines run on ---------------------------------------

_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _event_loop() -> asyncio.AbstractEventLoop:
    """One daemon thread's event loop for every repository (Icechunk's coroutines need one)."""
    import asyncio

    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="zarrsql-icechunk", daemon=True).start()
            _loop = loop
        return _loop


def _run(coroutine: Awaitable[T]) -> T:
    import asyncio

    async def wrapped() -> T:
        return await coroutine

    return asyncio.run_coroutine_threadsafe(wrapped(), _event_loop()).result()


# -- repositories ----------------------------------------------------------------------------

_repos: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_sessions: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_cache_lock = threading.Lock()


def _kept(cache: OrderedDict[tuple[Any, ...], Any], key: tuple[Any, ...], make: Any) -> Any:
    with _cache_lock:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = make()
    with _cache_lock:
        cache[key] = value
        while len(cache) > _KEPT:
            cache.popitem(last=False)
    return value


def _message(err: BaseException) -> str:
    """Icechunk's error without its trace of Rust call sites: the report's message (the line
    marked `x`) and then each cause (`|->`, `` `-> ``) that adds something, joined by ': '."""
    pieces: list[list[str]] = []
    in_context = False
    for line in str(err).splitlines():
        text = line.strip()
        if text.startswith("x "):
            pieces.append([text[2:]])
            in_context = False
        elif text.startswith(("|->", "`->")):
            pieces.append([text[3:].strip()])
            in_context = False
        elif text.removeprefix("|").strip().startswith("context:"):
            in_context = True
        elif pieces and not in_context and text.removeprefix("|").strip():
            pieces[-1].append(text.removeprefix("|").strip())  # a message continued on the next line
    message = ""
    for piece in (" ".join(p) for p in pieces):
        if piece not in message:
            message = f"{message}: {piece}" if message else piece
    return message or _before_context(str(err)) or type(err).__name__


def _before_context(text: str) -> str:
    """Icechunk 2.x's form: the message, then a `context:` list of call sites, left out."""
    kept = []
    for line in text.splitlines():
        if line.strip().startswith("context:"):
            break
        if line.strip():
            kept.append(line.strip())
    return " ".join(kept)


_S3_KEYS = {
    "endpoint_url": "endpoint_url",
    "region": "region",
    "region_name": "region",
    "key": "access_key_id",
    "access_key_id": "access_key_id",
    "secret": "secret_access_key",
    "secret_access_key": "secret_access_key",
    "token": "session_token",
    "session_token": "session_token",
    "anon": "anonymous",
    "anonymous": "anonymous",
    "allow_http": "allow_http",
    "force_path_style": "force_path_style",
    "requester_pays": "requester_pays",
}


def _s3_storage(icechunk: Any, bucket: str, prefix: str, theirs: dict[str, Any]) -> Any:
    client = theirs.pop("client_kwargs", None) or {}
    if not isinstance(client, dict):
        raise ParameterError("storage option 'client_kwargs' must be a JSON object, e.g. '{\"endpoint_url\": ...}'")
    for name in ("endpoint_url", "region_name"):
        if name in client:
            theirs.setdefault(name, client[name])
    unknown = sorted(set(theirs) - set(_S3_KEYS))
    if unknown:
        raise ParameterError(
            f"storage option(s) {unknown} are not understood for an Icechunk repository on S3; "
            f"it takes {sorted(_S3_KEYS)} (Icechunk's own S3 client reads the repository)"
        )
    kwargs = {_S3_KEYS[k]: v for k, v in theirs.items()}
    endpoint = str(kwargs.get("endpoint_url") or "")
    if endpoint:
        kwargs.setdefault("allow_http", endpoint.startswith("http://"))
        kwargs.setdefault("force_path_style", True)  # a custom endpoint (MinIO, moto) has no bucket hostnames
    if "access_key_id" not in kwargs and "anonymous" not in kwargs:
        kwargs["from_env"] = True
    return icechunk.s3_storage(bucket=bucket, prefix=prefix or None, **kwargs)


def _storage(location: str, theirs: dict[str, Any]) -> Any:
    """Icechunk's storage configuration for a location and the filesystem-style options."""
    import icechunk

    scheme, _, rest = location.partition("://") if "://" in location else ("file", "", location)
    scheme = scheme.lower()
    if scheme == "file":
        if theirs:
            raise ParameterError(f"storage options {sorted(theirs)} do not apply to a local Icechunk repository")
        path = os.path.abspath(os.path.expanduser(rest))
        _check_local_folder(location, path)
        _quiet_local_warning(icechunk)
        return icechunk.local_filesystem_storage(path)
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if scheme in ("s3", "s3a"):
        return _s3_storage(icechunk, bucket, prefix, theirs)
    if scheme in ("gs", "gcs"):
        return _passed_on(icechunk.gcs_storage, theirs, bucket=bucket, prefix=prefix or None)
    if scheme in ("az", "abfs", "abfss"):
        account = theirs.pop("account_name", None)
        if not account:
            raise ParameterError("an Icechunk repository on Azure needs storage_options := MAP {'account_name': '...'}")
        return _passed_on(icechunk.azure_storage, theirs, account=account, container=bucket, prefix=prefix)
    raise ParameterError(
        f"'{redacted_url(location)}' cannot hold an Icechunk repository: give a local path or an s3://, gs:// or "
        "az:// URL"
    )


def _check_local_folder(location: str, path: str) -> None:
    """A local repository is a folder that exists. Asked to open a file, Icechunk panics (a
    Rust backtrace on stderr); asked to open a missing folder, it creates it. A folder that is
    another format zarrsql reads (and not laid out as a repository) is named as that format,
    rather than as a repository Icechunk cannot find."""
    if os.path.isdir(path):
        _check_not_other_layout(location, path)
        return
    if os.path.exists(path):
        raise StoreNotFoundError(
            f"no Icechunk repository at '{location}': it is a file, and a repository is a folder; leave "
            "format := out to read the file as what it is (an HDF5 or NetCDF4 file, a kerchunk reference set), "
            "or point at the repository's folder"
        )
    raise StoreNotFoundError(
        f"no Icechunk repository at '{location}': the folder does not exist; check the path (relative paths are "
        "resolved from the current directory)"
    )


#: The root documents of a plain Zarr store (v3, v2 group, v2 array).
_ZARR_ROOT_DOCUMENTS = ("zarr.json", ".zgroup", ".zarray")


def _check_not_other_layout(location: str, path: str) -> None:
    """Refuse a folder that is a plain Zarr store or a kerchunk Parquet set (see above); any
    other folder is left to Icechunk, which may know a layout this check does not."""
    if _has_repository_layout(path):
        return
    if is_parquet_layout(path):
        what, fmt = "a kerchunk reference set (a Parquet folder)", "kerchunk"
    else:
        root = next((d for d in _ZARR_ROOT_DOCUMENTS if os.path.isfile(os.path.join(path, d))), None)
        if root is None:
            return  # Icechunk's own error says what it found
        what, fmt = f"a plain Zarr store (its root holds {root})", "zarr"
    raise StoreNotFoundError(
        f"no Icechunk repository at '{location}': it is {what}, not a repository (which holds refs/ or repo "
        f"beside snapshots/); leave format := out to read it as what it is, or pass format := '{fmt}'"
    )


_quieted = False


def _quiet_local_warning(icechunk: Any) -> None:
    """Icechunk warns on every opening of a local repository that concurrent commits to it
    are unsafe; zarrsql never commits, so unless ICECHUNK_LOG chooses the logging, that one
    warning is turned off (for this process: Icechunk's logging is global)."""
    global _quieted
    if not _quieted and not os.environ.get("ICECHUNK_LOG"):
        icechunk.set_logs_filter("warn,icechunk::storage::object_store=error")
    _quieted = True


def _passed_on(make: Any, theirs: dict[str, Any], **where: Any) -> Any:
    """Icechunk's storage for GCS or Azure, the storage options passed on under their own names
    (Icechunk's: `anonymous`, `from_env`, `service_account_file`, ...)."""
    try:
        return make(**where, **theirs)
    except TypeError as err:
        raise ParameterError(
            f"storage options {sorted(theirs)} are not all understood by Icechunk's {make.__name__}() ({err}); "
            "give the keywords it takes"
        ) from err


def _credentials(icechunk: Any, prefix: str, value: str | None) -> Any:
    """The credentials of one authorized container: None (the environment's, or none for
    local files), or 'anonymous' for a public bucket."""
    if container_access(prefix, value) is None:
        return _default_access(icechunk, prefix)
    if prefix.lower().startswith("s3://"):
        return icechunk.s3_anonymous_credentials()
    return icechunk.gcs_anonymous_credentials()


def _default_access(icechunk: Any, prefix: str) -> Any:
    """What NULL authorizes a container with. Icechunk 1.x takes None (the environment's
    credentials, none for local files); 2.x deprecates None and wants the access named: the
    local-files and HTTP sentinels, or each cloud's from-the-environment credentials."""
    named = getattr(getattr(icechunk, "credentials", None), "LocalFileSystemAccess", None)
    if named is None:
        return None  # Icechunk 1.x
    lowered = prefix.lower()
    if lowered.startswith("file://"):
        return named
    if lowered.startswith(("http://", "https://")):
        return icechunk.credentials.HttpAccess
    for schemes, make in ((("s3://",), "s3_from_env_credentials"), (("gs://", "gcs://"), "gcs_from_env_credentials"),
                          (("az://", "abfs://", "abfss://"), "azure_from_env_credentials")):  # fmt: skip
        if lowered.startswith(schemes):
            return getattr(icechunk, make)()
    return None


def _open_repository(location: str, theirs: dict[str, Any], virtual: tuple[tuple[str, str | None], ...]) -> Any:
    import icechunk

    storage = _storage(location, dict(theirs))
    authorized = {p: _credentials(icechunk, p, v) for p, v in virtual}
    try:
        repo = icechunk.Repository.open(storage, authorize_virtual_chunk_access=authorized or None)
    except Exception as err:  # Icechunk raises one class for every failure
        raise StoreNotFoundError(
            f"no Icechunk repository at '{location}': {_message(err)}; check the path or URL (and, on object "
            "storage, the storage_options); a plain Zarr store is read with format := 'zarr'"
        ) from err
    declared = sorted((repo.config.virtual_chunk_containers or {}).keys())
    strangers = [p for p, _ in virtual if p not in declared]
    if strangers:
        raise ParameterError(
            f"virtual_chunks := authorizes {strangers}, which the repository at '{location}' does not declare as "
            f"virtual chunk containers; its containers: {declared or 'none'}"
        )
    return repo


def _repository(
    location: str, theirs: dict[str, Any], virtual: tuple[tuple[str, str | None], ...]
) -> tuple[tuple[Any, ...], Any]:
    """The open repository and the key it is kept under (its sessions are kept under it too)."""
    key = (location, repr(sorted(theirs.items())), virtual)
    return key, _kept(_repos, key, lambda: _open_repository(location, theirs, virtual))


# -- versions --------------------------------------------------------------------------------


def _refs(repo: Any) -> str:
    return f"branches: {sorted(repo.list_branches())}; tags: {sorted(repo.list_tags()) or 'none'}"


def _check_choice(choice: StoreChoice) -> None:
    """Refuse version parameters that cannot pick one version, before the repository opens.
    An empty or blank name is refused rather than read as main (an empty branch) or reported
    as a missing 'main' (an empty tag or snapshot)."""
    for parameter in ("branch", "tag", "snapshot"):
        value = getattr(choice, parameter)
        if value is not None and not value.strip():
            raise ParameterError(
                f"{parameter} := {value!r} names no version: it is {'empty' if not value else 'blank'}; name a "
                "branch (branch := 'dev'), a tag (tag := 'v1') or a snapshot id (snapshot := '...'), or leave "
                f"{parameter} := out to read the tip of branch 'main'"
            )
    given = choice.version_parameters()
    if len([n for n in given if n in ("branch", "tag", "snapshot")]) > 1:
        raise ParameterError(
            f"pass one of branch :=, tag := or snapshot := (got {', '.join(given)}): each picks a version alone"
        )
    if choice.as_of is not None and (choice.tag is not None or choice.snapshot is not None):
        raise ParameterError(
            "as_of := picks the last snapshot of a branch at a time; it goes with branch := (default 'main'), "
            "not with tag := or snapshot :="
        )


def _snapshot_id(repo: Any, key: tuple[Any, ...], location: str, choice: StoreChoice) -> tuple[str, str]:
    """(snapshot id, how it was chosen) for the version `choice` names (already checked by
    `_check_choice`); errors name what exists."""
    branch = choice.branch or "main"
    try:
        if choice.tag is not None:
            return repo.lookup_tag(choice.tag), f"tag '{choice.tag}'"
        if choice.snapshot is not None:
            return _known_snapshot(repo, key, choice.snapshot), f"snapshot '{choice.snapshot}'"
        if choice.as_of is None:
            return repo.lookup_branch(branch), f"branch '{branch}'"
    except ParameterError:
        raise
    except Exception as err:
        which = "tag" if choice.tag is not None else "snapshot" if choice.snapshot is not None else "branch"
        name = choice.tag or choice.snapshot or branch
        raise ParameterError(
            f"the Icechunk repository at '{location}' has no {which} '{name}' ({_message(err)}); its {_refs(repo)}"
        ) from err
    return _as_of(repo, location, branch, choice.as_of), f"branch '{branch}' as of {choice.as_of.isoformat()}"


def _known_snapshot(repo: Any, key: tuple[Any, ...], snapshot: str) -> str:
    def check() -> str:
        repo.readonly_session(snapshot_id=snapshot)  # raises when there is no such snapshot
        return snapshot

    return str(_kept(_sessions, (*key, "known", snapshot), check))


def _as_of(repo: Any, location: str, branch: str, when: datetime.datetime) -> str:
    try:
        history = list(repo.ancestry(branch=branch))
    except Exception as err:
        raise ParameterError(
            f"the Icechunk repository at '{location}' has no branch '{branch}' ({_message(err)}); its {_refs(repo)}"
        ) from err
    if history and getattr(history[-1], "parent_id", "") is None:
        history = history[:-1]  # the empty snapshot Repository.create writes: no data to read
    for snapshot in history:  # newest first
        if snapshot.written_at <= when:
            return str(snapshot.id)
    if not history:
        raise ParameterError(
            f"branch '{branch}' of the Icechunk repository at '{location}' has no commits yet (only the empty "
            "snapshot the repository was created with), so no version is at or before "
            f"{when.isoformat()}; commit data first"
        )
    raise ParameterError(
        f"branch '{branch}' of the Icechunk repository at '{location}' has no snapshot at or before "
        f"{when.isoformat()}: its first was written at {history[-1].written_at.isoformat()}; give a later as_of :="
    )


def _is_panic(err: BaseException) -> bool:
    """Whether `err` is a Rust panic inside Icechunk: pyo3's `PanicException`, which derives
    from `BaseException` only (so `except Exception` lets it through), told by its class name
    since pyo3 exports no module to import it from."""
    return type(err).__name__ == "PanicException"


def _panic_error(location: str, err: BaseException) -> StoreReadError:
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return StoreReadError(
        f"Icechunk failed while opening '{location}' as a repository (a panic: {first}); check that "
        f"'{location}' is an Icechunk repository's folder or URL, or leave format := out to read it as the "
        "layout it has"
    )


def open_repository_store(location: str, storage_options: Mapping[str, Any], choice: StoreChoice) -> SnapshotStore:
    """The store of the snapshot `choice` picks in the repository at `location`; a panic
    inside Icechunk becomes a `StoreReadError` naming the location."""
    try:
        return _open_snapshot_store(location, storage_options, choice)
    except BaseException as err:
        if not _is_panic(err):
            raise
        raise _panic_error(location, err) from err


def _open_snapshot_store(location: str, storage_options: Mapping[str, Any], choice: StoreChoice) -> SnapshotStore:
    if location.startswith(SESSION_PREFIX):
        return _registered_store(location, storage_options, choice)
    _check_choice(choice)
    ours, theirs = split_settings(storage_options)
    location = location.rstrip("/") or location
    key, repo = _repository(location, theirs, choice.virtual_chunks)
    snapshot, how = _snapshot_id(repo, key, location, choice)
    session = _kept(_sessions, (*key, snapshot), lambda: repo.readonly_session(snapshot_id=snapshot))
    remote = is_url(location) and not location.lower().startswith("file://")
    concurrency = ours.concurrency if remote else LOCAL_CONCURRENCY
    tip = None
    if choice.tag is None and choice.snapshot is None and choice.as_of is None:  # a branch's tip: it moves
        branch = choice.branch or "main"
        tip = _BranchTip(
            branch,
            lambda: str(repo.lookup_branch(branch)),
            lambda: _open_snapshot_store(location, storage_options, choice),
        )
    native = None
    if not remote:  # a local repository's native chunks are files: read them as such
        root = os.path.abspath(os.path.expanduser(location.removeprefix("file://")))
        native = _kept(
            _sessions, (*key, snapshot, "native"), lambda: NativeChunks(root, lambda: repo.inspect_snapshot(snapshot))
        )
    return SnapshotStore(
        session,
        url=location,
        cache_key=f"icechunk:{location}@{snapshot}",
        version=how,
        remote=remote,
        concurrency=concurrency,
        container_hint="virtual_chunks",
        native=native,
        tip=tip,
    )


# -- sessions given from Python --------------------------------------------------------------

_registered: dict[str, Any] = {}
#: The last sessions given, held strongly: a relation made from a temporary session may bind
#: its statement again after the call that passed it has returned.
_recent: deque[Any] = deque(maxlen=16)
_registry_lock = threading.Lock()


def is_icechunk_object(value: Any) -> bool:
    """Whether `value` is an Icechunk `Session` or its store (by its class's module, so that
    icechunk need not be imported to tell)."""
    return type(value).__module__.split(".")[0] == "icechunk" and type(value).__name__ in (
        "Session",
        "ForkSession",
        "IcechunkStore",
    )


def session_location(value: Any) -> str:
    """A location naming the Icechunk `Session` or store `value` for later reads in SQL.

    The object is referenced weakly (and the last few strongly), so the SQL text that names it
    reads exactly that session for as long as it lives.
    """
    name = f"{SESSION_PREFIX}{id(value):x}"
    try:
        ref: Any = weakref.ref(value)
    except TypeError:  # a class without weak references: held for good
        ref = lambda: value  # noqa: E731
    with _registry_lock:
        _registered[name] = ref
        _recent.append(value)
        for stale in [k for k, ref in _registered.items() if ref() is None]:
            del _registered[stale]
    return name


def _registered_store(location: str, storage_options: Mapping[str, Any], choice: StoreChoice) -> SnapshotStore:
    with _registry_lock:
        ref = _registered.get(location)
    given = ref() if ref is not None else None
    if given is None:
        raise StoreNotFoundError(
            f"'{location}' named an Icechunk session that no longer exists; pass the session (or its store) "
            "again rather than its location text"
        )
    if choice.version_parameters() or choice.virtual_chunks or storage_options:
        names = [*choice.version_parameters(), *(["virtual_chunks"] if choice.virtual_chunks else [])]
        names += ["storage_options"] if storage_options else []
        raise ParameterError(
            f"{', '.join(n + ' :=' for n in names)} cannot apply to an Icechunk session given from Python: the "
            "session already fixes its repository and version; open the session you want "
            "(repo.readonly_session(tag=...)) or pass the repository's path with these parameters"
        )
    session = given.session if type(given).__name__ == "IcechunkStore" else given
    changing = not session.read_only
    snapshot = session.snapshot_id
    return SnapshotStore(
        session,
        url=f"icechunk session of snapshot {snapshot}",
        cache_key=f"{location}@{snapshot}" if not changing else f"{location}@{snapshot}+changes",
        version=f"snapshot '{snapshot}'" + (" with uncommitted changes" if changing else ""),
        remote=False,
        concurrency=LOCAL_CONCURRENCY,
        container_hint="the authorize_virtual_chunk_access of the Repository.open",
        changing=changing,
    )


# -- the store -------------------------------------------------------------------------------


def _byte_range(byte_range: ByteRange | None) -> tuple[int | None, int | None] | None:
    if byte_range is None:
        return None
    if byte_range.start < 0:
        return (None, byte_range.length)  # Icechunk's suffix request: the last `length` bytes
    return (byte_range.start, byte_range.start + byte_range.length)


def _as_bytes(key: str, data: Any) -> bytes:
    """A value Icechunk returned, as the reader takes it. Icechunk hands back its own buffer
    object; copying a chunk of megabytes into `bytes` cost as much CPU as reading it, so a
    chunk is passed on as a read-only view of that buffer (the decoders take any buffer, and
    a view cannot be written, like `bytes`). Metadata documents are small and become `bytes`."""
    if key.rpartition("/")[2] in METADATA_DOCUMENTS:  # parsed as JSON, which wants bytes
        return bytes(data)
    return cast(bytes, memoryview(data))


#: Icechunk's refusals of a key that names no value: a name it cannot hold (such as a v2
#: document), or a "chunk" of a group (the key of a group named `c`, which a listing checks).
_NOT_A_VALUE = re.compile(r"invalid zarr key|not an array", re.IGNORECASE)
_PAST_THE_END = re.compile(r"out of bounds for chunk of length", re.IGNORECASE)
_UNAUTHORIZED = re.compile(r"resolves to the url prefix (\S+?),? to be able")


@dataclass(frozen=True, slots=True)
class _BranchTip:
    """The branch a store was opened at the tip of: its `name`, what it points at now
    (`lookup`, one read of the ref), and the store of that snapshot (`reopen`)."""

    name: str
    lookup: Callable[[], str]
    reopen: Callable[[], SnapshotStore]


class SnapshotStore:
    """The keys of one Icechunk snapshot (or of a session given from Python).

    `changing`: the session has uncommitted changes, so its content can change under the
    same snapshot id; then the metadata is revalidated by content (`token`) on every query.
    `tip`: the branch the snapshot was the tip of when the store opened (see the module
    docstring), None for a read pinned to a tag, a snapshot id, a time or a session.
    """

    can_list = True

    def __init__(
        self,
        session: Any,
        *,
        url: str,
        cache_key: str,
        version: str,
        remote: bool,
        concurrency: int,
        container_hint: str,
        changing: bool = False,
        native: NativeChunks | None = None,
        tip: _BranchTip | None = None,
    ) -> None:
        self._store = session.store._store  # the repository's raw store: keys to bytes
        self._zarr_store = session.store
        self.url = url
        self.cache_key = cache_key
        self.version = version
        self.remote = remote
        self.concurrency = concurrency
        self.metadata_ttl = 0.0 if changing else math.inf
        self._container_hint = container_hint
        self._changing = changing
        self._snapshot = str(session.snapshot_id)
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_lock = threading.Lock()
        self._native = None if changing else native
        self._tip = tip

    def _where(self, key: str) -> str:
        return f"'{key}' of the Icechunk repository '{self.url}' ({self.version})"

    def _failure(self, key: str, err: BaseException) -> StoreReadError:
        text = _message(err)
        prefix = _UNAUTHORIZED.search(" ".join(str(err).split()))
        if prefix is not None:
            return StoreReadError(
                f"cannot read {self._where(key)}: its chunk is a virtual chunk in the container "
                f"'{prefix.group(1)}', which this read does not authorize; add it to {self._container_hint} "
                f"(virtual_chunks := MAP {{'{prefix.group(1)}': NULL}}) if you trust those files"
            )
        return StoreReadError(
            f"cannot read {self._where(key)}: {text}; a virtual chunk's file may have moved or changed "
            "since the repository referenced it"
        )

    async def _get_one(self, key: str, byte_range: ByteRange | None) -> bytes | None:
        try:
            data = await self._store.get(key, _byte_range(byte_range))
        except KeyError:
            counters.count(requests=1)
            return None
        except Exception as err:
            if _NOT_A_VALUE.search(str(err)):
                counters.count(requests=1)
                return None  # a name Icechunk cannot hold (a v2 document), or a group's "chunk": not there
            if byte_range is not None and byte_range.start >= 0 and _PAST_THE_END.search(str(err)):
                counters.count(requests=1)  # the refused request was made too
                return await self._get_clipped(key, byte_range)
            raise self._failure(key, err) from err
        raw = _as_bytes(key, data)
        counters.count(requests=1, bytes_read=memoryview(raw).nbytes)
        self._present(key)
        return raw

    async def _get_clipped(self, key: str, byte_range: ByteRange) -> bytes | None:
        """A range that runs past the value's end, as `RangeReading` promises it: the bytes up
        to the end. Icechunk refuses such a range instead (a reader asking for "the first n
        bytes or fewer", as the leading-rows decode does, cannot know the value's length),
        so the whole value is read and cut."""
        whole = await self._get_one(key, None)
        if whole is None:
            return None
        return bytes(memoryview(whole)[slice(*byte_range.bounds())])

    def _present(self, key: str) -> None:
        """Remember that `key` exists (its token then needs no request), the last `_SEEN` keys."""
        with self._seen_lock:
            self._seen[key] = None
            if len(self._seen) > _SEEN:
                self._seen.popitem(last=False)

    def _fetch(self, requests: Sequence[tuple[str, ByteRange | None]]) -> list[bytes | None]:
        for key, _ in requests:
            check_key(key)
        answers: list[bytes | None] = [None] * len(requests)
        left = list(range(len(requests)))
        if self._native is not None:
            left = [i for i in left if not self._read_native(i, requests[i], answers)]
        if not left:
            return answers

        async def every() -> list[bytes | None]:
            import asyncio

            return list(await asyncio.gather(*(self._get_one(*requests[i]) for i in left)))

        try:
            got = _run(every())
        except BaseException as err:
            if not _is_panic(err):
                raise
            raise StoreReadError(f"cannot read {self._where(requests[left[0]][0])}: Icechunk panicked ({err})") from err
        for i, data in zip(left, got, strict=True):
            answers[i] = data
        return answers

    def _read_native(self, i: int, request: tuple[str, ByteRange | None], answers: list[bytes | None]) -> bool:
        """Read a native chunk straight from its file (`icechunk_native`); False where
        Icechunk must read the key."""
        assert self._native is not None
        key, byte_range = request
        if key.rpartition("/")[2] in METADATA_DOCUMENTS:
            return False
        data = self._native.read(key, byte_range)
        if data is None:
            return False
        counters.count(requests=1, bytes_read=len(data))
        self._present(key)
        answers[i] = data
        return True

    def get(self, key: str) -> bytes | None:
        return self._fetch([(key, None)])[0]

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return self._fetch([(k, None) for k in keys])

    def get_ranges(self, requests: Sequence[tuple[str, ByteRange]]) -> list[bytes | None]:
        return self._fetch(list(requests))

    def list_dir(self, prefix: str) -> list[str]:
        key = check_key(prefix.rstrip("/"))

        async def names() -> list[str]:
            return [name async for name in self._store.list_dir(key + "/" if key else "")]

        try:
            return sorted(_run(names()))
        except Exception as err:
            raise StoreReadError(f"cannot list {self._where(prefix)}: {_message(err)}") from err

    def token(self, key: str) -> str | None:
        return self.token_many([key])[0]

    def token_many(self, keys: Sequence[str]) -> list[str | None]:
        """A key's validator: the snapshot id (a snapshot's keys never change), or with
        uncommitted changes a digest of the content; None where the key does not exist."""
        data = self.get_many(keys) if self._changing else None
        if data is not None:
            return [None if d is None else hashlib.sha1(d).hexdigest() for d in data]
        with self._seen_lock:
            unknown = [k for k in keys if k not in self._seen]
        found = dict(zip(unknown, self._exist(unknown), strict=True))
        return [self._snapshot if found.get(k, True) else None for k in keys]

    def version_moved(self) -> str | None:
        """None while the branch this store read the tip of still points at its snapshot (or
        the read is pinned); else where the branch is now, as a phrase for errors. One
        lookup of the branch: a small read, a request on object storage."""
        if self._tip is None:
            return None
        try:
            now = self._tip.lookup()
        except Exception as err:  # Icechunk raises one class for every failure
            return f"branch {self._tip.name} (no longer found: {_message(err)})"
        return None if now == self._snapshot else f"branch {self._tip.name} (now at snapshot {now})"

    def reopened(self) -> SnapshotStore:
        """The store of the snapshot the branch points at now, opened as this one was (the
        same repository, options and authorized containers); this store when it is pinned."""
        return self if self._tip is None else self._tip.reopen()

    def _exist(self, keys: Sequence[str]) -> list[bool]:
        for key in keys:
            check_key(key)

        async def one(key: str) -> bool:
            try:
                return bool(await self._store.exists(key))
            except Exception:
                return False  # a name Icechunk cannot hold is not there

        async def every() -> list[bool]:
            import asyncio

            return list(await asyncio.gather(*(one(k) for k in keys)))

        return _run(every()) if keys else []

    def zarr_python_store(self) -> Any:
        """The session's own zarr-python store, for codecs zarrsql does not decode itself."""
        return self._zarr_store


def writable_session(location: str) -> Any:
    """The writable Icechunk `Session` a location from `session_location` names (a writer's
    target); a read-only one, or one that no longer exists, is refused with the fix."""
    with _registry_lock:
        ref = _registered.get(location)
    given = ref() if ref is not None else None
    if given is None:
        raise StoreNotFoundError(
            f"'{location}' named an Icechunk session that no longer exists; pass the session itself to the writer"
        )
    session = given.session if type(given).__name__ == "IcechunkStore" else given
    if type(session).__name__ != "Session" or session.read_only:
        raise ParameterError(
            "zarrsql writes into a writable Icechunk session: open one with repo.writable_session('main'), "
            "pass it (or its store) as the target, then session.commit(...) to publish the write"
        )
    return session


def is_session_location(location: str) -> bool:
    return location.startswith(SESSION_PREFIX)
