"""Stored values at the edges of what numpy converts unchecked: datetime64/timedelta64 in units
finer than a microsecond just above NaT (numpy's cast to microseconds wraps them to 2262), and
fixed-width unicode (UTF-32) holding code points that are no character (Arrow and DuckDB refuse
them). Expected values come from Python integers on the stored int64, pandas, and zarr-python's
own read; the stores are written by zarr-python, Zarr v2 and v3."""

from __future__ import annotations

import csv
import datetime as dt
import io
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr
from zarr.errors import UnstableSpecificationWarning

import zarrsql
from cli_runner import run_cli

INT64_MIN, INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
#: Attoseconds in one of each numpy unit finer than a microsecond (a microsecond is 10**12).
ATTOSECONDS = {"ns": 10**9, "ps": 10**6, "fs": 10**3, "as": 1}
#: Counts just above NaT (numpy wraps those within one microsecond's worth of units of it),
#: around zero, and at the top (where a unit with a count, such as 3ns, overflows numpy's
#: multiplication).
STORED = [
    INT64_MIN,  # NaT
    INT64_MIN + 1,  # pandas.Timestamp.min.value
    INT64_MIN + 2,
    INT64_MIN + 998,
    INT64_MIN + 999,
    INT64_MIN + 1000,
    INT64_MIN + 10**6 - 1,
    INT64_MIN + 10**6,
    INT64_MIN + 10**12 - 1,
    INT64_MIN + 10**12,
    -1001,
    -1,
    0,
    1,
    INT64_MAX // 3 + 1,
    INT64_MAX,
]


def _micros(stored: int, unit: str) -> int | None:
    """The microsecond a stored count falls in (floored), by Python integer arithmetic."""
    if stored == INT64_MIN:
        return None
    count, name = (int(unit[:-2]), unit[-2:]) if unit[:-2] else (1, unit)
    return stored * count * ATTOSECONDS[name] // 10**12


def _time_store(tmp_path: Path, zarr_format: int, unit: str) -> str:
    path = str(tmp_path / f"times_{unit}.zarr")
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    ints = np.array(STORED, dtype=np.int64)
    for name, letter in (("t", "M"), ("d", "m")):
        dtype = np.dtype(f"{letter}8[{unit}]")
        names = {"dimension_names": ["x"]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["x"]}}
        array = root.create_array(name, shape=ints.shape, chunks=(4,), dtype=dtype, **names)
        array[:] = ints.view(dtype)
    return path


#: zarrsql refuses a Zarr v3 time unit with a scale_factor (3ns), so those are v2 only.
UNITS = [(2, u) for u in ("ns", "ps", "fs", "as", "3ns", "10ns")] + [(3, u) for u in ("ns", "ps", "fs", "as")]


@pytest.mark.parametrize(("zarr_format", "unit"), UNITS)
def test_sub_microsecond_times_near_nat_floor_to_their_microsecond(tmp_path: Path, zarr_format: int, unit: str) -> None:
    path = _time_store(tmp_path, zarr_format, unit)
    # every count of these units lies within DuckDB's TIMESTAMP range: only NaT is NULL
    micros = [_micros(v, unit) for v in STORED]
    con = zarrsql.connect()
    rows = con.sql(f"SELECT x, epoch_us(t), epoch_us(d) FROM read_zarr('{path}') ORDER BY x").fetchall()
    assert rows == [(i, us, us) for i, us in enumerate(micros)]

    threshold = micros[2]  # the microsecond of NaT + 2: only values that close to NaT are at or below it
    assert threshold is not None
    held = [us for us in micros if us is not None]
    want_rows = [i for i, us in enumerate(micros) if us is not None and us <= threshold]
    for column, literal in (("t", f"make_timestamp({threshold})"), ("d", f"to_microseconds({threshold})")):
        where = f"SELECT x FROM read_zarr('{path}') WHERE {column} <= {literal} ORDER BY x"
        assert [r[0] for r in con.sql(where).fetchall()] == want_rows
    extremes = "epoch_us(max(t)), epoch_us(min(t)), epoch_us(max(d)), epoch_us(min(d))"
    assert con.sql(f"SELECT {extremes} FROM read_zarr('{path}')").fetchall() == [
        (max(held), min(held), max(held), min(held))
    ]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_nanoseconds_at_pandas_limits_read_as_pandas_floors_them(tmp_path: Path, zarr_format: int) -> None:
    path = _time_store(tmp_path, zarr_format, "ns")
    held = [v for v in STORED if v != INT64_MIN]
    want = [
        (pd.Timestamp(v).as_unit("us", round_ok=True).to_pydatetime(), pd.Timedelta(v).as_unit("us", round_ok=True))
        for v in held
    ]
    rows = zarrsql.connect().sql(f"SELECT t, d FROM read_zarr('{path}') WHERE x > 0 ORDER BY x").fetchall()
    assert rows == [(t, d.to_pytimedelta()) for t, d in want]
    assert rows[0][0] == dt.datetime(1677, 9, 21, 0, 12, 43, 145224)  # pandas.Timestamp.min, floored


# --- fixed-width unicode --------------------------------------------------------------------

#: The replacement character, as the fixed-width bytes branch puts it for invalid UTF-8.
REPLACEMENT = 0xFFFD


def _is_character(code: int) -> bool:
    return code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF


def _as_read(codes: np.ndarray) -> str:
    """The text of one fixed-width item's UTF-32 code units, invalid ones replaced, the
    trailing NUL padding dropped (as numpy drops it)."""
    return "".join(chr(c if _is_character(c) else REPLACEMENT) for c in codes.tolist()).rstrip("\x00")


def _expected(path: str) -> list[str]:
    """zarr-python's read of array 'a', with each code point that is no character replaced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnstableSpecificationWarning)
        stored = zarr.open_array(f"{path}/a", mode="r")[:]
    codes = stored.view(np.dtype(np.uint32).newbyteorder(stored.dtype.byteorder)).reshape(stored.size, -1)
    return [_as_read(item) for item in codes]


def _unicode_store(tmp_path: Path, zarr_format: int, values: list[str], dtype: str = "<U3") -> str:
    path = str(tmp_path / f"unicode_v{zarr_format}.zarr")
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    names = {"dimension_names": ["x"]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["x"]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnstableSpecificationWarning)
        array = root.create_array(
            "a", shape=(len(values),), chunks=(2,), dtype=dtype, compressors=None, fill_value="", **names
        )
        array[:] = np.array(values, dtype=dtype)
    return path


def _overwrite_first_chunk(path: str, zarr_format: int, codes: list[int], dtype: str) -> None:
    """Write UTF-32 code units as they are (even ones numpy would never produce) into chunk 0."""
    key = Path(path) / "a" / ("c/0" if zarr_format == 3 else "0")
    assert key.is_file(), key
    key.write_bytes(np.array(codes, dtype=dtype[0] + "u4").tobytes())


def _read(path: str) -> list[str]:
    return [r[0] for r in zarrsql.connect().sql(f"SELECT a FROM read_zarr('{path}') ORDER BY x").fetchall()]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_lone_surrogate_reads_as_the_replacement_character(tmp_path: Path, zarr_format: int) -> None:
    path = _unicode_store(tmp_path, zarr_format, ["ok", "\ud800x", "z", "\udfff\ud83d"])
    want = _expected(path)
    assert want == ["ok", "\ufffdx", "z", "\ufffd\ufffd"]  # the oracle replaces only the surrogates
    assert _read(path) == want


# a Zarr v2 dtype names its byte order; v3 writes little-endian code units here
@pytest.mark.parametrize(("zarr_format", "dtype"), [(2, "<U3"), (2, ">U3"), (3, "<U3")])
def test_code_points_past_u10ffff_read_as_the_replacement_character(
    tmp_path: Path, zarr_format: int, dtype: str
) -> None:
    path = _unicode_store(tmp_path, zarr_format, ["ok", "ok", "tai"], dtype)
    # chunk 0 holds items 0 and 1, three code units each
    _overwrite_first_chunk(path, zarr_format, [0x61, 0x110000, 0, 0x1F600, 0xFFFFFFFF, 0xD800], dtype)
    want = _expected(path)
    assert want == ["a\ufffd", "\U0001f600\ufffd\ufffd", "tai"]
    assert _read(path) == want


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_valid_text_past_the_surrogates_reads_unchanged(tmp_path: Path, zarr_format: int) -> None:
    values = ["\ud7ff", "\ue000", "\uffff", "\U00010000", "😀é", "\U0010ffff", "漢字", "ab"]
    path = _unicode_store(tmp_path, zarr_format, values, "<U2")
    assert _expected(path) == values
    assert _read(path) == values


def test_the_command_line_prints_invalid_text_without_a_traceback(tmp_path: Path) -> None:
    path = _unicode_store(tmp_path, 3, ["ok", "\ud800x", "z"])
    out = run_cli("query", path, "SELECT a FROM x ORDER BY x", "--format", "csv")
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 0, out.stderr
    rows = list(csv.reader(io.StringIO(out.stdout)))
    assert [r[0] for r in rows] == ["a", *_expected(path)]
