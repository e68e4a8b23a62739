"""Read every group and array document of a store into a `NodeTree`, and cache it.

Consolidated metadata (v3 `consolidated_metadata` in the root `zarr.json`, v2 `.zmetadata`)
is used when present; otherwise the tree is walked level by level: the groups of a level are
listed concurrently (a few list calls in flight on object storage) and the documents of the
level's children are fetched with one `get_many`. An array whose own document cannot be
parsed is kept as an `ArrayProblem` (listed as unsupported); a missing or corrupt root
document is an error, since then nothing can be trusted.

A store that cannot list (plain HTTP) and has no consolidated metadata gives an *unlisted*
tree: a node is loaded when asked for by path (`tree.arrays.get(path)`, with the coordinate
arrays its dimension names point at), and anything that needs the whole list of nodes raises
`StoreReadError` naming the URL and the two ways out (consolidated metadata, `array_path :=`).

The cache (`cached_tree`) keeps one tree per store (`Store.cache_key`). A cached tree is
trusted for `Store.metadata_ttl` seconds after it was last checked; after that it is
revalidated against the tokens of the documents that define it — the consolidated document
alone when there is one (one request), else every document read — all in one `token_many`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from zarrsql.errors import MetadataError, StoreNotFoundError, StoreReadError, ZarrSQLError
from zarrsql.metadata.arrays import ArrayMeta, GroupMeta, parse_v2_array, parse_v3_array
from zarrsql.store import Store


@dataclass(frozen=True, slots=True)
class ArrayProblem:
    """An array whose metadata could not be read; `error` says why."""

    path: str
    zarr_format: int
    error: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass
class NodeTree:
    """All groups and arrays of a store, keyed by path ('' is the root group)."""

    store: Store
    zarr_format: int
    consolidated: bool
    groups: dict[str, GroupMeta] = field(default_factory=dict)
    arrays: dict[str, ArrayMeta | ArrayProblem] = field(default_factory=dict)
    validators: dict[str, str | None] = field(default_factory=dict)
    #: Decoded coordinates and other derived values, valid as long as this tree is.
    derived: dict[object, object] = field(default_factory=dict)
    #: time.monotonic() of the last read or successful validation (for `metadata_ttl`).
    checked_at: float = 0.0

    def children(self, group: str) -> tuple[list[str], list[str]]:
        """Paths of the groups and arrays directly inside `group` (loaded ones, if unlisted)."""

        def direct(path: str) -> bool:
            if group == "":
                return path != "" and "/" not in path
            return path.startswith(group + "/") and "/" not in path[len(group) + 1 :]

        groups = self.groups.known if isinstance(self.groups, _Unlisted) else self.groups
        arrays = self.arrays.known if isinstance(self.arrays, _Unlisted) else self.arrays
        return sorted(p for p in groups if direct(p)), sorted(p for p in arrays if direct(p))


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _parse_json(store: Store, key: str, raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise MetadataError(
            f"'{key}' in store '{store.url}' is not valid JSON ({err}); the store's metadata is "
            "corrupt: rewrite it with the tool that created the store"
        ) from err


def _fetch(store: Store, keys: list[str], validators: dict[str, str | None]) -> dict[str, bytes | None]:
    """The raw documents at `keys` (one `get_many`), recording a validator for each.

    A local store's token is a `stat`, taken right away; a remote store's token would be a
    request per document, so it is taken only when the tree is validated (`_revalidate`
    records it then) — the first validation re-reads such a tree once if anything moved.
    """
    raws = store.get_many(keys) if keys else []
    for key, raw in zip(keys, raws, strict=True):
        validators[key] = None if raw is None else (store.token(key) if not store.remote else _PENDING)
    return dict(zip(keys, raws, strict=True))


def _load_json(store: Store, key: str, tree_validators: dict[str, str | None]) -> Any:
    return _parse_json(store, key, _fetch(store, [key], tree_validators)[key])


def _add_v3_node(tree: NodeTree, path: str, doc: Any) -> str | None:
    """Add one v3 node; return its node type."""
    if not isinstance(doc, dict):
        tree.arrays[path] = ArrayProblem(path, 3, "zarr.json is not a JSON object")
        return None
    kind = doc.get("node_type")
    if kind == "group":
        tree.groups[path] = GroupMeta(path, 3, dict(doc.get("attributes") or {}))
    elif kind == "array":
        try:
            tree.arrays[path] = parse_v3_array(path, doc)
        except ZarrSQLError as err:
            tree.arrays[path] = ArrayProblem(path, 3, str(err))
    return kind


def _v2_node(tree: NodeTree, path: str, zarray: Any, zattrs: Any) -> None:
    try:
        if not isinstance(zarray, dict):
            raise MetadataError(f"array '{path}': .zarray is not a JSON object")
        tree.arrays[path] = parse_v2_array(path, zarray, zattrs if isinstance(zattrs, dict) else {})
    except ZarrSQLError as err:
        tree.arrays[path] = ArrayProblem(path, 2, str(err))


#: List calls in flight while walking a remote store level by level.
LIST_CONCURRENCY = 8
T = TypeVar("T")


def _map(store: Store, fn: Callable[[str], T], items: list[str]) -> list[T]:
    """`fn` over `items`, a few at a time on a remote store (list calls are round trips)."""
    if not store.remote or len(items) < 2:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(LIST_CONCURRENCY, len(items)), thread_name_prefix="zarrsql-list") as pool:
        return list(pool.map(fn, items))


def _listing(tree: NodeTree, groups: list[str]) -> list[tuple[str, str]]:
    """(group, child name) for every child of `groups`, listed concurrently."""
    store = tree.store

    def names(group: str) -> list[str]:
        if not store.remote:  # a folder's mtime changes when a child is added or removed
            tree.validators[group + "/"] = store.token(group)
        return store.list_dir(group)

    return [(g, n) for g, ns in zip(groups, _map(store, names, groups), strict=True) for n in ns]


def _walk_v3(tree: NodeTree, level: list[str]) -> None:
    while level:
        children = [_join(g, n) for g, n in _listing(tree, level) if not n.startswith(".") and n != "zarr.json"]
        docs = _fetch(tree.store, [f"{c}/zarr.json" for c in children], tree.validators)
        level = []
        for path in children:
            key = f"{path}/zarr.json"
            try:
                doc = _parse_json(tree.store, key, docs[key])
            except MetadataError as err:
                tree.arrays[path] = ArrayProblem(path, 3, str(err))
                continue
            if doc is not None and _add_v3_node(tree, path, doc) == "group":
                level.append(path)


def _walk_v2(tree: NodeTree, level: list[str]) -> None:
    store = tree.store
    while level:
        children = [_join(g, n) for g, n in _listing(tree, level) if not n.startswith(".")]
        keys = [f"{c}/{leaf}" for c in children for leaf in (".zarray", ".zgroup", ".zattrs")]
        raws = _fetch(store, keys, tree.validators)
        level = []
        for path in children:
            try:
                zarray, zgroup, zattrs = (
                    _parse_json(store, f"{path}/{leaf}", raws[f"{path}/{leaf}"])
                    for leaf in (".zarray", ".zgroup", ".zattrs")
                )
            except MetadataError as err:
                tree.arrays[path] = ArrayProblem(path, 2, str(err))
                continue
            if zarray is not None:
                _v2_node(tree, path, zarray, zattrs or {})
            elif zgroup is not None:
                tree.groups[path] = GroupMeta(path, 2, zattrs if isinstance(zattrs, dict) else {})
                level.append(path)


def _from_v2_consolidated(tree: NodeTree, meta: dict[str, Any]) -> None:
    docs = meta.get("metadata")
    if not isinstance(docs, dict):
        raise MetadataError(f"'.zmetadata' in store '{tree.store.url}' has no 'metadata' object")
    for key, doc in docs.items():
        path, _, leaf = key.rpartition("/")
        if leaf == ".zgroup" and path:
            attrs = docs.get(_join(path, ".zattrs")) or {}
            tree.groups[path] = GroupMeta(path, 2, attrs)
        elif leaf == ".zarray":
            _v2_node(tree, path, doc, docs.get(_join(path, ".zattrs")) or {})


def _from_v3_consolidated(tree: NodeTree, docs: dict[str, Any]) -> None:
    for path in sorted(docs):
        _add_v3_node(tree, path.strip("/"), docs[path])


# -- unlisted trees (a store that cannot list, without consolidated metadata) --------------------


def _unlisted_error(store: Store) -> StoreReadError:
    return StoreReadError(
        f"'{store.url}' cannot be listed: it has no consolidated metadata and its protocol cannot "
        "list keys (plain HTTP); consolidate the store (zarr.consolidate_metadata, or xarray's "
        "to_zarr(..., consolidated=True)), or read one array with array_path := '<path/to/array>'"
    )


class _Unlisted(MutableMapping[str, Any]):
    """Nodes of an unlisted tree: loaded by path on demand; the whole list is unknowable.

    `get(path)` and `[path]` load a node. For the groups, `path in groups` raises too: it is
    how a selection asks "is this a group to pick a table from", which needs the listing.
    """

    def __init__(self, store: Store, load: Callable[[str], None], *, membership_lists: bool = False) -> None:
        self.known: dict[str, Any] = {}
        self._store = store
        self._load = load
        self._tried: set[str] = set()
        self._membership_lists = membership_lists

    def __contains__(self, path: object) -> bool:
        if self._membership_lists:
            raise _unlisted_error(self._store)
        return super().__contains__(path)

    def __getitem__(self, path: str) -> Any:
        if path not in self.known and path not in self._tried:
            self._tried.add(path)
            self._load(path)
        return self.known[path]

    def __setitem__(self, path: str, value: Any) -> None:
        self.known[path] = value

    def __delitem__(self, path: str) -> None:
        del self.known[path]

    def __iter__(self) -> Iterator[str]:
        raise _unlisted_error(self._store)

    def __len__(self) -> int:
        raise _unlisted_error(self._store)


def _v2_docs(tree: NodeTree, paths: list[str]) -> dict[str, tuple[Any, Any, Any]]:
    """(.zarray, .zgroup, .zattrs) of each path, one `get_many`; unparsable documents skipped."""
    leaves = (".zarray", ".zgroup", ".zattrs")
    raws = _fetch(tree.store, [_join(p, leaf) for p in paths for leaf in leaves], tree.validators)
    out = {}
    for p in paths:
        try:
            out[p] = tuple(_parse_json(tree.store, _join(p, leaf), raws[_join(p, leaf)]) for leaf in leaves)
        except MetadataError as err:
            tree.arrays.known[p] = ArrayProblem(p, tree.zarr_format, str(err))  # type: ignore[attr-defined]
    return out


def _load_nodes(tree: NodeTree, paths: list[str]) -> None:
    """Load the nodes at `paths` (missing ones stay absent) into an unlisted tree."""
    arrays, groups = tree.arrays.known, tree.groups.known  # type: ignore[attr-defined]
    paths = [p for p in paths if p not in arrays and p not in groups]
    if tree.zarr_format == 3:
        raws = _fetch(tree.store, [_join(p, "zarr.json") for p in paths], tree.validators)
        for p in paths:
            try:
                doc = _parse_json(tree.store, _join(p, "zarr.json"), raws[_join(p, "zarr.json")])
            except MetadataError as err:
                arrays[p] = ArrayProblem(p, 3, str(err))
                continue
            if doc is not None:
                _add_v3_node(tree, p, doc)
    else:
        for p, (zarray, zgroup, zattrs) in _v2_docs(tree, paths).items():
            if zarray is not None:
                _v2_node(tree, p, zarray, zattrs or {})
            elif zgroup is not None:
                groups[p] = GroupMeta(p, 2, zattrs if isinstance(zattrs, dict) else {})
    tree.derived.clear()  # group members computed before this load are incomplete now


def ancestors(path: str) -> list[str]:
    """Ancestor group paths of `path`, nearest first, ending with the root ''."""
    out = []
    while path:
        path = path.rpartition("/")[0]
        out.append(path)
    return out


def _load_array(tree: NodeTree, path: str) -> None:
    """An array of an unlisted tree, its ancestor groups and its dimensions' coordinates."""
    _load_nodes(tree, [path, *ancestors(path)[:-1]])
    node = tree.arrays.known.get(path)  # type: ignore[attr-defined]
    if not isinstance(node, ArrayMeta) or not node.dimension_names:
        return
    group = path.rpartition("/")[0]
    candidates = [_join(g, d) for d in node.dimension_names if d for g in [group, *ancestors(group)]]
    _load_nodes(tree, [c for c in dict.fromkeys(candidates) if c != path])


def _unlisted_tree(store: Store, zarr_format: int, root: GroupMeta, validators: dict[str, str | None]) -> NodeTree:
    tree = NodeTree(store, zarr_format, False, validators=validators)
    tree.arrays = _Unlisted(store, lambda p: _load_array(tree, p))  # type: ignore[assignment]
    tree.groups = _Unlisted(store, lambda p: _load_nodes(tree, [p]), membership_lists=True)  # type: ignore[assignment]
    tree.groups[""] = root
    return tree


# -- reading a tree --------------------------------------------------------------------------


def _root_error(store: Store, root: Any) -> MetadataError:
    return MetadataError(
        f"the root of store '{store.url}' is not a Zarr group (zarr.json node_type "
        f"{root.get('node_type') if isinstance(root, dict) else None!r}); "
        "point read_zarr at the folder that holds the group"
    )


def _listed_tree(
    store: Store,
    fmt: int,
    group: GroupMeta,
    validators: dict[str, str | None],
    walk: Callable[[NodeTree, list[str]], None],
) -> NodeTree:
    """A store without consolidated metadata: walked where it can be listed, else unlisted."""
    if not store.can_list:
        return _unlisted_tree(store, fmt, group, validators)
    tree = NodeTree(store, fmt, False, validators=validators)
    tree.groups[""] = group
    walk(tree, [""])
    return tree


def _consolidated_tree(
    store: Store, fmt: int, group: GroupMeta, validators: dict[str, str | None], document: str
) -> NodeTree:
    """An empty consolidated tree, revalidated by its consolidated document alone."""
    tree = NodeTree(store, fmt, True, validators={document: validators[document]})
    tree.groups[""] = group
    return tree


def _read_v3(store: Store, root: Any, validators: dict[str, str | None]) -> NodeTree:
    if not isinstance(root, dict) or root.get("node_type") != "group":
        raise _root_error(store, root)
    group = GroupMeta("", 3, dict(root.get("attributes") or {}))
    consolidated = (root.get("consolidated_metadata") or {}).get("metadata")
    if not isinstance(consolidated, dict):
        return _listed_tree(store, 3, group, validators, _walk_v3)
    tree = _consolidated_tree(store, 3, group, validators, "zarr.json")
    _from_v3_consolidated(tree, consolidated)
    return tree


def _read_v2(store: Store, validators: dict[str, str | None]) -> NodeTree:
    docs = _fetch(store, [".zgroup", ".zattrs", ".zmetadata"], validators)
    zgroup, attrs, zmeta = (_parse_json(store, k, docs[k]) for k in (".zgroup", ".zattrs", ".zmetadata"))
    if zgroup is None:
        raise StoreNotFoundError(
            f"'{store.url}' is not a Zarr store: it has no zarr.json (Zarr v3) or .zgroup "
            "(Zarr v2) at its root; point read_zarr at the store's root folder"
        )
    if isinstance(zmeta, dict) and isinstance(zmeta.get("metadata"), dict):
        attrs = zmeta["metadata"].get(".zattrs", attrs)  # the consolidated copy is the one validated
    group = GroupMeta("", 2, attrs if isinstance(attrs, dict) else {})
    if not isinstance(zmeta, dict):
        return _listed_tree(store, 2, group, validators, _walk_v2)
    tree = _consolidated_tree(store, 2, group, validators, ".zmetadata")
    _from_v2_consolidated(tree, zmeta)
    return tree


def read_tree(store: Store) -> NodeTree:
    """Read the store's whole node tree (see the module docstring for the rules)."""
    validators: dict[str, str | None] = {}
    root = _load_json(store, "zarr.json", validators)
    tree = _read_v3(store, root, validators) if root is not None else _read_v2(store, validators)
    _settle(tree)
    return tree


# -- the cache ------------------------------------------------------------------------------

_PENDING = "\0pending"
_cache_lock = threading.Lock()
_cache: dict[str, NodeTree] = {}


def _settle(tree: NodeTree) -> None:
    """Replace pending validators (remote documents) with their tokens, in one `token_many`."""
    # snapshots here and below: a scan opening another table of this store may add validators
    pending = [k for k, v in list(tree.validators.items()) if v == _PENDING]
    if pending:
        tree.validators.update(zip(pending, tree.store.token_many(pending), strict=True))
    tree.checked_at = time.monotonic()


def _still_valid(tree: NodeTree, store: Store) -> bool:
    _settle(tree)  # an unlisted tree may have loaded nodes since
    keys = list(tree.validators)
    current = store.token_many([k[:-1] if k.endswith("/") else k for k in keys])
    return all(tree.validators[k] == c for k, c in zip(keys, current, strict=True))


def _watch(tree: NodeTree, store: Store) -> None:
    """Tell a remote store which document to check when a chunk turns out missing."""
    if hasattr(store, "watch") and tree.validators:
        key = list(tree.validators)[0]
        for candidate in ("zarr.json", ".zmetadata", ".zgroup"):
            if candidate in tree.validators:
                key = candidate
                break
        store.watch = (key, tree.validators[key])


def clear_cache() -> None:
    """Forget every cached tree (the next query of each store reads its metadata again)."""
    with _cache_lock:
        _cache.clear()


def cached_tree(store: Store) -> NodeTree:
    """`read_tree`, cached per store and revalidated as the module docstring says."""
    key = getattr(store, "cache_key", store.url)
    with _cache_lock:
        tree = _cache.get(key)
    if tree is not None:
        fresh = time.monotonic() - tree.checked_at < getattr(store, "metadata_ttl", 0.0)
        if fresh or _still_valid(tree, store):
            if not fresh:
                tree.checked_at = time.monotonic()
            if tree.store is not store:
                tree.store = store  # reads go through the caller's store (its options, its trace)
            _watch(tree, store)
            return tree
    tree = read_tree(store)
    with _cache_lock:
        _cache[key] = tree
    _watch(tree, store)
    return tree
