"""Fixed costs of a session (issue 20, goal 2), checked by what is loaded and read, not by time.

- `connect()` and plain SQL load none of the scan machinery (numpy, pyarrow, the Zarr core);
  the first statement that reads a store installs zarrsql's functions and answers right;
- a view stored in another database file still finds `read_zarr` (a catalog error installs
  the functions, then the statement runs again);
- the second query on a store reads no metadata: its requests and bytes are exactly the
  chunk files of the array it aggregates, counted on disk;
- the metadata cache still sees a store changed on disk (shape, values, a coordinate
  rewritten in place), answers checked against zarr-python's reading.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pytest
import zarr

import zarrsql
from cli_runner import cli_env
from zarrsql.engine.duckdb_version import MAJOR

SCAN_MACHINERY = ("numpy", "pyarrow", "numcodecs", "zarr", "asyncio", "zarrsql.scan", "zarrsql.decode")


def _write(path: Path, *, zarr_format: int = 3, consolidated: bool = True, n: int = 12) -> np.ndarray:
    """A small (time, x) store written by zarr-python; returns the values of `v`."""
    root = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    kw = {"dimension_names": ["time", "x"]} if zarr_format == 3 else {}
    values = np.arange(n * 5, dtype="float64").reshape(n, 5) / 4
    for name, data in {"time": np.arange(n, dtype="int64"), "x": np.linspace(0.0, 1.0, 5)}.items():
        a = root.create_array(name, data=data, chunks=(4,), **({"dimension_names": [name]} if zarr_format == 3 else {}))
        if zarr_format == 2:
            a.attrs["_ARRAY_DIMENSIONS"] = [name]
    v = root.create_array("v", data=values, chunks=(4, 5), **kw)
    if zarr_format == 2:
        v.attrs["_ARRAY_DIMENSIONS"] = ["time", "x"]
    if consolidated:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(str(path))
    return values


def _chunk_files(array_dir: Path) -> list[Path]:
    documents = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}
    return [p for p in array_dir.rglob("*") if p.is_file() and p.name not in documents]


def _fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_connect_and_plain_sql_load_no_scan_machinery(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    values = _write(store)
    code = (
        "import json, sys, zarrsql\n"
        f"heavy = {SCAN_MACHINERY!r}\n"
        "loaded = lambda: sorted(m for m in heavy if m in sys.modules)\n"
        "con = zarrsql.connect()\n"
        "seen = {'connect': loaded()}\n"
        "assert con.sql('SELECT 41 + 1').fetchall() == [(42,)]\n"
        "seen['plain sql'] = loaded()\n"
        f"seen['sum'] = con.sql(\"SELECT sum(v), count(*) FROM read_zarr('{store}')\").fetchall()[0]\n"
        "seen['after read'] = loaded()\n"
        "print(json.dumps(seen))"
    )
    seen = _fresh(code)
    assert seen["connect"] == []
    assert seen["plain sql"] == []
    assert seen["sum"] == [pytest.approx(float(values.sum())), values.size]
    assert {"numpy", "pyarrow", "zarrsql.scan"} <= set(seen["after read"])


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_zarr('{S}') ORDER BY v DESC LIMIT 3",  # the hottest cells
        "SELECT * FROM read_zarr('{S}') WHERE x > 0.3 ORDER BY v LIMIT 2",  # ... under a WHERE
        "SELECT * FROM read_zarr('{S}') ORDER BY time DESC LIMIT 2",  # the latest rows
        "SELECT count(*), min(time) FROM read_zarr('{S}') WHERE x > 0.3",  # from the coordinates
    ],
)
def test_a_first_rewritten_statement_imports_no_pandas(tmp_path: Path, sql: str) -> None:
    """A statement zarrsql rewrites builds small Arrow tables of coordinates; built with
    `pa.array` (or `take`) they imported pandas (or pyarrow.compute), a few tenths of a
    second in a first statement that reads no frame. The rows are checked too."""
    store = tmp_path / "s.zarr"
    values = _write(store)
    code = (
        "import json, sys, zarrsql\n"
        "con = zarrsql.connect()\n"
        f"rows = con.sql({sql.format(S=store)!r}).fetchall()\n"
        "print(json.dumps({'rows': [[str(v) for v in r] for r in rows],"
        " 'loaded': sorted(m for m in ('pandas', 'pyarrow.compute') if m in sys.modules)}))"
    )
    seen = _fresh(code)
    if MAJOR >= 2:  # DuckDB 1.5's fallback scan is a pyarrow dataset, which loads both itself
        assert seen["loaded"] == []
    plain = duckdb.connect()
    plain.register(
        "t",
        {
            "time": np.repeat(np.arange(values.shape[0]), 5),
            "x": np.tile(np.linspace(0.0, 1.0, 5), values.shape[0]),
            "v": values.ravel(),
        },
    )
    want = plain.sql(sql.format(S="x").replace("read_zarr('x')", "t")).fetchall()
    assert seen["rows"] == [[str(v) for v in r] for r in want]


def test_a_view_in_an_attached_database_installs_the_functions(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    values = _write(store)
    db = tmp_path / "views.db"
    with zarrsql.connect(str(db)) as con:
        con.execute(f"CREATE VIEW v AS SELECT * FROM read_zarr('{store}')")
    with zarrsql.connect() as con:
        con.execute(f"ATTACH '{db}' AS o")  # nothing in either statement names zarr
        got = con.sql("SELECT sum(v), count(*) FROM o.v").fetchall()
    assert got == [(pytest.approx(float(values.sum())), values.size)]


def test_a_view_calling_a_function_not_yet_created_installs_it(tmp_path: Path) -> None:
    """A first statement creates only the functions its text names (read_zarr here); a
    stored view calling another (read_zarr_tables) gets it through the catalog error."""
    store = tmp_path / "s.zarr"
    values = _write(store)
    db = tmp_path / "views.db"
    with zarrsql.connect(str(db)) as con:
        con.execute(f"CREATE VIEW t AS SELECT table_name, shape FROM read_zarr_tables('{store}')")
    with zarrsql.connect() as con:
        assert con.sql(f"SELECT count(*) FROM read_zarr('{store}')").fetchall() == [(values.size,)]
        con.execute(f"ATTACH '{db}' AS o")
        assert con.sql("SELECT shape FROM o.t").fetchall() == [(list(values.shape),)]


def test_every_function_is_there_after_a_statement_naming_one(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    values = _write(store)
    con = zarrsql.connect()
    assert con.sql(f"SELECT sum(v) FROM read_zarr('{store}')").fetchall() == [(pytest.approx(float(values.sum())),)]
    names = {r[0] for r in con.sql(f"SELECT name FROM read_zarr_metadata('{store}')").fetchall()}
    assert "v" in names
    views = {r[0] for r in con.sql(f"SELECT view_name FROM read_zarr_views('{store}', 'db')").fetchall()}
    assert "time_x" in views
    assert con.duckdb.sql("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'zarr_mounts'").fetchall() == [
        (1,)
    ]


def test_the_plain_connection_has_the_functions(tmp_path: Path) -> None:
    """`con.duckdb` before any statement: read_zarr exists there, and refuses with the
    explanation that only the wrapper can register scans."""
    store = tmp_path / "s.zarr"
    _write(store)
    con = zarrsql.connect()
    with pytest.raises(duckdb.Error, match="plain DuckDB connection"):
        con.duckdb.sql(f"SELECT * FROM read_zarr('{store}')").fetchall()


@pytest.mark.parametrize(("zarr_format", "consolidated"), [(3, True), (3, False), (2, True), (2, False)])
def test_the_second_query_reads_only_data_chunks(tmp_path: Path, zarr_format: int, consolidated: bool) -> None:
    store = tmp_path / "s.zarr"
    values = _write(store, zarr_format=zarr_format, consolidated=consolidated)
    chunks = _chunk_files(store / "v")
    assert len(chunks) == zarr.open_array(str(store / "v"), mode="r").nchunks  # every chunk written
    query = f"SELECT sum(v) FROM read_zarr('{store}')"
    con = zarrsql.connect()
    with zarrsql.trace() as first:
        assert con.sql(query).fetchall() == [(pytest.approx(float(values.sum())),)]
    with zarrsql.trace() as second:
        assert con.sql(query).fetchall() == [(pytest.approx(float(values.sum())),)]
    with zarrsql.trace() as other:  # another connection of the process shares the cache
        assert zarrsql.connect().sql(query).fetchall() == [(pytest.approx(float(values.sum())),)]
    data_bytes = sum(p.stat().st_size for p in chunks)
    assert first.requests > len(chunks)  # the metadata and the coordinates, once
    assert first.bytes_read > data_bytes
    for t in (second, other):
        assert (t.requests, t.bytes_read) == (len(chunks), data_bytes)


@pytest.mark.parametrize("consolidated", [True, False])
def test_a_store_changed_on_disk_is_seen(tmp_path: Path, consolidated: bool) -> None:
    store = tmp_path / "s.zarr"
    _write(store, consolidated=consolidated)
    con = zarrsql.connect()
    query = f"SELECT time, x, v FROM read_zarr('{store}') ORDER BY time, x"
    con.sql(query).fetchall()  # cached now
    root = zarr.open_group(str(store), mode="r+", use_consolidated=False)  # its members' own shapes
    root["time"].resize((16,))
    root["time"][:] = np.arange(100, 116)
    root["v"].resize((16, 5))
    root["v"][:] = np.arange(80, dtype="float64").reshape(16, 5) * 3
    if consolidated:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(str(store))
    reread = zarr.open_group(str(store), mode="r")
    t, x, v = (np.asarray(reread[n][...]) for n in ("time", "x", "v"))
    assert t.tolist() == list(range(100, 116))
    expected = [(int(t[i]), float(x[j]), float(v[i, j])) for i in range(len(t)) for j in range(len(x))]
    assert con.sql(query).fetchall() == sorted(expected)
    root["x"][:] = np.linspace(5.0, 6.0, 5)  # a coordinate's chunk only: no document changes
    x = np.asarray(zarr.open_array(str(store / "x"), mode="r")[...])
    assert x[0] == 5.0
    expected = [(int(t[i]), float(x[j]), float(v[i, j])) for i in range(len(t)) for j in range(len(x))]
    assert con.sql(query).fetchall() == sorted(expected)


def test_a_literal_store_is_registered_before_the_first_bind(tmp_path, monkeypatch) -> None:
    """`read_zarr('<store>')` with no other argument: the scan is registered before DuckDB
    binds the statement, so the statement is bound once (no catalog error, no round); a
    changed store, another argument or an error still take the usual way, with the same
    results and errors."""
    values = _write(tmp_path / "s.zarr")
    rounds: list[str | None] = []
    original = zarrsql.Connection._register_missing

    def counted(self, text):
        if text is not None:  # the round after a catalog error (`_preregister` passes None)
            rounds.append(text)
        return original(self, text)

    monkeypatch.setattr(zarrsql.Connection, "_register_missing", counted)
    with zarrsql.connect() as con:
        store = tmp_path / "s.zarr"
        assert con.sql(f"SELECT sum(v) FROM read_zarr('{store}')").fetchall()[0][0] == pytest.approx(values.sum())
        assert rounds == []
        # another argument: the macro's scan is registered after a catalog error, as before
        got = con.sql(f"SELECT count(*) FROM read_zarr('{store}', nan_as_null := false) WHERE x > 0.5").fetchall()
        assert got == [(int((np.linspace(0.0, 1.0, 5) > 0.5).sum()) * values.shape[0],)]
        assert len(rounds) == 1
        # the store changed: a new scan, found in a round (the literal was seen already)
        _write(store, n=16)
        assert con.sql(f"SELECT count(*) FROM read_zarr('{store}')").fetchall() == [(16 * 5,)]
        with pytest.raises(zarrsql.StoreNotFoundError) as info:
            con.sql(f"SELECT * FROM read_zarr('{tmp_path / 'missing.zarr'}')")
        assert "missing.zarr" in str(info.value)
