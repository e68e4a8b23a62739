"""DuckDB's `SET enable_external_access = false` (with `allowed_directories` and
`allowed_paths`) binds zarrsql's own readers and writers as it binds DuckDB's.

zarrsql reads and writes stores with its own code, outside DuckDB's file system, so before
this every `read_zarr`, listing, mount, sample, `COPY ... (FORMAT zarr)` and `to_zarr` went
on reading and writing anywhere after a user (or a server's operator) had turned access off.
The oracle for which locations pass is DuckDB itself: a CSV file placed beside each store is
read with `read_csv` on a plain DuckDB connection under the same settings, and a store must
be refused exactly where DuckDB refuses that file. Values read where access is allowed come
from xarray.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pytest
import xarray as xr

import zarrsql

REFUSED = "enable_external_access = false"


def _write_store(folder: Path, offset: float, *, consolidated: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    ds = xr.Dataset(
        {"v": (("x", "y"), np.arange(12.0).reshape(4, 3) + offset)},
        coords={"x": np.arange(4), "y": np.arange(3) * 10},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(folder / "s.zarr", zarr_format=3, consolidated=consolidated)
    (folder / "x.csv").write_text("a,b\n1,2\n")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ok/, ok/sub/, ok2/ (a sibling whose name starts like ok's) and secret/, each with a
    store `s.zarr` of its own values and a CSV file for DuckDB's verdict; ok/to_secret links
    to secret/, link to ok/."""
    root = tmp_path_factory.mktemp("access")
    for k, name in enumerate(["ok", "ok/sub", "ok2", "secret"]):
        _write_store(root / name, 100.0 * k)
    (root / "ok/to_secret").symlink_to(root / "secret", target_is_directory=True)
    (root / "link").symlink_to(root / "ok", target_is_directory=True)
    return root


def _sum(folder: Path) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(xr.open_zarr(folder / "s.zarr")["v"].sum())


def _closed(con: duckdb.DuckDBPyConnection | zarrsql.Connection, *allowed: Path | str) -> None:
    listed = ", ".join(f"'{a}'" for a in allowed)
    con.execute(f"SET allowed_directories = [{listed}]")
    con.execute("SET enable_external_access = false")


def _duckdb_refuses(duck: duckdb.DuckDBPyConnection, path: str) -> bool:
    try:
        duck.sql(f"SELECT * FROM read_csv('{path}')").fetchall()
    except duckdb.PermissionException:
        return True
    return False


def _zarrsql_refuses(con: zarrsql.Connection, path: str) -> bool:
    try:
        with zarrsql.trace() as t:
            con.sql(f"SELECT sum(v) FROM read_zarr('{path}')").fetchall()
    except zarrsql.AccessDeniedError as err:
        assert REFUSED in str(err) and "allowed_directories" in str(err), err
        assert t.requests == 0, "refused only after reading the store"
        return True
    return False


def _locations(root: Path) -> list[str]:
    """Folders named every way a user might: plain, `file://`, with `.`, `..`, `//`, links."""
    return [
        f"{root}/ok",
        f"{root}/ok/sub",
        f"{root}/ok/./sub",
        f"{root}//ok",
        f"file://{root}/ok",
        f"{root}/ok/../secret",
        f"{root}/ok/sub/../../secret",
        f"{root}/ok2",
        f"{root}/secret",
        f"{root}/ok/to_secret",  # a link out of the allowed folder
        f"{root}/link/sub",  # a link into it
    ]


def test_a_store_is_refused_exactly_where_duckdb_refuses_a_file(tree: Path) -> None:
    duck = duckdb.connect()
    con = zarrsql.connect()
    _closed(duck, tree / "ok")
    _closed(con, tree / "ok")
    verdicts = {}
    for folder in _locations(tree):
        csv, store = f"{folder}/x.csv", f"{folder}/s.zarr"
        verdicts[folder] = (_duckdb_refuses(duck, csv), _zarrsql_refuses(con, store))
    assert all(d == z for d, z in verdicts.values()), verdicts
    assert verdicts[f"{tree}/secret"] == (True, True)  # the rules do refuse something
    assert verdicts[f"{tree}/ok"] == (False, False)


def test_relative_locations_follow_the_working_directory(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree / "ok")
    duck = duckdb.connect()
    con = zarrsql.connect()
    _closed(duck, ".")
    _closed(con, ".")
    for folder in ["sub", "./sub", "../ok/sub", "../secret", "../ok2", "."]:
        assert _duckdb_refuses(duck, f"{folder}/x.csv") == _zarrsql_refuses(con, f"{folder}/s.zarr"), folder


def test_allowed_stores_read_their_values(tree: Path) -> None:
    con = zarrsql.connect()
    _closed(con, tree / "ok")
    got = con.sql(f"SELECT sum(v) FROM read_zarr('{tree}/ok/sub/s.zarr')").fetchall()
    assert got[0][0] == pytest.approx(_sum(tree / "ok/sub"))
    rows = con.sql(f"SELECT x, y, v FROM read_zarr('{tree}/ok/s.zarr') ORDER BY x, y").fetchall()
    ds = xr.open_zarr(tree / "ok/s.zarr", consolidated=False)
    expected = [(int(x), int(y), float(ds["v"].sel(x=x, y=y))) for x in ds.x.values for y in ds.y.values]
    assert rows == expected


def test_an_allowed_path_admits_that_store_only(tree: Path) -> None:
    con = zarrsql.connect()
    con.execute(f"SET allowed_paths = ['{tree}/ok2/s.zarr']")
    con.execute("SET enable_external_access = false")
    got = con.sql(f"SELECT sum(v) FROM read_zarr('{tree}/ok2/s.zarr')").fetchall()
    assert got[0][0] == pytest.approx(_sum(tree / "ok2"))
    assert _zarrsql_refuses(con, f"{tree}/ok/s.zarr")
    assert _zarrsql_refuses(con, f"{tree}/ok2/s.zarr/../../secret/s.zarr")


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM read_zarr('{store}')",
        "SELECT * FROM '{store}'",
        "SELECT * FROM read_zarr_tables('{store}')",
        "SELECT * FROM read_zarr_metadata('{store}')",
        "SELECT * FROM read_zarr_views('{store}', 'db')",
        "SELECT * FROM zarr_mount('{store}', 'db')",
        "SELECT * FROM zarr_sample('{store}', 'SELECT 1 AS x, 10 AS y')",
    ],
)
def test_every_reading_function_is_refused_outside(tree: Path, statement: str) -> None:
    con = zarrsql.connect()
    _closed(con, tree / "ok")
    text = statement.format(store=f"{tree}/secret/s.zarr")
    with zarrsql.trace() as t, pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
        con.sql(text).fetchall()
    assert t.requests == 0
    con.sql(statement.format(store=f"{tree}/ok/s.zarr")).fetchall()  # the same call inside passes


def test_python_entry_points_are_refused_outside(tree: Path) -> None:
    con = zarrsql.connect()
    _closed(con, tree / "ok")
    secret = f"{tree}/secret/s.zarr"
    with pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
        zarrsql.read_zarr(secret, connection=con).fetchall()
    with pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
        zarrsql.mount(con, secret, "m")
    with pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
        zarrsql.sample(secret, "SELECT 1 AS x, 10 AS y", connection=con).fetchall()
    err = pytest.raises(zarrsql.AccessDeniedError, zarrsql.read_zarr, secret, connection=con).value
    assert isinstance(err, zarrsql.ZarrSQLError) and isinstance(err, PermissionError)


def test_a_database_opened_with_access_off(tree: Path) -> None:
    """`config=` cannot hold the allowed lists (DuckDB refuses them before the database
    starts): such a database allows nothing, as DuckDB's own readers show."""
    duck = duckdb.connect(config={"enable_external_access": False})
    con = zarrsql.connect(config={"enable_external_access": False})
    for folder in (tree / "ok", tree / "secret"):
        assert _duckdb_refuses(duck, f"{folder}/x.csv")
        assert _zarrsql_refuses(con, f"{folder}/s.zarr")
    with pytest.raises(zarrsql.AccessDeniedError, match="cannot write"):
        con.execute(f"COPY (SELECT 1 AS x, 2.0 AS v) TO '{tree}/ok/new.zarr' (FORMAT zarr, DIMS (x))")
    assert not (tree / "ok/new.zarr").exists()


def test_the_switch_inside_one_statement_text(tree: Path) -> None:
    """The store is named before the SET runs: it must not be opened early under the old rules."""
    con = zarrsql.connect()
    con.sql("SELECT 1").fetchall()
    with pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
        con.execute(
            f"SET allowed_directories = ['{tree}/ok']; SET enable_external_access = false; "
            f"SELECT sum(v) FROM read_zarr('{tree}/secret/s.zarr')"
        ).fetchall()


def test_views_relations_and_mounts_made_before_the_switch(tree: Path) -> None:
    con = zarrsql.connect()
    zarrsql.mount(con, f"{tree}/secret/s.zarr", "hidden")
    zarrsql.mount(con, f"{tree}/ok/s.zarr", "open")
    con.execute(f"CREATE VIEW plain AS SELECT * FROM read_zarr('{tree}/secret/s.zarr')")
    relation = con.sql(f"SELECT sum(v) FROM read_zarr('{tree}/secret/s.zarr')")
    assert relation.fetchall()[0][0] == pytest.approx(_sum(tree / "secret"))
    (table,) = [r[0] for r in con.sql("SELECT view_name FROM duckdb_views() WHERE database_name = 'hidden'").fetchall()]
    _closed(con, tree / "ok")
    for text in (f'SELECT sum(v) FROM hidden."{table}"', "SELECT sum(v) FROM plain"):
        with pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
            con.sql(text).fetchall()
    with pytest.raises(duckdb.Error, match=REFUSED):  # DuckDB binds it again at the fetch
        relation.fetchall()
    got = con.sql(f'SELECT sum(v) FROM open."{table}"').fetchall()
    assert got[0][0] == pytest.approx(_sum(tree / "ok"))


def test_writers_are_refused_outside_and_leave_nothing(tree: Path) -> None:
    con = zarrsql.connect()
    _closed(con, tree / "ok")
    before = sorted(p.name for p in (tree / "secret").iterdir())
    replaced = tree / "secret/s.zarr"
    stamp = {p: p.stat().st_mtime_ns for p in replaced.rglob("*")}
    rows = "SELECT x, y, v * 2 AS v FROM read_zarr('{}/ok/s.zarr')".format(tree)
    with pytest.raises(zarrsql.AccessDeniedError, match="cannot write"):
        con.execute(f"COPY ({rows}) TO '{tree}/secret/new.zarr' (FORMAT zarr)")
    with pytest.raises(zarrsql.AccessDeniedError, match="cannot write"):
        zarrsql.to_zarr(con.sql(rows), str(replaced), mode="w", connection=con)
    with pytest.raises(zarrsql.AccessDeniedError, match="cannot write"):
        zarrsql.to_zarr(rows, str(tree / "secret/new.zarr"), layout="table", connection=con)
    assert sorted(p.name for p in (tree / "secret").iterdir()) == before
    assert {p: p.stat().st_mtime_ns for p in replaced.rglob("*")} == stamp
    target = tree / "ok/written.zarr"
    con.execute(f"COPY ({rows}) TO '{target}' (FORMAT zarr)")
    ds = xr.open_zarr(target)
    assert float(ds["v"].sum()) == pytest.approx(2 * _sum(tree / "ok"))


def test_a_url_is_refused_without_a_request(tree: Path) -> None:
    con = zarrsql.connect()
    _closed(con, tree / "ok")
    with zarrsql.trace() as t, pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
        con.sql("SELECT * FROM read_zarr('http://127.0.0.1:9/store.zarr')").fetchall()
    assert t.requests == 0


def test_url_prefixes_match_duckdb() -> None:
    """An allowed URL prefix passes on path boundaries as DuckDB's does. DuckDB tries to load
    httpfs for an admitted URL (an error other than permission's, here) and refuses the rest.
    DuckDB 1.5 without httpfs loaded keeps the entry as a local path (the working directory
    joined to 'http:/...'): zarrsql then admits no URL at all, the safe reading of it."""
    duck = duckdb.connect()
    duck.execute("SET autoinstall_known_extensions = false")
    con = zarrsql.connect()
    for c in (duck, con):
        c.execute("SET allowed_directories = ['http://127.0.0.1:9/data/']")
        c.execute("SET enable_external_access = false")
    (listed,) = con.sql("SELECT current_setting('allowed_directories')").fetchall()[0]
    kept_as_url = "http://127.0.0.1:9/data/" in listed
    for url in [
        "http://127.0.0.1:9/data/a",
        "http://127.0.0.1:9/data2/a",
        "http://127.0.0.1:9/other/a",
        "http://127.0.0.1:9/data/../other/a",
    ]:
        try:
            duck.sql(f"SELECT * FROM read_csv('{url}/x.csv')").fetchall()
            duckdb_refused = False
        except duckdb.PermissionException:
            duckdb_refused = True
        except duckdb.Error:
            duckdb_refused = False
        try:
            con.sql(f"SELECT * FROM read_zarr('{url}/s.zarr', storage_options := MAP {{'retries': '0'}})").fetchall()
            refused = False
        except zarrsql.AccessDeniedError:
            refused = True
        except zarrsql.ZarrSQLError:
            refused = False
        assert refused == (duckdb_refused if kept_as_url else True), url


def _netcdf(path: Path, offset: float) -> xr.Dataset:
    ds = xr.Dataset({"v": (("x",), np.arange(6.0) + offset)}, coords={"x": np.arange(6)})
    ds.to_netcdf(path, engine="h5netcdf")
    return ds


def test_kerchunk_references_into_a_refused_folder(tree: Path, tmp_path: Path) -> None:
    """A reference set inside an allowed folder may point anywhere: each file it reads must pass."""
    from kerchunk_refs import kerchunk_refs

    inside, outside = tmp_path / "ok", tmp_path / "elsewhere"
    inside.mkdir()
    outside.mkdir()
    near = _netcdf(inside / "near.nc", 0.0)
    _netcdf(outside / "far.nc", 50.0)
    for name, nc in (("near", inside / "near.nc"), ("far", outside / "far.nc")):
        (inside / f"{name}.json").write_text(json.dumps(kerchunk_refs(nc, inline_threshold=0)))
    con = zarrsql.connect()
    _closed(con, inside)
    got = con.sql(f"SELECT sum(v) FROM read_zarr('{inside}/near.json')").fetchall()
    assert got[0][0] == pytest.approx(float(near["v"].sum()))
    with pytest.raises(zarrsql.AccessDeniedError, match=f"cannot read '{outside}/far.nc'"):
        con.sql(f"SELECT sum(v) FROM read_zarr('{inside}/far.json')").fetchall()


def test_icechunk_virtual_chunks_in_a_refused_folder(tmp_path: Path) -> None:
    from icechunk_fixtures import netcdf_frame, write_virtual

    virtual = write_virtual(tmp_path)
    con = zarrsql.connect()
    _closed(con, virtual.path)  # the repository, not the folder of its NetCDF files
    call = f"read_zarr('{virtual.path}', virtual_chunks := MAP {{'{virtual.prefix}': NULL}})"
    with pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
        con.sql(f"SELECT count(*) FROM {call}").fetchall()
    both = zarrsql.connect()
    _closed(both, virtual.path, virtual.data)
    expected = netcdf_frame(virtual.files)
    got = both.sql(f"SELECT sum(t2m) FROM {call}").fetchall()
    assert got[0][0] == pytest.approx(float(expected["t2m"].sum()), rel=1e-6)
    assert os.path.isdir(virtual.data)


def test_an_icechunk_session_given_from_python_reads_with_access_off(tmp_path: Path) -> None:
    """A session object is the caller's own, opened by its code: read as DuckDB reads a Python
    object registered on the connection, while its repository's path is refused in SQL."""
    import icechunk
    from icechunk_fixtures import dataset, encoding

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    ds = dataset(6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(session.store, zarr_format=3, consolidated=False, encoding=encoding(ds))
    session.commit("six hours")
    con = zarrsql.connect()
    _closed(con, tmp_path / "elsewhere")
    readonly = repo.readonly_session("main")
    got = zarrsql.read_zarr(readonly, connection=con).aggregate("sum(t2m)").fetchall()
    assert got[0][0] == pytest.approx(float(ds["t2m"].sum()), rel=1e-6)
    with pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
        con.sql(f"SELECT count(*) FROM read_zarr('{tmp_path / 'repo'}')").fetchall()


# -- bypasses found by a hunter in session 27 ---------------------------------------------------


def test_an_internal_scan_named_directly_after_the_switch(tree: Path) -> None:
    """A store read before the switch stays registered under an internal name that
    `duckdb_views()` lists; naming it read the store's chunks again."""
    con = zarrsql.connect()
    for folder in ("secret", "ok"):
        con.sql(f"SELECT sum(v) FROM read_zarr('{tree}/{folder}/s.zarr')").fetchall()
    names = [
        n
        for (n,) in con.sql(
            "SELECT view_name FROM duckdb_views() WHERE view_name LIKE '__zarrsql%' "
            "UNION ALL SELECT table_name FROM duckdb_tables() WHERE table_name LIKE '__zarrsql%'"
        ).fetchall()
    ]
    _closed(con, tree / "ok")
    sums = []
    for name in names:
        try:
            sums.append(con.sql(f'SELECT sum(v) FROM "{name}"').fetchall()[0][0])
        except (zarrsql.AccessDeniedError, duckdb.Error) as err:  # 1.5: DuckDB's error carrying the text
            assert f"cannot read '{tree}/secret/s.zarr'" in str(err)
    assert sums
    assert all(s == pytest.approx(_sum(tree / "ok")) for s in sums), sums  # only the allowed store's rows


def test_answers_of_relations_made_before_the_switch(tree: Path) -> None:
    """count(*) and min/max are answered from the coordinates; their relations too must stop."""
    con = zarrsql.connect()
    store = f"{tree}/secret/s.zarr"
    relations = [
        con.sql(f"SELECT count(*) FROM read_zarr('{store}')"),
        con.sql(f"SELECT max(x) FROM read_zarr('{store}')"),
    ]
    before = [r.fetchall() for r in relations]
    assert before == [[(12,)], [(3,)]]  # 4 x 3 cells, x up to 3 (the fixture's arrays)
    _closed(con, tree / "ok")
    for relation in relations:
        with pytest.raises(duckdb.Error, match="enable_external_access"):
            relation.fetchall()


def test_a_store_named_after_the_switch_in_the_same_text_is_not_opened_early(tree: Path) -> None:
    con = zarrsql.connect()
    con.sql("SELECT 1").fetchall()
    switch = f"SET allowed_directories = ['{tree}/ok']; SET enable_external_access = false; "
    for store in (f"{tree}/secret/s.zarr", f"{tree}/secret/missing.zarr"):
        fresh = zarrsql.connect()
        fresh.sql("SELECT 1").fetchall()
        with zarrsql.trace() as t, pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
            fresh.execute(switch + f"SELECT sum(v) FROM read_zarr('{store}')").fetchall()
        assert t.requests == 0  # nothing of it looked at: neither read nor found missing


def test_the_refusal_names_where_a_link_leads(tree: Path) -> None:
    con = zarrsql.connect()
    _closed(con, tree / "ok")
    with pytest.raises(zarrsql.AccessDeniedError) as caught:
        con.sql(f"SELECT * FROM read_zarr('{tree}/ok/to_secret/s.zarr')").fetchall()
    assert f"which leads to '{tree}/secret/s.zarr'" in str(caught.value)


@pytest.fixture
def http_root(tmp_path: Path):
    """ok/ and secret/ stores served by Python's HTTP server, which decodes `%2F` in a path."""
    import re
    import subprocess
    import sys

    _write_store(tmp_path / "ok", 0.0, consolidated=True)  # plain HTTP lists no keys
    _write_store(tmp_path / "secret", 5000.0, consolidated=True)
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = re.search(r"port (\d+)", server.stdout.readline())
        assert port is not None
        yield tmp_path, f"http://127.0.0.1:{port.group(1)}"
    finally:
        server.terminate()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()


def test_an_encoded_slash_cannot_climb_out_of_an_allowed_url(http_root) -> None:
    root, base = http_root
    con = zarrsql.connect()
    _closed(con, f"{base}/ok/")
    (listed,) = con.sql("SELECT current_setting('allowed_directories')").fetchall()[0]
    if f"{base}/ok/" in listed:  # DuckDB 1.5 without httpfs keeps it as a local path: nothing passes
        got = con.sql(f"SELECT sum(v) FROM read_zarr('{base}/ok/s.zarr')").fetchall()
        assert got[0][0] == pytest.approx(_sum(root / "ok"))
    for sneaky in ("..%2Fsecret", "..%2fsecret", "%2E%2E%2Fsecret", "..%5Csecret"):
        with pytest.raises(zarrsql.AccessDeniedError, match=REFUSED):
            con.sql(f"SELECT sum(v) FROM read_zarr('{base}/ok/{sneaky}/s.zarr')").fetchall()


def test_an_icechunk_repository_linked_out_of_the_allowed_folder(tmp_path: Path) -> None:
    """A repository folder inside the allowed one whose parts are links to a repository outside."""
    from icechunk_fixtures import write_virtual

    outside = write_virtual(tmp_path / "outside")
    inside = tmp_path / "ok" / "repo"
    inside.mkdir(parents=True)
    for part in outside.path.iterdir():
        (inside / part.name).symlink_to(part, target_is_directory=part.is_dir())
    con = zarrsql.connect()
    _closed(con, tmp_path / "ok", outside.data)
    call = f"read_zarr('{inside}', virtual_chunks := MAP {{'{outside.prefix}': NULL}})"
    with pytest.raises(zarrsql.AccessDeniedError, match="which leads to"):
        con.sql(f"SELECT count(*) FROM {call}").fetchall()


def test_a_virtual_chunk_file_linked_out_of_its_container(tmp_path: Path) -> None:
    from icechunk_fixtures import netcdf_frame, write_virtual

    virtual = write_virtual(tmp_path / "ok")
    expected = netcdf_frame(virtual.files)
    hidden = tmp_path / "secret" / virtual.files[0].name
    hidden.parent.mkdir()
    virtual.files[0].rename(hidden)
    virtual.files[0].symlink_to(hidden)  # the container holds a link to a file outside
    call = f"read_zarr('{virtual.path}', virtual_chunks := MAP {{'{virtual.prefix}': NULL}})"
    con = zarrsql.connect()
    _closed(con, tmp_path / "ok")
    with pytest.raises(zarrsql.AccessDeniedError, match="which leads to"):
        con.sql(f"SELECT sum(t2m) FROM {call}").fetchall()
    both = zarrsql.connect()
    _closed(both, tmp_path / "ok", tmp_path / "secret")
    got = both.sql(f"SELECT sum(t2m) FROM {call}").fetchall()
    assert got[0][0] == pytest.approx(float(expected["t2m"].sum()), rel=1e-6)
