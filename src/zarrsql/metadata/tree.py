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

import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from zarrsql.errors import MetadataError, StoreNotFoundError, StoreReadError, ZarrSQLError
from zarrsql.metadata.arrays import ArrayMeta, GroupMeta, parse_v2_array, parse_v2_group, parse_v3_array, parse_v3_group
from zarrsql.metadata.documents import field_choice, field_object, load_document, wrong_type
from zarrsql.store import ChangeWatching, ReadTokens, Refusing, Store, check_key, take_changed

#: The documents of a v2 node: names in a listing that are not child nodes.
_V2_DOCUMENTS = frozenset({".zarray", ".zgroup", ".zattrs", ".zmetadata"})


@dataclass(frozen=True, slots=True)
class ArrayProblem:
    """An array whose metadata could not be read; `error` says why. `refused`: the store
    would not read it at all (a link out of a local store), rather than read it and fail.
    `group`: its document says it is a group (then it is no column of its parent's tables)."""

    path: str
    zarr_format: int
    error: str
    refused: bool = False
    group: bool = False

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
    #: The array each chunk key among `validators` belongs to (a coordinate decoded and
    #: cached here): a table's fingerprint leaves out the chunks of other tables' coordinates.
    chunk_arrays: dict[str, str] = field(default_factory=dict)
    #: Decoded coordinates and other derived values, valid as long as this tree is.
    derived: dict[object, object] = field(default_factory=dict)
    #: time.monotonic() of the last read or successful validation (for `metadata_ttl`).
    checked_at: float = 0.0

    def children(self, group: str) -> tuple[list[str], list[str]]:
        """Paths of the groups and arrays directly inside `group` (loaded ones, if unlisted).

        An index of every group's children is built once (kept in `derived`, which is cleared
        whenever nodes are loaded), so a store of many nodes is not scanned once per group.
        """
        index = self.derived.get(_CHILDREN)
        if not isinstance(index, dict):
            index = self.derived[_CHILDREN] = self._index()
        groups, arrays = index.get(group, ((), ()))
        return list(groups), list(arrays)

    def _index(self) -> dict[str, tuple[list[str], list[str]]]:
        groups = self.groups.known if isinstance(self.groups, _Unlisted) else self.groups
        arrays = self.arrays.known if isinstance(self.arrays, _Unlisted) else self.arrays
        index: dict[str, tuple[list[str], list[str]]] = {}
        for kind, paths in ((0, groups), (1, arrays)):
            for path in paths:
                if path:
                    index.setdefault(path.rpartition("/")[0], ([], []))[kind].append(path)
        for lists in index.values():
            lists[0].sort()
            lists[1].sort()
        return index


#: The `derived` key of the children index.
_CHILDREN = ("children",)
#: The deepest node read, in groups below the root. Real stores nest a handful of levels;
#: every ancestor walk (coordinates, alignment) is linear in the depth and runs per group, so
#: a consolidated document listing thousands of nested groups would take minutes to analyze.
MAX_NODE_DEPTH = 64


def _too_deep(tree: NodeTree, path: str, zarr_format: int) -> bool:
    """Whether `path` is nested deeper than `MAX_NODE_DEPTH` (then it is kept as a problem)."""
    if path.count("/") < MAX_NODE_DEPTH:
        return False
    tree.arrays[path] = ArrayProblem(
        path,
        zarr_format,
        f"node '/{path}' of store '{tree.store.url}' is nested more than {MAX_NODE_DEPTH} "
        "groups deep, deeper than zarrsql reads",
    )
    return True


def unreadable_error(tree: NodeTree, problems: list[ArrayProblem], reading: str) -> MetadataError:
    """Why `reading` (a group's table, an array) is refused: these nodes' documents are invalid.

    A table read never skips such a node: its document is where its dimensions would be, so it
    might be one of the table's variables or, worse, its coordinate (positions would then be
    read in place of coordinate values). A listing still lists it, with this error.
    """
    first = problems[0]
    others = f" (and {len(problems) - 1} more: {[p.path for p in problems[1:4]]})" if len(problems) > 1 else ""
    return MetadataError(
        f"{reading} of store '{tree.store.url}' cannot be read: the metadata of node '/{first.path}'{others} "
        f"is unreadable: {first.error}; read_zarr_metadata lists every node with its error"
    )


def problems_in(tree: NodeTree, group: str, names: tuple[str, ...] | None = None) -> list[ArrayProblem]:
    """The nodes directly in `group` whose metadata is invalid: with one of `names`, if
    given, else those that may be arrays of the group's tables (a node known to be a group
    is no column; a link the store refuses to follow is left out on purpose, as documented)."""
    _, arrays = tree.children(group)
    nodes = [tree.arrays[a] for a in arrays]
    if names is None:
        return [n for n in nodes if isinstance(n, ArrayProblem) and not n.group and not n.refused]
    return [n for n in nodes if isinstance(n, ArrayProblem) and n.name in names]


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _parse_json(store: Store, key: str, raw: bytes | None) -> Any:
    return load_document(raw, key, store.url)


def _fetch(store: Store, keys: list[str], validators: dict[str, str | None]) -> dict[str, bytes | None]:
    """The raw documents at `keys` (one `get_many`), recording a validator for each.

    A local store's tokens are a `stat` each, taken in one `token_many` BEFORE the reads: a
    document rewritten between its token and its read is then kept under the older token,
    and the next validation reads it again; taken after, a write in between would leave the
    old document cached under the new token for good. A remote store's token would be a
    request per document, so it is taken only when the tree is settled (`_settle`: the
    validators that came with the reads where the store has them).
    """
    if not keys:
        return {}
    tokens = store.token_many(keys) if not store.remote else [_PENDING] * len(keys)
    raws = store.get_many(keys)
    for key, raw, token in zip(keys, raws, tokens, strict=True):
        validators[key] = None if raw is None else token
    return dict(zip(keys, raws, strict=True))


def _load_json(store: Store, key: str, tree_validators: dict[str, str | None]) -> Any:
    return _parse_json(store, key, _fetch(store, [key], tree_validators)[key])


def _problem(tree: NodeTree, path: str, zarr_format: int, error: str, group: bool = False) -> None:
    tree.arrays[path] = ArrayProblem(path, zarr_format, error, group=group)


def _add_v3_node(tree: NodeTree, path: str, doc: Any, key: str | None = None) -> str | None:
    """Add one v3 node (an `ArrayProblem` when its document is invalid); return its node type."""
    key = key or _join(path, "zarr.json")
    if not isinstance(doc, dict):
        _problem(tree, path, 3, f"'{key}' in store '{tree.store.url}' is not a JSON object")
        return None
    kind = doc.get("node_type")
    try:
        if kind == "group":
            tree.groups[path] = parse_v3_group(path, doc, key)
        elif kind == "array":
            tree.arrays[path] = parse_v3_array(path, doc, key)
        else:
            raise MetadataError(f"'{key}' in store '{tree.store.url}' has node_type {kind!r}, not 'array' or 'group'")
    except ZarrSQLError as err:
        _problem(tree, path, 3, str(err), group=kind == "group")
        return None
    return kind  # type: ignore[no-any-return]


def _v2_node(tree: NodeTree, path: str, zarray: Any, zattrs: Any, key: str | None = None) -> None:
    try:
        tree.arrays[path] = parse_v2_array(path, zarray, zattrs, key)
    except ZarrSQLError as err:
        _problem(tree, path, 2, str(err))


def _v2_group(tree: NodeTree, path: str, zgroup: Any, zattrs: Any) -> bool:
    """Add one v2 group; False (and an `ArrayProblem` in its place) when it is invalid."""
    try:
        tree.groups[path] = parse_v2_group(path, zgroup, zattrs)
    except ZarrSQLError as err:
        _problem(tree, path, 2, str(err), group=True)
        return False
    return True


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


def _enterable(tree: NodeTree, children: list[str]) -> list[str]:
    """The children the store will read; one it refuses (a local link out of the store, a
    loop) is kept as an `ArrayProblem` naming it, so the rest of the store still reads."""
    if not isinstance(tree.store, Refusing):
        return children
    kept = []
    for path in children:
        reason = tree.store.refusal(path)
        if reason is None:
            kept.append(path)
        else:
            tree.arrays[path] = ArrayProblem(path, tree.zarr_format, reason, refused=True)
    return kept


def _walk_v3(tree: NodeTree, level: list[str]) -> None:
    while level:
        children = [_join(g, n) for g, n in _listing(tree, level) if n != "zarr.json"]  # '.x' is a valid name
        children = _enterable(tree, [c for c in children if not _too_deep(tree, c, 3)])
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
        children = [_join(g, n) for g, n in _listing(tree, level) if n not in _V2_DOCUMENTS]
        children = _enterable(tree, [c for c in children if not _too_deep(tree, c, 2)])
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
                _v2_node(tree, path, zarray, zattrs)
            elif zgroup is not None and _v2_group(tree, path, zgroup, zattrs):
                level.append(path)


def _consolidated_path(tree: NodeTree, key: Any, document: str, zarr_format: int) -> str | None:
    """The node path a consolidated entry's key names; None (and a problem) when it names none."""
    path = key.strip("/") if isinstance(key, str) else ""
    try:
        return check_key(path) if path and not _too_deep(tree, path, zarr_format) else None
    except ZarrSQLError:
        _problem(
            tree, path, zarr_format, f"'{document}' in store '{tree.store.url}' lists the node {key!r}, not a path"
        )
        return None


def _from_v2_consolidated(tree: NodeTree, docs: dict[str, Any]) -> None:
    for key, doc in docs.items():
        parent, _, leaf = key.rpartition("/")
        path = _consolidated_path(tree, parent, ".zmetadata", 2) if parent else None
        if path is None:
            continue
        if leaf == ".zgroup":
            _v2_group(tree, path, doc, docs.get(_join(path, ".zattrs")))
        elif leaf == ".zarray":
            _v2_node(tree, path, doc, docs.get(_join(path, ".zattrs")), f".zmetadata['{key}']")


def _from_v3_consolidated(tree: NodeTree, docs: dict[str, Any]) -> None:
    for key in sorted(docs):
        path = _consolidated_path(tree, key, "zarr.json", 3)
        if path is not None:
            _add_v3_node(tree, path, docs[key], f"zarr.json consolidated_metadata['{key}']")


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
    paths = [p for p in paths if p not in arrays and p not in groups and not _too_deep(tree, p, tree.zarr_format)]
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
                _v2_node(tree, p, zarray, zattrs)
            elif zgroup is not None:
                _v2_group(tree, p, zgroup, zattrs)
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


def _root_group(store: Store, parse: Callable[[], GroupMeta]) -> GroupMeta:
    """The root group, or a `MetadataError` that also names the store (nothing is readable)."""
    try:
        return parse()
    except MetadataError as err:
        raise MetadataError(f"store '{store.url}': {err}") from err


def _read_v3(store: Store, root: Any, validators: dict[str, str | None]) -> NodeTree:
    if not isinstance(root, dict) or root.get("node_type") != "group":
        raise _root_error(store, root)
    group = _root_group(store, lambda: parse_v3_group("", root, "zarr.json"))
    consolidated = _v3_consolidated(store, root)
    if consolidated is None:
        return _listed_tree(store, 3, group, validators, _walk_v3)
    tree = _consolidated_tree(store, 3, group, validators, "zarr.json")
    _from_v3_consolidated(tree, consolidated)
    return tree


def _v3_consolidated(store: Store, root: dict[str, Any]) -> dict[str, Any] | None:
    """The root's consolidated documents by path, or None when it has none."""
    where = f"'zarr.json' in store '{store.url}'"
    block = field_object(root, "consolidated_metadata", where)
    if not block:
        return None
    field_choice(block, "kind", where, ("inline",), "inline")
    docs = block.get("metadata")
    if not isinstance(docs, dict):
        raise wrong_type(where, "consolidated_metadata's 'metadata'", "an object of documents by path", docs)
    return docs


def _read_v2(store: Store, validators: dict[str, str | None]) -> NodeTree:
    docs = _fetch(store, [".zgroup", ".zattrs", ".zmetadata"], validators)
    zgroup, attrs, zmeta = (_parse_json(store, k, docs[k]) for k in (".zgroup", ".zattrs", ".zmetadata"))
    if zgroup is None:
        raise StoreNotFoundError(
            f"'{store.url}' is not a Zarr store: it has no zarr.json (Zarr v3) or .zgroup "
            "(Zarr v2) at its root; point read_zarr at the store's root folder"
        )
    consolidated = _v2_consolidated(store, zmeta)
    if consolidated is None:
        return _listed_tree(
            store, 2, _root_group(store, lambda: parse_v2_group("", zgroup, attrs)), validators, _walk_v2
        )
    # the consolidated copies of the root's documents are the ones revalidated
    zgroup, attrs = consolidated.get(".zgroup", zgroup), consolidated.get(".zattrs", attrs)
    group = _root_group(store, lambda: parse_v2_group("", zgroup, attrs))
    tree = _consolidated_tree(store, 2, group, validators, ".zmetadata")
    _from_v2_consolidated(tree, consolidated)
    return tree


def _v2_consolidated(store: Store, zmeta: Any) -> dict[str, Any] | None:
    """The documents of `.zmetadata` by key, or None when the store has none."""
    if zmeta is None:
        return None
    where = f"'.zmetadata' in store '{store.url}'"
    if not isinstance(zmeta, dict):
        raise wrong_type(where, "the document", "a JSON object", zmeta)
    field_choice(zmeta, "zarr_consolidated_format", where, (1,), 1)
    return field_object(zmeta, "metadata", where, required=True)


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
    """Replace pending validators (remote documents) with their tokens: those that came with
    the reads where the store has them (no request), the rest in one `token_many`."""
    # snapshots here and below: a scan opening another table of this store may add validators
    pending = [k for k, v in list(tree.validators.items()) if v == _PENDING]
    if pending:
        store = tree.store
        tokens = store.read_tokens(pending) if isinstance(store, ReadTokens) else store.token_many(pending)
        tree.validators.update(zip(pending, tokens, strict=True))
    tree.checked_at = time.monotonic()


def _still_valid(tree: NodeTree, store: Store) -> bool:
    _settle(tree)  # an unlisted tree may have loaded nodes since
    keys = list(tree.validators)
    current = store.token_many([k[:-1] if k.endswith("/") else k for k in keys])
    return all(tree.validators[k] == c for k, c in zip(keys, current, strict=True))


def _watch(tree: NodeTree, store: Store) -> None:
    """Tell a remote store which document to check when a chunk turns out missing."""
    if isinstance(store, ChangeWatching) and tree.validators:
        key = list(tree.validators)[0]
        for candidate in ("zarr.json", ".zmetadata", ".zgroup"):
            if candidate in tree.validators:
                key = candidate
                break
        store.watch(key, tree.validators[key])


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
        fresh = fresh and not take_changed(key)  # a query saw it change: "run it again" must work
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
