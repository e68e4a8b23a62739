"""H5Col column tables in HDF5 files, against h5py reading the same datasets.

The file is written with h5py by the H5Col layout (tests/virtual/h5col_files.py): reserved
rows past NROWS hold junk that must never appear; categories, fill values, a list column and
a boolean column. It is read directly (`read_zarr('obs.h5', group_path := 'obs')`) and
through a kerchunk reference set of the file, which loses `CLASS` and the object references
(the convention falls back to names there).
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import zarrsql
from tests.virtual.conftest import VirtualFiles
from tests.virtual.h5col_files import EXTENT, KIND_LABELS, NROWS, expected_obs, write_obs
from zarrsql.engine.source import HAS_SOURCES


def _rows(store: Path, where: str = "") -> list[tuple]:
    sql = f"SELECT * FROM read_zarr('{store}', group_path := 'obs') {where}"
    return zarrsql.connect().sql(sql).fetchall()


@pytest.mark.parametrize("source", ["obs", "obs_json"])
def test_the_table_is_h5pys_rows_with_the_conventions_rules(source: str, virtual: VirtualFiles) -> None:
    expected = [tuple(r.values()) for r in expected_obs(virtual.obs)]
    assert len(expected) == NROWS < EXTENT
    assert _rows(getattr(virtual, source)) == expected


def test_columns_follow_column_order_with_sql_types(virtual: VirtualFiles) -> None:
    rel = zarrsql.connect().sql(f"SELECT * FROM read_zarr('{virtual.obs}', group_path := 'obs')")
    with h5py.File(virtual.obs) as f:
        order = list(f["obs"].attrs["column-order"])
    assert rel.columns == order
    types = [str(t) for t in rel.types]
    assert types == [
        "VARCHAR",
        f"ENUM({', '.join(repr(k) for k in KIND_LABELS)})",
        "DOUBLE",
        "INTEGER",
        "INTEGER[]",
        "BOOLEAN",
    ]


def test_reserved_rows_never_appear(virtual: VirtualFiles) -> None:
    """Rows past NROWS hold 999.0 and 12345 (h5py shows them); no query may see them."""
    with h5py.File(virtual.obs) as f:
        assert f["obs/t_air"].shape[0] == EXTENT
        assert (f["obs/t_air"][NROWS:] == 999.0).all()
    con = zarrsql.connect()
    ((count, hot, big),) = con.execute(
        f"SELECT count(*), count(*) FILTER (t_air = 999.0), count(*) FILTER (samples = 12345) "
        f"FROM read_zarr('{virtual.obs}', group_path := 'obs')"
    ).fetchall()
    assert (count, hot, big) == (NROWS, 0, 0)


def test_fill_values_are_null(virtual: VirtualFiles) -> None:
    with h5py.File(virtual.obs) as f:
        g = f["obs"]
        kind_missing = int((g["kind"][:NROWS] == g["kind"].fillvalue).sum())
        samples_missing = int((g["samples"][:NROWS] == g["samples"].fillvalue).sum())
        t_missing = int(np.isnan(g["t_air"][:NROWS]).sum())
    assert min(kind_missing, samples_missing, t_missing) > 0
    ((k, s, t),) = (
        zarrsql.connect()
        .execute(
            f"SELECT count(*) FILTER (kind IS NULL), count(*) FILTER (samples IS NULL), "
            f"count(*) FILTER (t_air IS NULL) FROM read_zarr('{virtual.obs}', group_path := 'obs')"
        )
        .fetchall()
    )
    assert (k, s, t) == (kind_missing, samples_missing, t_missing)


def test_metadata_lists_units_and_valid_range(virtual: VirtualFiles) -> None:
    rows = zarrsql.connect().sql(f"SELECT name, attrs FROM read_zarr_metadata('{virtual.obs}')").fetchall()
    attrs = {name: json.loads(a) for name, a in rows}
    with h5py.File(virtual.obs) as f:
        t_air, samples = f["obs/t_air"].attrs, f["obs/samples"].attrs
        assert attrs["obs/t_air"]["units"] == t_air["units"]
        assert attrs["obs/t_air"]["valid_min"] == float(t_air["valid_min"])
        assert attrs["obs/t_air"]["valid_max"] == float(t_air["valid_max"])
        assert attrs["obs/samples"]["valid_min"] == int(samples["valid_min"])


def test_the_table_is_listed_by_its_group_name(virtual: VirtualFiles) -> None:
    rows = (
        zarrsql.connect().sql(f"SELECT group_path, table_name, shape FROM read_zarr_tables('{virtual.obs}')").fetchall()
    )
    assert ("/obs", "obs", [NROWS]) in rows


def test_a_filter_prunes_row_chunks_of_the_list_column_too(virtual: VirtualFiles) -> None:
    """A LIMIT reads one work unit; the list column reads only that unit's values."""
    con = zarrsql.connect()
    with zarrsql.trace() as t:
        rows = con.execute(f"SELECT tags FROM read_zarr('{virtual.obs}', group_path := 'obs') LIMIT 3").fetchall()
    assert [r[0] for r in rows] == [r["tags"] for r in expected_obs(virtual.obs)[:3]]
    if HAS_SOURCES:  # the LIMIT reaches the scan (DuckDB 2.x); 1.5 reads its grouped units ahead
        assert t.work_units_read < t.work_units_planned


# ----------------------------------------------------------------------------- broken tables
def _broken(tmp_path: Path, change) -> Path:
    path = tmp_path / "broken.h5"
    write_obs(path)
    with h5py.File(path, "r+") as f:
        change(f["obs"])
    return path


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda g: g.attrs.__setitem__("NROWS", np.uint64(EXTENT + 1)), "NROWS is 49"),
        (lambda g: g.attrs.__setitem__("column-order", ["station", "nope"]), "'nope'"),
        (lambda g: g["samples"].resize((EXTENT - 2,)), "share one extent"),
        (lambda g: g.attrs.__setitem__("NROWS", -3), "non-negative integer NROWS"),
    ],
)
def test_a_broken_rule_makes_the_table_unreadable_with_its_reason(tmp_path: Path, change, fragment: str) -> None:
    path = _broken(tmp_path, change)
    con = zarrsql.connect()
    listed = con.execute(f"SELECT table_name FROM read_zarr_tables('{path}') WHERE group_path = '/obs'").fetchall()
    assert listed == [(None,)]  # listed, without a name: it cannot be read
    with pytest.raises(zarrsql.SelectionError) as info:
        con.execute(f"SELECT * FROM read_zarr('{path}', group_path := 'obs')").fetchall()
    assert "H5Col table '/obs'" in str(info.value)
    assert fragment in str(info.value)


def test_a_group_without_the_class_is_no_table(tmp_path: Path) -> None:
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("obs")
        g.create_dataset("a", data=np.arange(5))
        g.attrs["NROWS"] = np.uint64(3)  # NROWS alone (no column-order, no CLASS): not H5Col
    rows = zarrsql.connect().execute(f"SELECT * FROM read_zarr('{path}', group_path := 'obs')").fetchall()
    assert [r[-1] for r in rows] == list(range(5))


# ----------------------------------------------------------------------------- search indexes
def _oracle(path: Path, keep) -> list[tuple]:
    return [tuple(r.values()) for r in expected_obs(path) if keep(r)]


PREDICATES = [
    ("t_air > 20", lambda r: r["t_air"] is not None and r["t_air"] > 20),
    ("t_air BETWEEN 5 AND 9.5", lambda r: r["t_air"] is not None and 5 <= r["t_air"] <= 9.5),
    ("t_air IS NULL", lambda r: r["t_air"] is None),
    ("t_air < 0 OR samples = 20", lambda r: (r["t_air"] is not None and r["t_air"] < 0) or r["samples"] == 20),
]


@pytest.mark.parametrize(("where", "keep"), PREDICATES)
@pytest.mark.parametrize("source", ["obs", "obs_json"])
def test_a_valid_sorted_rows_index_prunes_exactly(source: str, where: str, keep, virtual: VirtualFiles) -> None:
    path = getattr(virtual, source)
    with zarrsql.trace() as t:
        rows = _rows(path, f"WHERE {where}")
    expected = _oracle(virtual.obs, keep)
    assert rows == expected
    # samples has no index: that OR cannot prune; DuckDB 1.5 pushes no WHERE into the scan
    # (Arrow filters the rows after reading), so only 2.x prunes
    if where != "t_air < 0 OR samples = 20" and HAS_SOURCES:
        assert t.work_units_read < t.work_units_planned
        assert t.rows == len(expected)  # applied in the scan: exactly the matching rows


@pytest.mark.parametrize(("where", "keep"), PREDICATES)
def test_a_stale_index_is_ignored(where: str, keep, virtual: VirtualFiles) -> None:
    """The stale index's token is behind GENERATION and its rows are wrong: it must not be
    used, every unit is read, and the rows are still right."""
    with h5py.File(virtual.obs_stale) as f:
        assert f["obs/SEARCH_INDEXES/t_air__sorted_rows"].attrs["GENERATION"] != f["obs"].attrs["GENERATION"]
    with zarrsql.trace() as t:
        rows = _rows(virtual.obs_stale, f"WHERE {where}")
    assert rows == _oracle(virtual.obs_stale, keep)
    assert t.work_units_read == t.work_units_planned
