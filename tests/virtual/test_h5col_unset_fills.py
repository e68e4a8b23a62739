"""An H5Col column whose writer never set a fill value has HDF5's library default (0, 0.0,
empty bytes) as its `fillvalue`; that default marks nothing missing, so real zeros and empty
strings read as h5py reads them. A fill the writer set (0 included) still reads as NULL. The
oracle is h5py on the same file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

import zarrsql


def _table(f: h5py.File, columns: dict[str, Any], fills: dict[str, Any]) -> None:
    g = f.create_group("obs")
    g.attrs.update({"CLASS": "COLUMN_TABLE", "VERSION": "1.0", "NROWS": np.uint64(5), "column-order": list(columns)})
    for name, data in columns.items():
        kw = {"fillvalue": fills[name]} if name in fills else {}
        g.create_dataset(name, data=data, **kw)


def _oracle(path: Path, fills: dict[str, Any]) -> list[tuple[Any, ...]]:
    """h5py's values, NULL where a column's set fill says missing (NaN fill: NaN values)."""
    with h5py.File(path) as f:
        g = f["obs"]
        names = list(g.attrs["column-order"])
        cols = []
        for name in names:
            values = []
            for v in g[name][:5].tolist():
                v = v.decode() if isinstance(v, bytes) else v
                fill = fills.get(name)
                fill = fill.decode() if isinstance(fill, bytes) else fill
                missing = name in fills and (v == fill or (isinstance(v, float) and v != v and fill != fill))
                values.append(None if missing else v)
            cols.append(values)
    return list(zip(*cols, strict=True))


def test_unset_fills_mark_nothing_and_set_ones_do(tmp_path: Path) -> None:
    path = tmp_path / "fills.h5"
    columns = {
        "n": np.array([0, 1, 0, 2, -1], "int64"),
        "x": np.array([0.0, 1.5, 0.0, np.nan, 2.5]),
        "code": np.array([b"", b"a", b"", b"bc", b"d"], "S4"),
        "n_set": np.array([0, 1, 0, 2, -1], "int32"),
        "x_set": np.array([0.0, 1.5, 0.0, np.nan, 2.5]),
        "code_set": np.array([b"", b"a", b"?", b"bc", b"d"], "S4"),
    }
    fills = {"n_set": 0, "x_set": np.nan, "code_set": b"?"}
    with h5py.File(path, "w") as f:
        _table(f, columns, fills)
        assert f["obs/n"].id.get_create_plist().fill_value_defined() != h5py.h5d.FILL_VALUE_USER_DEFINED
    con = zarrsql.connect()
    got = con.sql(f"SELECT * FROM read_zarr('{path}', group_path := 'obs')").fetchall()
    expected = _oracle(path, fills)
    assert [tuple(None if isinstance(v, float) and v != v else v for v in r) for r in got] == [
        tuple(None if isinstance(v, float) and v != v else v for v in r) for r in expected
    ]
    # the real zeros count; NaN in an unset-fill float column is NULL as any NaN (nan_as_null)
    assert con.sql(
        f"SELECT count(n), sum(n), count(code) FROM read_zarr('{path}', group_path := 'obs')"
    ).fetchall() == [(5, 2, 5)]
    assert con.sql(
        f"SELECT count(n_set), count(code_set) FROM read_zarr('{path}', group_path := 'obs')"
    ).fetchall() == [(3, 4)]


def test_variable_and_fixed_length_strings_agree_on_empty_text(tmp_path: Path) -> None:
    path = tmp_path / "strings.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("obs")
        g.attrs.update(
            {"CLASS": "COLUMN_TABLE", "VERSION": "1.0", "NROWS": np.uint64(2), "column-order": ["fixed", "vlen"]}
        )
        g.create_dataset("fixed", data=np.array([b"", b"a"], "S4"))
        g.create_dataset("vlen", data=np.array(["", "a"], dtype=object), dtype=h5py.string_dtype())
        oracle = [(a.decode(), b.decode()) for a, b in zip(g["fixed"][:], g["vlen"][:], strict=True)]
    got = zarrsql.connect().sql(f"SELECT * FROM read_zarr('{path}', group_path := 'obs')").fetchall()
    assert got == oracle == [("", ""), ("a", "a")]
