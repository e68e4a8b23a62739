"""A dense table opened for scanning: its columns, decoded coordinates and data codecs.

`zarrsql.scan.open_table(request)` reads the (cached) node tree, selects the table, and
builds a `TableScan` here, which loads and decodes its coordinates (cached with the tree)
and fixes each column's decoding. `TableScan.plan(predicate)` prunes the chunk grid; `scan.reader` turns the plan
into Arrow batches. Nothing here imports DuckDB or pyarrow.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from zarrsql.decode.chunks import decode_chunk, fast_path, read_region
from zarrsql.decode.columns import DecodeOptions, column_codec
from zarrsql.decode.logical import Labels, Logical
from zarrsql.decode.registry import codec_for
from zarrsql.decode.variables import Codec
from zarrsql.errors import UnsupportedError
from zarrsql.expand.columns import Column
from zarrsql.expand.rows import expand_dim
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree, cached_tree
from zarrsql.plan.bounds import bounds_predicate
from zarrsql.plan.predicate import And, Predicate, columns_of
from zarrsql.plan.units import DimValues, ScanPlan, WorkUnit, plan_scan
from zarrsql.scan.indexes import IndexedColumns
from zarrsql.scan.request import ReadRequest, open_store_for
from zarrsql.store import Store
from zarrsql.tables.model import Derived, ReadTable
from zarrsql.tables.select import select_table

#: Coordinate columns of recent units kept for reuse (see `TableScan._coordinate`).
PATTERNS_KEPT = 8
#: The longest dimension a scan opens: its coordinate values (positions, when positional) are
#: held in memory at 8 bytes each, so an absurd declared shape is refused, not allocated.
MAX_DIMENSION_LENGTH = 2**32


def _coord_chunks(array: ArrayMeta) -> list[str]:
    return [array.chunk_key((i,)) for i in range(-(-array.shape[0] // array.chunks[0]) if array.shape[0] else 0)]


def _prefetch_coords(tree: NodeTree, arrays: Sequence[ArrayMeta], options: DecodeOptions) -> dict[str, bytes | None]:
    """Every chunk of the coordinates not yet decoded, fetched together (one round of
    concurrent requests on a remote store), with their tokens for revalidation."""
    todo = [a for a in arrays if ("coord", a.path, options) not in tree.derived and fast_path(a)]
    keys = [k for a in todo for k in _coord_chunks(a)]
    if not keys:
        return {}
    raws = tree.store.get_many(keys)
    # A coordinate rewritten in place (chunks only) must not be served from the cache: its
    # chunk keys join the documents the cached tree is revalidated against.
    for k, token in zip(keys, tree.store.token_many(keys), strict=True):
        tree.validators[k] = token
    return dict(zip(keys, raws, strict=True))


def _load_coord(
    tree: NodeTree, array: ArrayMeta, options: DecodeOptions, fetched: dict[str, bytes | None]
) -> tuple[DimValues, str]:
    key = ("coord", array.path, options)
    hit = tree.derived.get(key)
    if hit is None:
        keys = _coord_chunks(array)
        if keys and all(k in fetched for k in keys):
            raw = np.concatenate([decode_chunk(array, fetched[k], k, tree.store.url) for k in keys])[: array.shape[0]]
        else:
            raw = read_region(tree.store, array, ((0, array.shape[0]),))
            for k, token in zip(keys, tree.store.token_many(keys), strict=True):
                tree.validators[k] = token
        codec = column_codec(array, options, is_coord=True, coord_values=raw)
        values, nulls = codec.decode(raw)
        hit = (DimValues(array.name, np.ascontiguousarray(values), nulls), codec.logical)
        tree.derived[key] = hit
    return cast("tuple[DimValues, str]", hit)  # what this function stored under `key`


def _derived_values(d: Derived, n: int) -> tuple[DimValues, str]:
    """A derived column's values along its axis and their logical type: labels (NULL where
    a label is missing) or `position * scale + offset`."""
    if d.labels is not None:
        values = np.array([label or "" for label in d.labels], dtype=object)
        missing = np.array([label is None for label in d.labels], dtype=bool)
        return DimValues(d.name, values, missing if missing.any() else None), "string"
    positions = np.arange(n, dtype=np.float64)
    return DimValues(d.name, positions * d.scale + d.offset, None), "float64"


class TableScan:
    """One opened table: its columns, decoded dimensions and data codecs."""

    def __init__(
        self,
        request: ReadRequest,
        tree: NodeTree | None = None,
        table: ReadTable | None = None,
        store: Store | None = None,
    ) -> None:
        self.request = request
        # this call's store reads the chunks; the cached tree may have been read by another
        self.store = store if store is not None else open_store_for(request)
        self.tree = tree if tree is not None else cached_tree(self.store)
        self.table: ReadTable = table if table is not None else select_table(self.tree, request.selection)
        fetched = _prefetch_coords(self.tree, [c for c in self.table.coords if c is not None], request.options)
        self.dims: list[DimValues] = []
        self.dim_logical: list[str] = []
        self.columns: list[Column] = []
        self.positional: list[bool] = []
        for k, (name, n, coord) in enumerate(zip(self.table.dims, self.table.shape, self.table.coords, strict=True)):
            if n > MAX_DIMENSION_LENGTH:
                raise UnsupportedError(
                    f"dimension '{name}' of table '{self.table.label}' has length {n}, more than the "
                    f"{MAX_DIMENSION_LENGTH} a scan holds in memory; the array's shape is absurd or too large"
                )
            if coord is None:
                dv, logical = DimValues(name, np.arange(n, dtype=np.int64), None), "int64"
            else:
                dv, logical = _load_coord(self.tree, coord, request.options, fetched)
                dv = DimValues(name, dv.values, dv.nulls)
            self.dims.append(dv)
            self.dim_logical.append(logical)
            self.positional.append(coord is None)
            if k not in self.table.hidden:
                shown: Logical = Labels(dv.values) if logical == "string" else logical
                self.columns.append(Column(name, shown, dim=k))
        #: Derived coordinate columns: name -> (axis, values along that axis).
        self.derived: list[tuple[int, DimValues]] = []
        self.derived_logical: list[str] = []
        for j, d in enumerate(self.table.derived):
            dv, logical = _derived_values(d, self.table.shape[d.axis])
            self.derived.append((d.axis, dv))
            self.derived_logical.append(logical)
            self.columns.append(Column(d.name, Labels(dv.values) if logical == "string" else logical, derived=j))
        # Shared by the reader's decoding threads: every access holds `_patterns_lock`.
        self._patterns: dict[Any, tuple[Any, Any]] = {}
        self._patterns_lock = threading.Lock()
        self.codecs = self._make_codecs()
        self.indexed = IndexedColumns(self.table, self.codecs)  # data columns an index lets WHERE prune by
        for i, (dc, codec) in enumerate(zip(self.table.data, self.codecs, strict=True)):
            self.columns.append(Column(dc.column, codec.logical, data=i))
        if self.table.column_order:  # a declared order (the table convention's table:columns)
            rank = {name: k for k, name in enumerate(self.table.column_order)}
            self.columns.sort(key=lambda c: rank.get(c.name, len(rank)))
        self.base_predicate: Predicate | None = None
        if request.bounds is not None:
            self.base_predicate = bounds_predicate(request.bounds, self.dims, self.dim_logical, self.positional)

    def _make_codecs(self) -> list[Codec]:
        """One codec per data variable (a sparse table makes its own)."""
        return [codec_for(dc.array, self.store, self.request.options) for dc in self.table.data]

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def fingerprint(self) -> str:
        """Changes whenever the store's metadata or this table's columns change."""
        doc = {
            "store": self.store.url,
            # a snapshot: another thread opening a table of this store may add validators
            "validators": sorted((k, v or "") for k, v in list(self.tree.validators.items())),
            "request": repr(self.request),
            "columns": [(c.name, c.logical) for c in self.columns],
            "shape": self.table.shape,
        }
        return hashlib.sha1(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()

    def plan(self, predicate: Predicate | None = None) -> ScanPlan:
        """Plan the work units for rows where `predicate` (and `bounds :=`) holds."""
        parts = [p for p in (self.base_predicate, predicate) if p is not None]
        combined = None if not parts else parts[0] if len(parts) == 1 else And(tuple(parts))
        aliases = list(self.derived)
        if combined is not None and self.indexed.columns:
            aliases += self.indexed.aliases(self.store, columns_of(combined))
        return plan_scan(self.table.shape, self.table.chunk_grid, self.dims, combined, aliases=aliases)

    def unit_columns(self, unit: WorkUnit, columns: Sequence[Column]) -> tuple[int, list[tuple[Any, Any]]]:
        """The unit's row count and (values, nulls) of each column, in `columns` order."""
        parts = []
        for col in columns:
            if col.dim is not None or col.derived is not None:
                parts.append(self._coordinate(col, unit))
            else:
                assert col.data is not None
                parts.append(self.codecs[col.data].read(self.store, unit))
        return unit.num_rows(), parts

    def unit_keys(self, unit: WorkUnit, columns: Sequence[Column]) -> list[str] | None:
        """Every store key `unit_columns` will read for `columns`, or None when some column
        cannot say in advance (a convention's encoded column, a zarr-python fallback)."""
        keys: list[str] = []
        for col in columns:
            if col.data is None:
                continue
            known = getattr(self.codecs[col.data], "keys", None)
            more = known(unit) if known is not None else None
            if more is None:
                return None
            keys.extend(more)
        return keys

    def _coordinate(self, col: Column, unit: WorkUnit) -> tuple[Any, Any]:
        """A coordinate column of a unit. Units of one shape at one place along an axis give
        the same column (latitude and longitude repeat for every time block), so the last
        few are kept and handed out again instead of being rebuilt.

        The reader's threads call this at once: the cache is only touched under its lock
        (the columns themselves are built outside it, and never written after)."""
        axis, dv = (col.dim, self.dims[col.dim]) if col.dim is not None else self.derived[col.derived]  # type: ignore[index]
        key = (col.name, unit.region) if unit.select is None else None
        if key is not None:
            with self._patterns_lock:
                hit = self._patterns.get(key)
            if hit is not None:
                return hit
        nulls = None if dv.nulls is None else expand_dim(dv.nulls, unit, axis)
        source = np.arange(len(dv.values), dtype=np.int32) if isinstance(col.logical, Labels) else dv.values
        made = (expand_dim(source, unit, axis), nulls)
        if key is not None:
            with self._patterns_lock:
                self._patterns[key] = made
                while len(self._patterns) > PATTERNS_KEPT:
                    del self._patterns[next(iter(self._patterns))]
        return made

    def filterable(self) -> dict[str, str]:
        """Columns a pushed predicate may name, with their logical types: every dimension
        column (its coordinate values) and every derived coordinate."""
        out = {self.dims[k].name: self.dim_logical[k] for k in range(len(self.dims)) if k not in self.table.hidden}
        out.update({dv.name: logical for (_, dv), logical in zip(self.derived, self.derived_logical, strict=True)})
        out.update(self.indexed.filterable())
        return out
