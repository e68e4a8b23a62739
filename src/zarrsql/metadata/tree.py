"""Read every group and array document of a store into a `NodeTree`.

Consolidated metadata (v3 `consolidated_metadata` in the root `zarr.json`, v2 `.zmetadata`)
is used when present; otherwise the tree is walked, one listing per group. An array whose own
document cannot be parsed is kept as an `ArrayProblem` (listed as unsupported); a missing or
corrupt root document is an error, since then nothing can be trusted.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from zarrsql.errors import MetadataError, StoreNotFoundError, ZarrSQLError
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

    def children(self, group: str) -> tuple[list[str], list[str]]:
        """Paths of the groups and arrays directly inside `group`."""
        def direct(path: str) -> bool:
            if group == "":
                return path != "" and "/" not in path
            return path.startswith(group + "/") and "/" not in path[len(group) + 1:]

        return sorted(p for p in self.groups if direct(p)), sorted(p for p in self.arrays if direct(p))


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _load_json(store: Store, key: str, tree_validators: dict[str, str | None]) -> Any:
    raw = store.get(key)
    tree_validators[key] = store.token(key) if raw is not None else None
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise MetadataError(
            f"'{key}' in store '{store.url}' is not valid JSON ({err}); the store's metadata is "
            "corrupt: rewrite it with the tool that created the store"
        ) from err


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


def _walk_v3(tree: NodeTree, group: str) -> None:
    store = tree.store
    tree.validators[group + "/"] = store.token(group)
    for name in store.list_dir(group):
        if name.startswith(".") or name == "zarr.json":
            continue
        path = _join(group, name)
        try:
            doc = _load_json(store, f"{path}/zarr.json", tree.validators)
        except MetadataError as err:
            tree.arrays[path] = ArrayProblem(path, 3, str(err))
            continue
        if doc is not None and _add_v3_node(tree, path, doc) == "group":
            _walk_v3(tree, path)


def _v2_node(tree: NodeTree, path: str, zarray: Any, zattrs: Any) -> None:
    try:
        if not isinstance(zarray, dict):
            raise MetadataError(f"array '{path}': .zarray is not a JSON object")
        tree.arrays[path] = parse_v2_array(path, zarray, zattrs if isinstance(zattrs, dict) else {})
    except ZarrSQLError as err:
        tree.arrays[path] = ArrayProblem(path, 2, str(err))


def _walk_v2(tree: NodeTree, group: str) -> None:
    store = tree.store
    tree.validators[group + "/"] = store.token(group)
    for name in store.list_dir(group):
        if name.startswith("."):
            continue
        path = _join(group, name)
        try:
            zarray = _load_json(store, f"{path}/.zarray", tree.validators)
            if zarray is not None:
                _v2_node(tree, path, zarray, _load_json(store, f"{path}/.zattrs", tree.validators) or {})
                continue
            zgroup = _load_json(store, f"{path}/.zgroup", tree.validators)
        except MetadataError as err:
            tree.arrays[path] = ArrayProblem(path, 2, str(err))
            continue
        if zgroup is not None:
            attrs = _load_json(store, f"{path}/.zattrs", tree.validators) or {}
            tree.groups[path] = GroupMeta(path, 2, attrs if isinstance(attrs, dict) else {})
            _walk_v2(tree, path)


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


def read_tree(store: Store) -> NodeTree:
    """Read the store's whole node tree (see the module docstring for the rules)."""
    validators: dict[str, str | None] = {}
    root = _load_json(store, "zarr.json", validators)
    if root is not None:
        if not isinstance(root, dict) or root.get("node_type") != "group":
            raise MetadataError(
                f"the root of store '{store.url}' is not a Zarr group (zarr.json node_type "
                f"{root.get('node_type') if isinstance(root, dict) else None!r}); "
                "point read_zarr at the folder that holds the group"
            )
        tree = NodeTree(store, 3, False, validators=validators)
        tree.groups[""] = GroupMeta("", 3, dict(root.get("attributes") or {}))
        consolidated = (root.get("consolidated_metadata") or {}).get("metadata")
        if isinstance(consolidated, dict):
            tree.consolidated = True
            _from_v3_consolidated(tree, consolidated)
        else:
            _walk_v3(tree, "")
        return tree
    zgroup = _load_json(store, ".zgroup", validators)
    if zgroup is None:
        raise StoreNotFoundError(
            f"'{store.url}' is not a Zarr store: it has no zarr.json (Zarr v3) or .zgroup "
            "(Zarr v2) at its root; point read_zarr at the store's root folder"
        )
    tree = NodeTree(store, 2, False, validators=validators)
    attrs = _load_json(store, ".zattrs", validators) or {}
    tree.groups[""] = GroupMeta("", 2, attrs if isinstance(attrs, dict) else {})
    zmeta = _load_json(store, ".zmetadata", validators)
    if isinstance(zmeta, dict):
        tree.consolidated = True
        _from_v2_consolidated(tree, zmeta)
    else:
        _walk_v2(tree, "")
    return tree


_cache_lock = threading.Lock()
_cache: dict[str, NodeTree] = {}


def _still_valid(tree: NodeTree) -> bool:
    store = tree.store
    for key, token in tree.validators.items():
        current = store.token(key[:-1] if key.endswith("/") else key)
        if current != token:
            return False
    return True


def cached_tree(store: Store) -> NodeTree:
    """`read_tree`, cached per store URL and revalidated against every document it read."""
    with _cache_lock:
        tree = _cache.get(store.url)
    if tree is not None and _still_valid(tree):
        return tree
    tree = read_tree(store)
    with _cache_lock:
        _cache[store.url] = tree
    return tree
