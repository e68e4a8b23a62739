"""A table opened for scanning: its columns, decoded coordinates and data codecs.

`OpenedTable` is what every scan shares: the coordinates loaded and decoded once (cached
with the node tree), the output columns, the `bounds :=` predicate. `DenseScan` adds the
cell grid: `plan(predicate)` prunes the chunk grid into work units, `unit_columns` decodes
one unit's columns. The sparse scan (`scan/sparse.py`) is the other implementation of the
`TableScan` contract (`scan/contract.py`). Nothing here imports DuckDB or pyarrow.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from types import EllipsisType
from typing import Any

import numpy as np

from zarrsql.decode.cells import select_cells
from zarrsql.decode.chunks import streams_leading_rows
from zarrsql.decode.columns import column_codec
from zarrsql.decode.logical import Labels, Logical
from zarrsql.decode.registry import codec_for
from zarrsql.decode.variables import Codec, PlainCodec
from zarrsql.errors import ParameterError, UnsupportedError
from zarrsql.expand.columns import Column
from zarrsql.expand.rows import expand_dim
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree
from zarrsql.plan.bounds import bounds_predicate
from zarrsql.plan.predicate import Predicate, columns_of, conjoin, conjuncts, evaluate, leaf_truth
from zarrsql.plan.units import DimValues, InUngroupedOrder, ScanPlan, WorkUnit, plan_scan, ungrouped_order
from zarrsql.scan.coords import (
    DeferredCoords,
    bounds_array,
    defers,
    derived_values,
    is_longitude,
    load_aux,
    load_bounds,
    load_coord,
    prefetch_coords,
    wrap_longitude,
)
from zarrsql.scan.indexes import IndexedColumns
from zarrsql.scan.request import ReadRequest
from zarrsql.store import Store
from zarrsql.tables.model import ReadTable

#: Coordinate columns of recent units kept for reuse (see `DenseScan._coordinate`).
PATTERNS_KEPT = 8
#: Rows, about, of the pieces a unit is handed over in when it carries a coordinate of an
#: axis after the first (see `DenseScan.row_pieces`): a few of DuckDB's 2,048-row vectors.
PIECE_ROWS = 1 << 17
#: The longest dimension with a coordinate a scan opens: its values are held in memory at 8
#: bytes each, so an absurd declared shape is refused, not allocated. A positional dimension's
#: positions are runs, never held whole (plan/positions.py): it is refused only beyond this
#: many chunks, which a plan lists along an unpruned axis (as many as the longest coordinate's).
MAX_DIMENSION_LENGTH = 2**32


class OpenedTable:
    """What every scan of a table holds: its columns, decoded dimensions and data codecs.

    Opened once per scan (`scan/opening.py`) from one store, one tree and one selected
    table; every read of the scan, coordinates included, goes through `store` (the cached
    tree may have been read through another store object of the same URL)."""

    def __init__(self, request: ReadRequest, tree: NodeTree, table: ReadTable, store: Store) -> None:
        if table.fill_is_value:  # every decode of this table, coordinates too, reads options
            request = replace(request, options=replace(request.options, zarr_fill_missing=False))
        self.request = request
        self.store = store
        self.tree = tree
        self.table: ReadTable = table
        coords = [c for c in table.coords if c is not None]
        #: The coordinates read when first used (`scan/coords.py`), or None: read here.
        self.deferred = DeferredCoords(tree, store, coords, request.options) if self._defers(coords) else None
        fetched = prefetch_coords(tree, store, coords, request.options) if self.deferred is None else {}
        self.dims: list[DimValues] = []
        self.dim_logical: list[str] = []
        self.columns: list[Column] = []
        self.positional: list[bool] = []
        for k, (name, n, coord) in enumerate(zip(self.table.dims, self.table.shape, self.table.coords, strict=True)):
            self._check_length(name, n, self.table.chunk_grid[k], positional=coord is None)
            if coord is None:
                dv, logical = DimValues.positions(name, n), "int64"
            elif self.deferred is not None:  # its type from the metadata (`coords.defers`)
                dv = self.deferred.dim(name, coord)
                logical = column_codec(coord, request.options, is_coord=True).logical
            else:
                dv, logical = load_coord(self.tree, self.store, coord, request.options, fetched)
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
        for d in self.table.derived:
            dv, logical = derived_values(d, self.table.shape[d.axis])
            self._add_derived(d.axis, dv, logical)
        self._load_aux()
        self._longitude_shift: dict[int, np.ndarray] = {}
        if request.options.longitude is not None:
            self._present_longitude(request.options.longitude)
        if request.options.cell_bounds:
            self._add_cell_bounds()
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

    def _check_length(self, name: str, n: int, chunk: int, *, positional: bool) -> None:
        """Refuse a dimension too long to open (`MAX_DIMENSION_LENGTH`), not allocate it."""
        chunks = -(-n // max(chunk, 1))
        if positional and chunks > MAX_DIMENSION_LENGTH:
            raise UnsupportedError(
                f"dimension '{name}' of table '{self.table.label}' has length {n} in {chunks} chunks, more than "
                f"the {MAX_DIMENSION_LENGTH} chunks a scan lists along one dimension; the array's shape is absurd "
                "or its chunks too small"
            )
        if not positional and n > MAX_DIMENSION_LENGTH:
            raise UnsupportedError(
                f"dimension '{name}' of table '{self.table.label}' has length {n}, more than the "
                f"{MAX_DIMENSION_LENGTH} coordinate values a scan holds in memory; the array's shape is absurd "
                "or too large"
            )

    def _make_codecs(self) -> list[Any]:
        """One decoder per data variable, chosen by the scan kind."""
        raise NotImplementedError

    #: Whether this kind of scan may read a remote table's coordinates when first used.
    defers_coordinates = False

    def _defers(self, coords: list[ArrayMeta]) -> bool:
        """Whether the coordinates wait for their first use (`DeferredCoords`): on a remote
        store, for a scan kind that allows it, when every coordinate's type is known without
        its values and no option of the read presents or filters them at open (`longitude`,
        `cell_bounds`, `bounds`), no auxiliary coordinate is read whole anyway, and they are
        not already decoded in the cached tree (then reading them costs nothing)."""
        request, options = self.request, self.request.options
        if not (self.defers_coordinates and getattr(self.store, "remote", False) and coords):
            return False
        if options.longitude is not None or options.cell_bounds or request.bounds is not None or self.table.aux:
            return False
        if all(("coord", c.path, options) in self.tree.derived for c in coords):
            return False
        return all(defers(c, options) for c in coords)

    def start_coordinates(self, columns: Sequence[Column]) -> None:
        """A scan of `columns` is about to start: if it outputs a coordinate still to be read,
        begin reading them now, beside the first unit's fetch, not after it."""
        if self.deferred is not None and any(c.dim is not None for c in columns):
            self.deferred.start()

    def _load_aux(self) -> None:
        """The table's auxiliary coordinates (CF `coordinates`), read whole once and cached
        with the tree; each as (table axes, increasing; values and nulls in that axis order)."""
        #: Auxiliary coordinate columns: (name, axes, values, nulls), with `aux_logical`.
        self.aux: list[tuple[str, tuple[int, ...], np.ndarray, Any]] = []
        self.aux_logical: list[str] = []
        taken = {c.name for c in self.columns} | {dc.column for dc in self.table.data}
        for a in self.table.aux:
            if a.name in taken:
                continue
            values, nulls, logical = load_aux(self.tree, self.store, a.array, self.request.options, a.characters)
            order = tuple(int(i) for i in np.argsort(a.axes))
            values = np.transpose(values, order)
            nulls = None if nulls is None else np.transpose(nulls, order)
            self.aux.append((a.name, tuple(sorted(a.axes)), values, nulls))
            self.aux_logical.append(logical)
            self.columns.append(Column(a.name, logical, aux=len(self.aux) - 1))

    def _add_derived(self, axis: int, dv: DimValues, logical: str) -> None:
        self.derived.append((axis, dv))
        self.derived_logical.append(logical)
        shown: Logical = Labels(dv.values) if logical == "string" else logical
        self.columns.append(Column(dv.name, shown, derived=len(self.derived) - 1))

    def _longitudes(self) -> list[int]:
        return [
            k
            for k, coord in enumerate(self.table.coords)
            if coord is not None and is_longitude(coord) and self.dim_logical[k] not in ("string",)
        ]

    def _present_longitude(self, setting: int) -> None:
        """`longitude := 180 | 360`: the longitude coordinates' values moved into that range,
        so filters, pruning and output all see the presented values."""
        axes = self._longitudes()
        if not axes and not any(is_longitude(a.array) for a in self.table.aux):
            names = [c.name for c in self.table.coords if c is not None]
            raise ParameterError(
                f"longitude := {setting} presents longitude coordinates, and table '{self.table.label}' has none "
                f"(a coordinate with CF units 'degrees_east' or standard_name 'longitude'; its coordinates are "
                f"{', '.join(repr(n) for n in names) or 'none'}); read it without longitude :="
            )
        for j, (name, aux_axes, values, nulls) in enumerate(self.aux):
            if is_longitude(self.table.aux[[a.name for a in self.table.aux].index(name)].array):
                self.aux[j] = (name, aux_axes, wrap_longitude(values, setting), nulls)
        for k in axes:
            dv = self.dims[k]
            assert isinstance(dv.values, np.ndarray), "a longitude is a coordinate, never positional"
            presented = wrap_longitude(dv.values, setting)
            # whole turns added to each value, so its cell bounds move with it (cell_bounds :=)
            self._longitude_shift[k] = presented.astype(np.float64) - dv.values.astype(np.float64)
            self.dims[k] = DimValues(dv.name, presented, dv.nulls)

    def _add_cell_bounds(self) -> None:
        """`cell_bounds := true`: each coordinate's CF bounds as `<dim>_lower`, `<dim>_upper`."""
        found = False
        taken = {c.name for c in self.columns} | {dc.column for dc in self.table.data}
        for k, coord in enumerate(self.table.coords):
            if coord is None or k in self.table.hidden:
                continue
            array = bounds_array(self.tree, coord)
            if array is None:
                continue
            found = True
            lower, upper, logical = load_bounds(self.tree, self.store, array, self.request.options)
            name = self.dims[k].name
            lo_values, hi_values = lower.values, upper.values
            shift = self._longitude_shift.get(k)
            if shift is not None:  # a cell moves by the whole turns its longitude moved
                lo_values = (lower.values + shift).astype(lower.values.dtype, copy=False)
                hi_values = (upper.values + shift).astype(upper.values.dtype, copy=False)
            for suffix, values, nulls in (("_lower", lo_values, lower.nulls), ("_upper", hi_values, upper.nulls)):
                if name + suffix in taken:
                    raise ParameterError(
                        f"cell_bounds := true would add the column '{name + suffix}', which table "
                        f"'{self.table.label}' already has; read the bounds variable '{array.path}' as a table instead"
                    )
                self._add_derived(k, DimValues(name + suffix, values, nulls), logical)
        if not found:
            raise ParameterError(
                f"cell_bounds := true adds the CF bounds of a table's coordinates, and no coordinate of table "
                f"'{self.table.label}' has a `bounds` attribute; read it without cell_bounds :="
            )

    def fingerprint(self) -> str:
        """Changes whenever the store's metadata or this table's columns change."""
        own = self._coordinate_arrays()
        owners = self.tree.chunk_arrays
        doc = {
            "store": self.store.url,
            # a snapshot: another thread opening a table of this store may add validators; the
            # chunks of other tables' coordinates are not this table's (they join the tree's
            # validators when those tables are read, and must not rename this table's scan)
            "validators": sorted(
                (k, v or "") for k, v in list(self.tree.validators.items()) if owners.get(k, "") in own
            ),
            "request": repr(self.request),
            "columns": [(c.name, c.logical) for c in self.columns],
            "shape": self.table.shape,
        }
        return hashlib.sha1(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()

    def _coordinate_arrays(self) -> set[str]:
        """The paths of the arrays this table's coordinate columns are decoded from, and ""
        (what a key that is no coordinate chunk belongs to, `NodeTree.chunk_arrays`)."""
        t = self.table
        paths = {a.path for a in t.coords if a is not None}
        paths |= {aux.array.path for aux in t.aux} | {index.rows.path for index in t.indexes}
        return paths | {""}

    def filterable(self) -> dict[str, str]:
        """Columns a pushed predicate may name, with their logical types: every dimension
        column (its coordinate values) and every derived coordinate."""
        out = {self.dims[k].name: self.dim_logical[k] for k in range(len(self.dims)) if k not in self.table.hidden}
        out.update({dv.name: logical for (_, dv), logical in zip(self.derived, self.derived_logical, strict=True)})
        out.update({aux[0]: logical for aux, logical in zip(self.aux, self.aux_logical, strict=True)})
        out.update(self.indexed.filterable())
        return out


class DenseScan(OpenedTable):
    """A table with one row per cell of its grid, read in work units of whole chunks."""

    rows_are_cells = True
    defers_coordinates = True
    #: `unit_columns` reads each column on its own, so a unit's columns may be read apart, in
    #: parallel (the reader does so for a scan's first unit).
    columns_apart = True

    def __init__(self, request: ReadRequest, tree: NodeTree, table: ReadTable, store: Store) -> None:
        # Shared by the reader's decoding threads: every access holds `_patterns_lock`.
        self._patterns: dict[Any, tuple[Any, Any]] = {}
        self._patterns_lock = threading.Lock()
        super().__init__(request, tree, table, store)

    def _make_codecs(self) -> list[Codec]:
        return [codec_for(dc.array, self.store, self.request.options) for dc in self.table.data]

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def plan(self, predicate: Predicate | None = None) -> ScanPlan | CellMaskedPlan:
        """Plan the work units for rows where `predicate` (and `bounds :=`) holds."""
        combined = conjoin((self.base_predicate, predicate))
        aliases = list(self.derived)
        if combined is not None and self.indexed.columns:  # columns a valid row index covers
            aliases += self.indexed.aliases(self.store, columns_of(combined))
        aux = {a[0] for a in self.aux}
        if combined is None or not aux:
            return plan_scan(self.table.shape, self.table.chunk_grid, self.dims, combined, aliases=aliases)
        # Conjuncts naming an auxiliary coordinate span several axes: the plan cannot split
        # them by axis, so each unit is masked by them (exactly) after the axes have pruned.
        on_axes = conjoin(c for c in conjuncts(combined) if not columns_of(c) & aux)
        on_cells = conjoin(c for c in conjuncts(combined) if columns_of(c) & aux)
        base = plan_scan(self.table.shape, self.table.chunk_grid, self.dims, on_axes, aliases=aliases)
        return base if on_cells is None else CellMaskedPlan(base, on_cells, self)

    def unit_columns(self, unit: WorkUnit, columns: Sequence[Column]) -> tuple[int, list[tuple[Any, Any]]]:
        """The unit's row count and (values, nulls) of each column, in `columns` order."""
        parts = []
        for col in columns:
            if col.dim is not None or col.derived is not None:
                parts.append(self._coordinate(col, unit))
            elif col.aux is not None:
                parts.append(self._aux_column(col.aux, unit))
            else:
                assert col.data is not None
                parts.append(self._data_column(col.data, unit))
        return unit.num_rows(), parts

    def _data_column(self, i: int, unit: WorkUnit) -> tuple[Any, Any]:
        """Data column `i` of a unit; a grouped unit's in the reader's order when the codec
        can decode it so (`InUngroupedOrder`: no reordering copy after)."""
        codec = self.codecs[i]
        if unit.merged > 1:
            ordered = getattr(codec, "read_in_chunk_order", None)
            got = None if ordered is None else ordered(self.store, unit, self.table.chunk_grid)
            if got is not None:
                return InUngroupedOrder(*got)
        return codec.read(self.store, unit)

    def streams_head(self, columns: Sequence[Column]) -> bool:
        """Whether the reader may hand out the first unit in two parts (`reader.head_and_rest`):
        every data column is a plain array whose chunks decode their leading rows as a
        stream and go on from there, so the split reads and decodes nothing twice."""
        return all(
            col.data is None
            or (isinstance(self.codecs[col.data], PlainCodec) and streams_leading_rows(self.codecs[col.data].array))
            for col in columns
        )

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

    def _aux_block(self, j: int, region: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, Any]:
        """Auxiliary coordinate `j` over `region`, broadcast to the region's shape.

        The index ends in `...` so that it always gives an array: a 0-d coordinate (xarray's
        scalar coordinate) indexed by `()` would give its one element, a Python str for a
        string coordinate, which has no `reshape`."""
        _, axes, values, nulls = self.aux[j]
        shape = tuple(b - a for a, b in region)
        index: tuple[slice | EllipsisType, ...] = (*(slice(*region[k]) for k in axes), Ellipsis)
        expand = tuple(shape[k] if k in axes else 1 for k in range(len(shape)))
        block = np.broadcast_to(values[index].reshape(expand), shape)
        mask = None if nulls is None else np.broadcast_to(nulls[index].reshape(expand), shape)
        return block, mask

    def _aux_column(self, j: int, unit: WorkUnit) -> tuple[Any, Any]:
        block, mask = self._aux_block(j, unit.region)
        return select_cells(block, unit), None if mask is None else select_cells(mask, unit)

    def cell_mask(self, predicate: Predicate, unit: WorkUnit) -> np.ndarray:
        """Where `predicate` is true over the cells of the unit's region (its selection
        ignored): every column it names broadcast to the region."""
        shape = tuple(b - a for a, b in unit.region)
        whole = WorkUnit(unit.index, unit.region, None)
        aux = {a[0]: j for j, a in enumerate(self.aux)}
        axes = {dv.name: (k, dv) for k, dv in enumerate(self.dims)}
        axes.update({dv.name: (k, dv) for k, dv in self.derived})

        def leaf(p: Any) -> Any:
            if p.column in aux:
                block, mask = self._aux_block(aux[p.column], unit.region)
                return leaf_truth(p, block.reshape(-1), None if mask is None else mask.reshape(-1))
            k, dv = axes[p.column]
            nulls = None if dv.nulls is None else expand_dim(dv.nulls, whole, k)
            return leaf_truth(p, expand_dim(dv.values, whole, k), nulls)

        truth, _ = evaluate(predicate, leaf)
        return np.asarray(truth).reshape(shape)

    @functools.cached_property
    def _repeating_axes(self) -> frozenset[int]:
        """The axes whose columns come back for another unit: those with more than one unit
        of the chunk grid across the other axes (time, the slowest axis of a store chunked by
        time, never repeats, and keeping its columns would only hold memory). Worked out once
        per scan: `_coordinate` asks for every unit and column."""
        counts = [-(-n // max(c, 1)) for n, c in zip(self.table.shape, self.table.chunk_grid, strict=True)]
        return frozenset(
            axis for axis in range(len(counts)) if int(np.prod(counts[:axis] + counts[axis + 1 :], dtype=np.int64)) > 1
        )

    def row_pieces(self, unit: WorkUnit, columns: Sequence[Column]) -> list[WorkUnit] | None:
        """The unit cut along its first axis into pieces of about `PIECE_ROWS` rows, in which
        the reader hands it over, or None to hand it over whole.

        Why: a coordinate of a later axis (latitude and longitude under time) is kept once per
        scan at the length of the batches that carry it (`_coordinate`). A unit of a day of
        hourly global fields is hundreds of thousands of rows, so each kept column would be
        megabytes; the column of a piece of a few hours is the start of that one (the first
        axis is the slowest) and a fraction of its size. The data columns are still decoded
        for the whole unit and only sliced, without copying, so nothing else changes. Only
        plain units are cut: a selection's or a grouped unit's rows are not contiguous runs
        of the first axis."""
        if unit.select is not None or unit.merged > 1 or len(unit.shape) < 2:
            return None
        if not any(axis and axis in self._repeating_axes for axis in map(self._axis_of, columns)):
            return None
        steps = self._piece_steps(unit.shape)
        (a, b), *others = unit.region
        if b - a <= steps:
            return None
        return [WorkUnit(unit.index, ((lo, min(b, lo + steps)), *others), None) for lo in range(a, b, steps)]

    def _axis_of(self, col: Column) -> int | None:
        """The axis a coordinate column (a dimension's or a derived one) runs along; None for
        any other column."""
        if col.dim is not None:
            return col.dim
        return None if col.derived is None else self.derived[col.derived][0]

    @staticmethod
    def _piece_steps(shape: tuple[int, ...]) -> int:
        """First-axis entries a piece of a unit of `shape` spans (`row_pieces`)."""
        return max(1, PIECE_ROWS // max(1, int(np.prod(shape[1:], dtype=np.int64))))

    def _coordinate(self, col: Column, unit: WorkUnit) -> tuple[Any, Any]:
        """A coordinate column of a unit. Units of one shape at one place along an axis give
        the same column (latitude and longitude repeat for every time block), so the last
        few are kept and handed out again instead of being rebuilt: the column depends only
        on the unit's range along its axis and the unit's shape, which is the key.

        Along any axis but the first, the column of a unit shorter along the first axis (the
        last time block) is the start of a longer unit's: the first axis is the slowest, so
        its length only says how often the same block repeats. Such units share one kept
        column (the longest), each taking its first rows, so a scan holds one copy of it. A
        grouped unit's column is kept in chunk order (`InUngroupedOrder`), where that prefix
        rule does not hold: it is shared only by units of its own shape.

        The reader's threads call this at once: the cache is only touched under its lock
        (the columns themselves are built outside it, and never written after)."""
        axis, dv = (col.dim, self.dims[col.dim]) if col.dim is not None else self.derived[col.derived]  # type: ignore[index]
        shared = unit.select is None and axis in self._repeating_axes
        key = None
        if shared:
            # a grouped unit's column is kept in chunk order, where a shorter unit's rows are
            # not a prefix of a longer one's: it shares only with units of its own shape
            prefix_shared = axis and unit.merged <= 1
            key = (col.name, unit.region[axis], unit.shape[1:] if prefix_shared else unit.shape, unit.merged > 1)
        n_rows = unit.num_rows()
        if key is not None:
            with self._patterns_lock:
                hit = self._patterns.pop(key, None)
                if hit is not None:
                    self._patterns[key] = hit  # the most recently used goes last
            if hit is not None and len(hit[0]) >= n_rows:
                if len(hit[0]) == n_rows:
                    return hit  # as kept: an InUngroupedOrder stays one
                return hit[0][:n_rows], _head(hit[1], n_rows)
        built = unit
        if key is not None and axis and unit.merged == 0:
            # the rest of a split first unit (`reader.head_and_rest`), when it is handed over
            # whole: built as long as the next unit's batches (a whole unit, or a piece of one,
            # `row_pieces`), so that they take their rows from the kept column instead of
            # building one more (two such columns alive at once)
            (a, b), *others = unit.region
            longest = min(self.table.chunk_grid[0], self._piece_steps(unit.shape))
            built = WorkUnit(unit.index, ((a, a + max(b - a, longest)), *others), None)
        nulls = None if dv.nulls is None else expand_dim(dv.nulls, built, axis)
        source = np.arange(len(dv.values), dtype=np.int32) if isinstance(col.logical, Labels) else dv.values
        made: tuple[Any, Any] = (expand_dim(source, built, axis), nulls)
        reorder = ungrouped_order(unit, self.table.chunk_grid) if unit.merged > 1 else None
        if reorder is not None and unit.select is None:  # reordered once, kept in that order
            made = InUngroupedOrder(reorder.apply(made[0]), None if nulls is None else reorder.apply(nulls))
        if key is not None:
            with self._patterns_lock:
                kept = self._patterns.get(key)
                if kept is None or len(kept[0]) < len(made[0]):
                    self._patterns[key] = made
                while len(self._patterns) > PATTERNS_KEPT:
                    del self._patterns[next(iter(self._patterns))]
        return made if built is unit else (made[0][:n_rows], _head(made[1], n_rows))


def _head(nulls: Any, n: int) -> Any:
    return None if nulls is None else nulls[:n]


class CellMaskedPlan:
    """A dense plan whose units are further masked by a predicate over their cells (one
    naming an auxiliary coordinate); a unit where it holds nowhere is not read."""

    def __init__(self, base: ScanPlan, predicate: Predicate, scan: DenseScan) -> None:
        self.base = base
        self.predicate = predicate
        self.scan = scan

    @property
    def units_total(self) -> int:
        return self.base.units_total

    def units(self) -> Iterator[WorkUnit]:
        for unit in self.base.units():
            mask = self.scan.cell_mask(self.predicate, unit)
            sel = unit.select
            if isinstance(sel, np.ndarray):
                mask &= sel
            elif sel is not None:
                keep = np.zeros(mask.shape, dtype=bool)
                keep[
                    np.ix_(*[np.arange(b - a) if i is None else i for i, (a, b) in zip(sel, unit.region, strict=True)])
                ] = True
                mask &= keep
            if mask.any():
                yield WorkUnit(unit.index, unit.region, None if mask.all() else mask)

    def rows(self) -> int | None:
        return None
