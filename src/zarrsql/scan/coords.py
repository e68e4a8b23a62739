"""A table's axis columns: coordinates loaded and decoded once per tree, derived columns,
and the presentations a read asks for (longitude range, cell bounds).

Everything here works on whole 1-D axes (a coordinate's values, a bounds variable's pairs),
never on chunks of data: the results are cached with the node tree where they depend only
on the store's metadata and the decode options.

The chunks a cached result is decoded from join the tree's validators (`_record`), with a
local store's tokens taken BEFORE the chunks are read (`_read_with_tokens`): a chunk rewritten
in between is then kept under its older token and decoded again by the next query, where a
token taken after the read would keep the old values under the new token for as long as the
process lives.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import numpy as np

from zarrsql.decode.chunks import decode_chunk, fast_path, read_region
from zarrsql.decode.columns import DecodeOptions, column_codec, type_needs_values
from zarrsql.errors import MetadataError, UnsupportedError, ZarrSQLError
from zarrsql.metadata.arrays import ArrayMeta
from zarrsql.metadata.tree import NodeTree
from zarrsql.plan.units import DimValues
from zarrsql.store import Store
from zarrsql.tables.model import Derived

T = TypeVar("T")


def _coord_chunks(array: ArrayMeta) -> list[str]:
    return [array.chunk_key((i,)) for i in range(-(-array.shape[0] // array.chunks[0]) if array.shape[0] else 0)]


def _read_with_tokens(store: Store, keys: Sequence[str], read: Callable[[], T]) -> tuple[list[str | None], T]:
    """`read()` (of the chunks `keys`) and the keys' tokens: taken before the read on a local
    store (the module docstring); after it on a remote one, whose tokens come with the reads'
    responses (ETags), where asking first would cost a request per key."""
    if getattr(store, "remote", False):
        got = read()
        return store.token_many(keys), got
    tokens = store.token_many(keys)
    return tokens, read()


def _record(tree: NodeTree, keys: Sequence[str], tokens: Sequence[str | None], owners: Sequence[str]) -> None:
    """The chunks `keys` (of the arrays `owners`) as validators of the tree, with the tokens
    taken before they were read (the module docstring)."""
    for k, token, owner in zip(keys, tokens, owners, strict=True):
        tree.validators[k] = token
        tree.chunk_arrays[k] = owner


def prefetch_coords(
    tree: NodeTree, store: Store, arrays: Sequence[ArrayMeta], options: DecodeOptions
) -> dict[str, bytes | None]:
    """Every chunk of the coordinates not yet decoded, fetched together (one round of
    concurrent requests on a remote store), with their tokens for revalidation."""
    todo = [a for a in arrays if ("coord", a.path, options) not in tree.derived and fast_path(a)]
    keys = [k for a in todo for k in _coord_chunks(a)]
    if not keys:
        return {}
    # A coordinate rewritten in place (chunks only) must not be served from the cache: its
    # chunk keys join the documents the cached tree is revalidated against.
    tokens, raws = _read_with_tokens(store, keys, lambda: store.get_many(keys))
    _record(tree, keys, tokens, [a.path for a in todo for _ in _coord_chunks(a)])
    return dict(zip(keys, raws, strict=True))


def load_coord(
    tree: NodeTree, store: Store, array: ArrayMeta, options: DecodeOptions, fetched: dict[str, bytes | None]
) -> tuple[DimValues, str]:
    key = ("coord", array.path, options)
    hit = tree.derived.get(key)
    if hit is None:
        keys = _coord_chunks(array)
        if keys and all(k in fetched for k in keys):
            raw = np.concatenate([decode_chunk(array, fetched[k], k, store.url) for k in keys])[: array.shape[0]]
        else:
            tokens, raw = _read_with_tokens(store, keys, lambda: read_region(store, array, ((0, array.shape[0]),)))
            _record(tree, keys, tokens, [array.path] * len(keys))
        codec = column_codec(array, options, is_coord=True, coord_values=raw)
        values, nulls = codec.decode(raw)
        hit = (DimValues(array.name, np.ascontiguousarray(values), nulls), codec.logical)
        tree.derived[key] = hit
    return cast("tuple[DimValues, str]", hit)  # what this function stored under `key`


def defers(array: ArrayMeta, options: DecodeOptions) -> bool:
    """Whether a coordinate's column type is known without its values, so that they may be
    read when first used (`DeferredCoords`). Labels (strings) take their dictionary from the
    values, and a CF time in the 360_day, all_leap or julian calendar decodes only if every
    value is a real date; any other coordinate's type comes from its metadata alone."""
    numeric = array.dtype.kind in ("int", "uint", "float", "datetime", "timedelta")
    return numeric and fast_path(array) and not type_needs_values(array, options)


class DeferredCoords:
    """A remote table's coordinates, read together when a scan first needs one of them.

    Reading them in the bind would put a round trip before any data request, even for a
    query that outputs no coordinate and filters on none (`avg(t2m)`). Deferred, they are
    read by the first use of their values (`DimValues.deferred`): a plan with a predicate on
    them reads them before any unit (as the bind did), and a scan that outputs one starts
    them in the background (`start`) while its first unit is fetched. The values are those
    the bind would have read (`load_coord`, cached with the tree the same way)."""

    def __init__(self, tree: NodeTree, store: Store, arrays: Sequence[ArrayMeta], options: DecodeOptions) -> None:
        self._tree, self._store, self._arrays, self._options = tree, store, list(arrays), options
        self._lock = threading.Lock()
        self._done: dict[str, DimValues] | None = None
        self._started = False
        self._failed: ZarrSQLError | None = None  # the background read's failure, raised once
        self._tried = False

    def dim(self, name: str, array: ArrayMeta) -> DimValues:
        """The dimension `name`'s values, from coordinate `array`, read when first used."""
        return DimValues.deferred(name, lambda: self._values(array.path))

    def _values(self, path: str) -> tuple[np.ndarray, np.ndarray | None]:
        dv = self._all()[path]
        assert isinstance(dv.values, np.ndarray), "a coordinate's values, never positions"
        return dv.values, dv.nulls

    def _all(self, background: bool = False) -> dict[str, DimValues]:
        with self._lock:  # one read for all of them, whichever thread asks first
            if self._done is None:
                if background and self._tried:
                    return {}  # a use read them first (and failed): nothing to read ahead
                self._tried = True
                failed, self._failed = self._failed, None
                if failed is not None:  # read again now, it would fail again (after its retries)
                    raise failed.with_traceback(None)
                tree, store, options = self._tree, self._store, self._options
                try:
                    fetched = prefetch_coords(tree, store, self._arrays, options)
                    self._done = {a.path: load_coord(tree, store, a, options, fetched)[0] for a in self._arrays}
                except ZarrSQLError as err:
                    if background:  # kept under the lock: a use waiting on it must not read again
                        self._failed = err
                    raise
            return self._done

    def start(self) -> None:
        """Begin reading them on a thread of their own (once), for a scan about to need them.
        A failure there is kept for the next use of the values, which raises it rather than
        reading the chunks again; the use after that reads again (the store may be mended)."""
        with self._lock:
            if self._started or self._done is not None:
                return
            self._started = True
        threading.Thread(target=self._quietly, name="zarrsql-coords", daemon=True).start()

    def _quietly(self) -> None:
        # a ZarrSQLError is kept for the next use (`_all`); anything else, the use reads again
        # and meets it there
        with contextlib.suppress(Exception):
            self._all(background=True)


def derived_values(d: Derived, n: int) -> tuple[DimValues, str]:
    """A derived column's values along its axis and their logical type: labels (NULL where
    a label is missing) or `position * scale + offset`."""
    if d.labels is not None:
        values = np.array([label or "" for label in d.labels], dtype=object)
        missing = np.array([label is None for label in d.labels], dtype=bool)
        return DimValues(d.name, values, missing if missing.any() else None), "string"
    positions = np.arange(n, dtype=np.float64)
    return DimValues(d.name, positions * d.scale + d.offset, None), "float64"


#: CF spellings of longitude units (CF conventions, section 4.2), compared lower-cased.
LONGITUDE_UNITS = frozenset({"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"})


def is_longitude(array: ArrayMeta) -> bool:
    """A longitude coordinate by CF: `standard_name` longitude or units in degrees east."""
    units = array.attrs.get("units")
    return array.attrs.get("standard_name") == "longitude" or (
        isinstance(units, str) and units.strip().lower() in LONGITUDE_UNITS
    )


def wrap_longitude(values: np.ndarray, setting: int) -> np.ndarray:
    """Longitudes moved into [-180, 180) (`setting` 180) or [0, 360) (360), keeping the type.

    NaN stays NaN (a NULL coordinate is masked apart). `np.mod` of a tiny negative number can
    round up to the divisor itself, so values at the top end are folded once more."""
    if values.dtype.kind not in "iuf":
        return values
    low = -180 if setting == 180 else 0
    out = np.mod(values - low, 360) + low
    with np.errstate(invalid="ignore"):
        out = np.where(out >= low + 360, out - 360, out)
    return out.astype(values.dtype, copy=False)


def bounds_array(tree: NodeTree, coord: ArrayMeta) -> ArrayMeta | None:
    """The CF bounds variable a coordinate names (`bounds` attribute, same group), with the
    coordinate's `units` and `calendar` where it has none (CF 7.1: bounds inherit them)."""

    name = coord.attrs.get("bounds")
    if not isinstance(name, str) or not name:
        return None
    parent = coord.path.rpartition("/")[0]
    path = f"{parent}/{name}" if parent else name
    found = tree.arrays.get(path) if path in tree.arrays else None
    if not isinstance(found, ArrayMeta):
        raise MetadataError(
            f"coordinate '{coord.path}' names the bounds variable '{name}', which is not a readable array of "
            "its group; fix the store's `bounds` attribute or read without cell_bounds := true"
        )
    if found.shape != (coord.shape[0], 2):
        raise MetadataError(
            f"the bounds variable '{path}' of coordinate '{coord.path}' has shape {list(found.shape)}, "
            f"expected [{coord.shape[0]}, 2] (one lower and one upper bound per value)"
        )
    inherited = {k: coord.attrs[k] for k in ("units", "calendar") if k in coord.attrs and k not in found.attrs}
    return replace(found, attrs={**found.attrs, **inherited}) if inherited else found


def load_bounds(
    tree: NodeTree, store: Store, array: ArrayMeta, options: DecodeOptions
) -> tuple[DimValues, DimValues, str]:
    """A bounds variable's lower and upper columns, decoded as its coordinate is (cached)."""
    key = ("bounds", array.path, options)
    hit = tree.derived.get(key)
    if hit is None:
        n = array.shape[0]
        keys = [
            array.chunk_key((i, j)) for i in range(-(-n // array.chunks[0])) for j in range(-(-2 // array.chunks[1]))
        ]
        tokens, raw = _read_with_tokens(store, keys, lambda: read_region(store, array, ((0, n), (0, 2))))
        for k, token in zip(keys, tokens, strict=True):
            tree.validators.setdefault(k, token)
        codec = column_codec(array, options, is_coord=True, coord_values=raw.reshape(-1))
        values, nulls = codec.decode(raw.reshape(-1))
        values = np.asarray(values).reshape(n, 2)
        nulls = None if nulls is None else np.asarray(nulls).reshape(n, 2)
        # CF stores a cell's two bounds in the axis' own order: (90, 80) on a descending axis
        swap = values[:, 0] > values[:, 1]
        if swap.any():
            values = np.where(swap[:, None], values[:, ::-1], values)
            nulls = None if nulls is None else np.where(swap[:, None], nulls[:, ::-1], nulls)
        lower = DimValues("lower", np.ascontiguousarray(values[:, 0]), None if nulls is None else nulls[:, 0].copy())
        upper = DimValues("upper", np.ascontiguousarray(values[:, 1]), None if nulls is None else nulls[:, 1].copy())
        hit = (lower, upper, codec.logical)
        tree.derived[key] = hit
    return cast("tuple[DimValues, DimValues, str]", hit)


#: The most cells of an auxiliary coordinate a scan holds decoded (it is read whole, once).
MAX_AUX_CELLS = 2**27


def load_aux(
    tree: NodeTree, store: Store, array: ArrayMeta, options: DecodeOptions, characters: str | None = None
) -> tuple[np.ndarray, Any, str]:
    """An auxiliary coordinate read whole and decoded, in the array's own axis order:
    (values, nulls or None, logical type), cached with the tree like a coordinate. A CF
    character array (`characters`, its text encoding) is joined along its last axis into one
    string per cell of the others, as its data-variable reading does (`decode.characters`)."""
    key = ("aux", array.path, options, characters)
    hit = tree.derived.get(key)
    if hit is None:
        cells = int(np.prod(array.shape, dtype=np.int64))
        if cells > MAX_AUX_CELLS:
            raise UnsupportedError(
                f"the auxiliary coordinate '{array.path}' has {cells} cells, more than the {MAX_AUX_CELLS} a scan "
                "holds decoded; read its table with the data variables only (array_path := ...)"
            )
        grid = tuple(-(-n // c) for n, c in zip(array.shape, array.chunks, strict=True))
        keys = [array.chunk_key(idx) for idx in np.ndindex(*grid)]
        tokens, raw = _read_with_tokens(
            store, keys, lambda: read_region(store, array, tuple((0, n) for n in array.shape))
        )
        _record(tree, keys, tokens, [array.path] * len(keys))
        if characters is not None:
            hit = _joined_text(array, np.asarray(raw), characters)
        else:
            flat = np.asarray(raw).reshape(-1)
            codec = column_codec(array, options, is_coord=True, coord_values=flat)
            values, nulls = codec.decode(flat)
            values = np.asarray(values).reshape(array.shape)
            nulls = None if nulls is None else np.asarray(nulls).reshape(array.shape)
            hit = (values, nulls, codec.logical)
        tree.derived[key] = hit
    return cast("tuple[np.ndarray, Any, str]", hit)


def _joined_text(array: ArrayMeta, raw: np.ndarray, encoding: str) -> tuple[np.ndarray, Any, str]:
    """A character array's cells joined into text, with the cells its sentinels mark as nulls."""
    from zarrsql.conventions.records import CharacterArray
    from zarrsql.decode.characters import character_codec, join_characters

    codec = character_codec(CharacterArray(array, encoding))  # refuses an unknown encoding by name
    text, nulls = codec.text(join_characters(raw))
    return text, nulls, "string"
