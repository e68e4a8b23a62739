"""Reference ("oracle") results for zarrsql tests.

Everything here computes EXPECTED results with xarray, pandas, numpy (and
zarr-python for plain metadata/array reads) only.  It must never import
zarrsql: an oracle that shares code with the thing under test cannot catch its
bugs.

The contract of a zarrsql table is "one row per element of the broadcast of
the variables over a dimension set, in row-major order of the dimensions";
``xarray_frame`` produces exactly that from xarray, which is the reference
reader for CF decoding (masking, scaling, time decoding).

Typical use::

    from oracles import assert_frames_equal, xarray_frame

    expected = xarray_frame(fixture_path("air_temperature.zarr"), variables=["air"])
    actual = conn.sql("SELECT * FROM air_temperature").df()
    assert_frames_equal(actual, expected, rtol={"air": 1e-12})
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import struct
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "array_dims",
    "assert_frames_equal",
    "nan_to_null",
    "raw_frame",
    "xarray_frame",
]


@contextmanager
def _quiet() -> Iterator[None]:
    """xarray warns while decoding odd-but-valid fixtures (cftime fallback,
    multiple fill values, NaN casts).  pytest turns warnings into errors, and an
    oracle must not fail because the *reference reader* is chatty."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# --------------------------------------------------------------------------
# metadata
# --------------------------------------------------------------------------


def array_dims(path: str | Path, group: str | None = None) -> dict[str, tuple[str, ...] | None]:
    """Map each array of ``group`` to its dimension names (``None`` if unnamed).

    Why: ``xarray_frame`` must know the dimensions of every array *before*
    opening with xarray, so that it can drop the arrays it does not need
    (xarray refuses a whole group if any one variable cannot be decoded, e.g.
    ``months since`` in times.zarr or a v3 array without dimension names).
    Reads v3 ``dimension_names`` and the v2 ``_ARRAY_DIMENSIONS`` attribute.
    """
    import zarr

    with _quiet():
        g = zarr.open_group(str(path), path=group or "", mode="r")
        out: dict[str, tuple[str, ...] | None] = {}
        for name, arr in g.arrays():
            dims = None
            if arr.metadata.zarr_format == 3:
                names = arr.metadata.dimension_names
                if names is not None and all(n is not None for n in names):
                    dims = tuple(names)
                elif arr.ndim == 0:
                    dims = ()
            else:
                names = arr.attrs.get("_ARRAY_DIMENSIONS")
                if names is not None:
                    dims = tuple(names)
                elif arr.ndim == 0:
                    dims = ()
            out[name] = dims
    return out


def _resolve(
    arrays: Mapping[str, tuple[str, ...] | None],
    variables: str | Sequence[str] | None,
    dims: Sequence[str] | None,
) -> tuple[list[str], tuple[str, ...]]:
    if isinstance(variables, str):
        variables = [variables]
    if variables is not None:
        missing = [v for v in variables if v not in arrays]
        if missing:
            raise KeyError(f"no such arrays: {missing}; have {sorted(arrays)}")
    if dims is None and not variables:
        # neither given: fine only if the group has a single dimension set
        def is_value(name: str, d: tuple[str, ...] | None) -> bool:
            return d is not None and not (len(d) == 1 and name == d[0])

        all_dims = {tuple(sorted(d)) for name, d in arrays.items() if is_value(name, d)}
        if len(all_dims) != 1:
            raise ValueError(f"dimension sets {sorted(all_dims)}: give `variables` or `dims`")
        variables = [name for name, d in arrays.items() if is_value(name, d)]
    if dims is None:
        assert variables
        first = arrays[variables[0]]
        if first is None:
            raise ValueError(f"{variables[0]!r} has no dimension names; pass dims=")
        dims = first
    dims = tuple(dims)
    if variables is None:
        variables = [
            name
            for name, d in arrays.items()
            if d is not None and set(d) == set(dims) and len(d) == len(dims)
            and not (len(d) == 1 and name == d[0])
        ]
    else:
        for v in variables:
            d = arrays[v]
            if d is None or set(d) != set(dims) or len(d) != len(dims):
                raise ValueError(f"{v!r} has dims {d}, not the dimension set {dims}")
    # the dimension coordinates are the index columns, never value columns
    variables = [v for v in variables if v not in dims]
    return list(variables), dims


# --------------------------------------------------------------------------
# xarray oracle
# --------------------------------------------------------------------------


def xarray_frame(
    path: str | Path,
    group: str | None = None,
    variables: str | Sequence[str] | None = None,
    *,
    dims: Sequence[str] | None = None,
    decode_times: bool = True,
) -> pd.DataFrame:
    """The table xarray says a dimension set should produce.

    Equivalent to ``xr.open_zarr(path, group=group, consolidated=None,
    decode_times=decode_times, mask_and_scale=True)[variables]
    .to_dataframe().reset_index()`` restricted to one dimension set:

    * ``dims`` (ordered) is the dimension set; rows come in row-major order of
      ``dims`` (the last dimension varies fastest).  Default: the dims of the
      first variable.
    * ``variables`` default to every array (data variable *or* non-index
      coordinate such as ``lat2d``) whose dimension set equals ``dims``.
    * Columns are ``[*dims, *variables]``.  A dimension without a coordinate
      array becomes a 0-based positional integer column, as in xarray.
    * A 0-d variable set (``dims=()``) gives a single row.
    * Every other array of the group is dropped before decoding, so a broken
      or undecodable neighbour (``t_months``, unnamed arrays) cannot spoil it.

    Why xarray: it is the reference implementation of CF decoding
    (``_FillValue``/``missing_value`` masking, ``scale_factor``/``add_offset``,
    CF time decoding), which zarrsql promises to match.
    """
    import xarray as xr

    arrays = array_dims(path, group)
    variables, dims = _resolve(arrays, variables, dims)
    keep = set(variables) | {d for d in dims if d in arrays}
    drop = [name for name in arrays if name not in keep]
    with _quiet():
        ds = xr.open_zarr(
            str(path),
            group=group,
            consolidated=None,
            decode_times=decode_times,
            mask_and_scale=True,
            chunks=None,
            drop_variables=drop,
        )
        sub = ds[variables] if variables else ds[[]]
        if not dims:
            frame = pd.DataFrame({v: [sub[v].values[()]] for v in variables})
        else:
            for d in dims:
                if d not in sub.coords and d not in sub.dims:
                    raise ValueError(f"dimension {d!r} not present")
            frame = sub.to_dataframe(dim_order=list(dims)).reset_index()
        frame = frame[[*dims, *variables]]
        ds.close()
    return frame.reset_index(drop=True)


# --------------------------------------------------------------------------
# numpy oracle for stores xarray cannot open
# --------------------------------------------------------------------------


def _cf_number(value: Any, dtype: np.dtype) -> Any:
    """A CF attribute value as a number: v3 xarray stores float fills in base64."""
    if isinstance(value, str) and dtype.kind == "f":
        try:
            return struct.unpack("<d", base64.standard_b64decode(value))[0]
        except (ValueError, struct.error):
            return float(value)  # "NaN", "Infinity", ...
    return value


def raw_frame(
    path: str | Path,
    group: str | None = None,
    variables: str | Sequence[str] | None = None,
    *,
    dims: Sequence[str] | None = None,
    mask_and_scale: bool = True,
    zarr_fill_as_mask: bool = False,
) -> pd.DataFrame:
    """Like :func:`xarray_frame` but decoded by hand with numpy, no time decoding.

    Why: some fixtures are deliberately outside what xarray reads — e.g. the
    raw v3 ``missing.zarr`` stores ``_FillValue: -9999.0`` as a JSON number,
    which xarray's v3 reader rejects (it expects base64).  This oracle applies
    the CF rules literally: values equal to ``_FillValue`` or any
    ``missing_value`` (NaN matches NaN) become NULL, then
    ``value * scale_factor + add_offset`` in float64 when either is present.
    The Zarr ``fill_value`` is a mask only with ``zarr_fill_as_mask=True``
    (xarray's v2 behaviour).  Dimension coordinates are read raw.
    """
    import zarr

    arrays = array_dims(path, group)
    variables, dims = _resolve(arrays, variables, dims)
    with _quiet():
        g = zarr.open_group(str(path), path=group or "", mode="r")
        columns: dict[str, np.ndarray] = {}
        sizes: list[int] | None = None
        for v in variables:
            arr = g[v]
            data = np.asarray(arr[...]).transpose([arrays[v].index(d) for d in dims])
            sizes = list(data.shape)
            if mask_and_scale:
                zarr_fill = arr.fill_value if zarr_fill_as_mask else None
                data = _cf_decode(data, dict(arr.attrs), zarr_fill)
            columns[v] = data.reshape(-1)
        if sizes is None:  # no value columns: the dimension coordinates alone
            sizes = [g[d].shape[0] for d in dims]
        index_cols: dict[str, np.ndarray] = {}
        grids = np.meshgrid(*[np.arange(n) for n in sizes], indexing="ij")
        for d, grid in zip(dims, grids, strict=True):
            coord = np.asarray(g[d][...]) if d in arrays else np.arange(grid.shape[dims.index(d)])
            index_cols[d] = coord[grid.reshape(-1)]
    return pd.DataFrame({**index_cols, **columns})


def _cf_decode(data: np.ndarray, attrs: dict, zarr_fill: Any = None) -> np.ndarray:
    """CF mask-and-scale by the book (see :func:`raw_frame`)."""
    sentinels = []
    for key in ("_FillValue", "missing_value"):
        val = attrs.get(key)
        if val is not None:
            for x in val if isinstance(val, list) else [val]:
                sentinels.append(_cf_number(x, data.dtype))
    if zarr_fill is not None:
        sentinels.append(zarr_fill)
    mask = np.zeros(data.shape, dtype=bool)
    for s in sentinels:
        if isinstance(s, float | np.floating) and np.isnan(s):
            if data.dtype.kind == "f":
                mask |= np.isnan(data)
        else:
            mask |= data == s
    scale, offset = attrs.get("scale_factor"), attrs.get("add_offset")
    if scale is not None or offset is not None:
        data = data.astype(np.float64)
        if scale is not None:
            data = data * float(scale)
        if offset is not None:
            data = data + float(offset)
    if mask.any():
        if data.dtype.kind != "f":
            data = data.astype(np.float64)
        data = np.where(mask, np.nan, data)
    return data


# --------------------------------------------------------------------------
# NULL handling
# --------------------------------------------------------------------------


def nan_to_null(df: pd.DataFrame) -> pd.DataFrame:
    """Copy of ``df`` where NaN/NaT/NA become ``None`` (columns become object).

    Why: SQL has one NULL while pandas has NaN, NaT, None and pd.NA depending
    on the dtype.  Converting both sides to ``None`` lets tests compare against
    ``fetchall()`` tuples or print readable diffs.  Columns without nulls are
    left untouched.
    """
    out = df.copy()
    for name in out.columns:
        col = out[name]
        mask = pd.isna(col).to_numpy()
        if mask.any():
            values = col.astype(object).to_numpy(copy=True)
            values[mask] = None
            out[name] = pd.Series(values, index=col.index, dtype=object)
    return out


# --------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------


@dataclass
class _Col:
    kind: str  # int float bool datetime cfdatetime timedelta str bytes object
    values: np.ndarray
    null: np.ndarray


_NUMERIC = {"int", "float", "bool"}


def _is_cftime(x: Any) -> bool:
    return type(x).__module__.startswith("cftime")


def _dt_tuple(x: Any) -> tuple:
    return (x.year, x.month, x.day, x.hour, x.minute, x.second, x.microsecond)


def _to_us(x: Any) -> np.datetime64:
    if isinstance(x, pd.Timestamp):
        if x.tzinfo is not None:
            x = x.tz_convert("UTC").tz_localize(None)
        return x.to_datetime64().astype("datetime64[us]")
    if isinstance(x, np.datetime64):
        return x.astype("datetime64[us]")
    if isinstance(x, _dt.datetime):
        if x.tzinfo is not None:
            x = x.astimezone(_dt.UTC).replace(tzinfo=None)
        return np.datetime64(x, "us")
    if isinstance(x, _dt.date):
        return np.datetime64(_dt.datetime(x.year, x.month, x.day), "us")
    raise TypeError(type(x))


def _td_us(x: Any) -> np.timedelta64:
    if isinstance(x, pd.Timedelta):
        return x.to_timedelta64().astype("timedelta64[us]")
    if isinstance(x, np.timedelta64):
        return x.astype("timedelta64[us]")
    return np.timedelta64(x, "us")


def _classify_objects(values: list) -> str:
    if not values:
        return "object"
    types = set()
    for x in values:
        if isinstance(x, bool | np.bool_):
            types.add("bool")
        elif isinstance(x, int | np.integer):
            types.add("int")
        elif isinstance(x, float | np.floating | decimal.Decimal):
            types.add("float")
        elif isinstance(x, str):
            types.add("str")
        elif isinstance(x, bytes | bytearray | memoryview):
            types.add("bytes")
        elif _is_cftime(x):
            types.add("cfdatetime")
        elif isinstance(x, _dt.datetime | _dt.date | np.datetime64):
            types.add("datetime")
        elif isinstance(x, _dt.timedelta | np.timedelta64):
            types.add("timedelta")
        else:
            types.add("object")
    if len(types) == 1:
        return types.pop()
    if types <= {"int", "float"}:
        return "float"
    if types <= {"datetime", "cfdatetime"}:
        return "cfdatetime"
    return "object"


def _normalize(series: pd.Series) -> _Col:
    null = np.asarray(pd.isna(series), dtype=bool)
    dtype = series.dtype
    n = len(series)
    if isinstance(dtype, pd.DatetimeTZDtype):
        s = series.dt.tz_convert("UTC").dt.tz_localize(None)
        return _Col("datetime", s.to_numpy().astype("datetime64[us]"), null)
    if pd.api.types.is_bool_dtype(dtype) and not null.any():
        return _Col("bool", series.to_numpy(dtype=bool), null)
    if dtype.kind == "M":
        return _Col("datetime", series.to_numpy().astype("datetime64[us]"), null)
    if dtype.kind == "m":
        return _Col("timedelta", series.to_numpy().astype("timedelta64[us]"), null)
    if pd.api.types.is_integer_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
        vals = np.empty(n, dtype=object)
        raw = series.to_numpy(dtype=object)
        for k in range(n):
            vals[k] = None if null[k] else int(raw[k])
        return _Col("int", vals, null)
    if pd.api.types.is_float_dtype(dtype):
        return _Col("float", series.to_numpy(dtype=np.float64, na_value=np.nan), null)
    # object, string and other extension dtypes: look at the Python values
    raw = series.to_numpy(dtype=object)
    present = [raw[k] for k in range(n) if not null[k]]
    kind = _classify_objects(present)
    if kind in ("int", "bool"):
        vals = np.empty(n, dtype=object)
        for k in range(n):
            vals[k] = None if null[k] else int(raw[k])
        return _Col(kind, vals, null)
    if kind == "float":
        vals = np.full(n, np.nan)
        for k in range(n):
            if not null[k]:
                vals[k] = float(raw[k])
        return _Col("float", vals, null)
    if kind == "datetime":
        vals = np.full(n, np.datetime64("NaT"), dtype="datetime64[us]")
        for k in range(n):
            if not null[k]:
                vals[k] = _to_us(raw[k])
        return _Col("datetime", vals, null)
    if kind == "cfdatetime":
        vals = np.empty(n, dtype=object)
        for k in range(n):
            if not null[k]:
                x = raw[k]
                if isinstance(x, np.datetime64):
                    x = pd.Timestamp(x)
                vals[k] = _dt_tuple(x)
        return _Col("cfdatetime", vals, null)
    if kind == "timedelta":
        vals = np.full(n, np.timedelta64("NaT"), dtype="timedelta64[us]")
        for k in range(n):
            if not null[k]:
                vals[k] = _td_us(raw[k])
        return _Col("timedelta", vals, null)
    if kind == "bytes":
        vals = np.empty(n, dtype=object)
        for k in range(n):
            vals[k] = None if null[k] else bytes(raw[k])
        return _Col("bytes", vals, null)
    if kind == "str":
        vals = np.empty(n, dtype=object)
        for k in range(n):
            vals[k] = None if null[k] else str(raw[k])
        return _Col("str", vals, null)
    return _Col(kind, raw, null)


def _to_cf_tuples(col: _Col) -> _Col:
    if col.kind == "cfdatetime":
        return col
    vals = np.empty(len(col.values), dtype=object)
    for k, x in enumerate(col.values):
        if not col.null[k]:
            vals[k] = _dt_tuple(pd.Timestamp(x).to_pydatetime())
    return _Col("cfdatetime", vals, col.null)


def _sort_key(col: _Col) -> pd.Series:
    """A sortable Series for a normalized column (NULLs sort last)."""
    if col.kind in ("float", "datetime", "timedelta"):
        return pd.Series(col.values)
    values = np.where(col.null, None, col.values)
    return pd.Series(values, dtype=object)


def _lexsort_order(cols: Sequence[_Col]) -> np.ndarray:
    n = len(cols[0].values) if cols else 0
    frame = pd.DataFrame({f"k{i}": _sort_key(c) for i, c in enumerate(cols)})
    order = frame.assign(_pos=np.arange(n)).sort_values(
        [f"k{i}" for i in range(len(cols))], na_position="last", kind="mergesort"
    )["_pos"]
    return order.to_numpy()


def _as_frame(obj: Any) -> pd.DataFrame:
    if isinstance(obj, pd.DataFrame):
        return obj
    for attr in ("df", "to_pandas", "fetchdf"):
        fn = getattr(obj, attr, None)
        if callable(fn):
            return fn()
    return pd.DataFrame(obj)


def assert_frames_equal(
    actual: Any,
    expected: pd.DataFrame,
    *,
    sort_by: str | Sequence[str] | None = None,
    rtol: float | Mapping[str, float] = 0.0,
    check_column_order: bool = True,
    max_report: int = 10,
) -> None:
    """Assert two tables hold the same data under SQL semantics.

    * Column names must match (in order unless ``check_column_order=False``),
      and the row counts must match.
    * ``sort_by``: sort both sides by these columns first (NULLs last); without
      it, row order is part of the contract (row-major scan order).
    * NULL: NaN, None, NaT and pd.NA are all the same SQL NULL, and a NULL
      must face a NULL.
    * Numbers: ints are compared exactly as Python ints (uint64 safe); when
      either side is floating, both are compared as float64 with *exact*
      equality, because a scan of float32/float64 data must be bit-exact with
      xarray (float32 widens to float64 exactly).  Give ``rtol`` (a float or
      ``{column: rtol}``) for values that were computed, e.g. unpacked
      ``int * scale_factor + add_offset`` doubles (use ``1e-12``).
    * Timestamps are compared as ``datetime64[us]`` (DuckDB's TIMESTAMP
      resolution; tz-aware values are converted to UTC first); timedeltas as
      ``timedelta64[us]``.  cftime objects (non-standard calendars) are
      compared field by field (year, month, ..., microsecond).
    * Strings and bytes compare with ``==`` and are not interchangeable.

    ``actual`` may also be a DuckDB relation or pyarrow table (anything with
    ``.df()``, ``.to_pandas()`` or ``.fetchdf()``).
    """
    actual = _as_frame(actual)
    a_cols = [str(c) for c in actual.columns]
    e_cols = [str(c) for c in expected.columns]
    if check_column_order:
        assert a_cols == e_cols, f"columns differ:\n  actual:   {a_cols}\n  expected: {e_cols}"
    else:
        assert sorted(a_cols) == sorted(e_cols), (
            f"column sets differ:\n  actual:   {sorted(a_cols)}\n  expected: {sorted(e_cols)}"
        )
        actual = actual[list(expected.columns)]
    assert len(actual) == len(expected), (
        f"row counts differ: actual {len(actual)}, expected {len(expected)}"
    )
    names = list(expected.columns)
    a_norm = {c: _normalize(actual[c].reset_index(drop=True)) for c in names}
    e_norm = {c: _normalize(expected[c].reset_index(drop=True)) for c in names}
    # align kinds before sorting/comparing
    for c in names:
        a, e = a_norm[c], e_norm[c]
        if {a.kind, e.kind} <= {"datetime", "cfdatetime"} and a.kind != e.kind:
            a_norm[c], e_norm[c] = _to_cf_tuples(a), _to_cf_tuples(e)
        elif a.kind in _NUMERIC and e.kind in _NUMERIC and "float" in (a.kind, e.kind):
            for side in (a_norm, e_norm):
                col = side[c]
                if col.kind != "float":
                    pairs = zip(col.values, col.null, strict=True)
                    vals = np.array([np.nan if m else float(v) for v, m in pairs], dtype=np.float64)
                    side[c] = _Col("float", vals, col.null)
    if sort_by is not None:
        keys = [sort_by] if isinstance(sort_by, str) else list(sort_by)
        for side in (a_norm, e_norm):
            order = _lexsort_order([side[k] for k in keys])
            for c in names:
                col = side[c]
                side[c] = _Col(col.kind, col.values[order], col.null[order])

    problems: list[str] = []
    for c in names:
        a, e = a_norm[c], e_norm[c]
        kinds = {a.kind, e.kind}
        empty_side = a.null.all() or e.null.all()
        if a.kind != e.kind and not kinds <= _NUMERIC and not empty_side:
            problems.append(f"column {c!r}: kind {a.kind} (actual) vs {e.kind} (expected)")
            continue
        bad_null = np.flatnonzero(a.null != e.null)
        both = ~(a.null | e.null)
        if a.kind == "float" or e.kind == "float":
            col_rtol = rtol.get(c, 0.0) if isinstance(rtol, Mapping) else rtol
            av = a.values.astype(np.float64)
            ev = e.values.astype(np.float64)
            with np.errstate(invalid="ignore"):
                if col_rtol:
                    same = np.isclose(av, ev, rtol=col_rtol, atol=0.0) | (av == ev)
                else:
                    same = av == ev
            bad_val = np.flatnonzero(both & ~same)
        elif a.kind in ("datetime", "timedelta") and a.kind == e.kind:
            bad_val = np.flatnonzero(both & (a.values.view(np.int64) != e.values.view(np.int64)))
        else:
            pairs = zip(a.values, e.values, strict=True)
            differs = np.array([bool(x != y) for x, y in pairs], dtype=bool).reshape(-1)
            bad_val = np.flatnonzero(both & differs) if differs.size else np.array([], dtype=int)
        bad = np.union1d(bad_null, bad_val)
        if bad.size:
            lines = [f"column {c!r}: {bad.size} of {len(a.values)} rows differ"]
            for k in bad[:max_report]:
                av = None if a.null[k] else a.values[k]
                ev = None if e.null[k] else e.values[k]
                lines.append(f"    row {k}: actual={av!r} expected={ev!r}")
            problems.append("\n".join(lines))
    if problems:
        raise AssertionError("frames differ:\n" + "\n".join(problems))
