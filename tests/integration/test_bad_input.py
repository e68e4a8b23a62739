"""Every bad input is refused with a `zarrsql.ZarrSQLError` that names the problem and the fix.

The bad inputs: a missing path, a folder that is no Zarr store, corrupt metadata, corrupt or
truncated chunks, ambiguous or unknown selections, paths that leave the store (`..`, absolute
paths, symbolic links), unsupported data types and codecs, and parameters of the wrong type.
Each is tried through SQL (`con.execute(...)`, `con.sql(...)`) and through the Python API.

A check looks at the message first (the problem and where it is, the fix) and at the
exception's class last, so a failure says which of the two is wrong. A corrupt chunk must fail
the whole query: never a partial result. No test may hang (a per-test timeout is set below).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec

import zarrsql

pytestmark = pytest.mark.timeout(10)


@pytest.fixture
def con() -> Iterator[zarrsql.Connection]:
    with zarrsql.connect() as c:
        yield c


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def failure(run: Callable[[], object]) -> BaseException:
    """The exception `run` raises: a ZarrSQLError, or a DuckDB error (checked by the caller)."""
    try:
        result = run()
    except (zarrsql.ZarrSQLError, duckdb.Error) as err:
        return err
    # never str() a relation here: that would run it
    shown = str(result)[:400] if isinstance(result, list | tuple) else f"a {type(result).__name__}"
    pytest.fail(f"no error was raised; the call returned {shown}")


def check(run: Callable[[], object], cls: type[zarrsql.ZarrSQLError], *fragments: str) -> BaseException:
    """`run` fails; its message holds every fragment (case-insensitive); it is a `cls`."""
    err = failure(run)
    text = str(err)
    for fragment in fragments:
        assert fragment.lower() in text.lower(), f"{fragment!r} is not in the message: {text[:600]!r}"
    assert isinstance(err, cls), f"{type(err).__module__}.{type(err).__name__} is not a {cls.__name__}: {text[:600]!r}"
    return err


#: Consumers that fetch from a DuckDB relation: an error raised while rows stream reaches
#: them as DuckDB's error carrying the same text (API.md: "inside SQL they surface as DuckDB
#: errors whose message is the same text"); `con.execute` re-raises the ZarrSQLError itself.
RELATION_WAYS = {"sql", "sql.fetchall", "sql.df", "sql.arrow", "sql.fetchnumpy", "python"}


def check_streamed(errors: dict[str, BaseException], cls: type[zarrsql.ZarrSQLError]) -> BaseException:
    """Every way failed; `execute` with a `cls`, relations with a DuckDB error holding its text."""
    own = next(err for way, err in errors.items() if way not in RELATION_WAYS)
    assert isinstance(own, cls), f"{type(own).__name__} is not a {cls.__name__}: {str(own)[:300]}"
    for way, err in errors.items():
        if way in RELATION_WAYS and not isinstance(err, cls):
            assert isinstance(err, duckdb.Error), (way, type(err))
            assert str(own) in str(err), (way, str(err)[:600])
    return own


def sql_ways(con: zarrsql.Connection, query: str) -> dict[str, Callable[[], object]]:
    """The SQL ways of running a statement on a zarrsql connection and fetching its rows."""
    return {
        "execute": lambda: con.execute(query).fetchall(),
        "sql": lambda: con.sql(query).fetchall(),
    }


def write_group(path: Path, fmt: int = 3) -> zarr.Group:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(str(path), mode="w", zarr_format=fmt)


def add_array(group: zarr.Group, name: str, dims: list[str], data: np.ndarray, **kwargs: Any) -> zarr.Array:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if group.metadata.zarr_format == 3:
            arr = group.create_array(name, shape=data.shape, dtype=data.dtype, dimension_names=dims, **kwargs)
        else:
            arr = group.create_array(name, shape=data.shape, dtype=data.dtype,
                                     attributes={"_ARRAY_DIMENSIONS": dims}, **kwargs)
        arr[...] = data
    return arr


@pytest.fixture
def two_tables(tmp_path: Path) -> Path:
    """A store with the tables x_y (a, b) and t (c)."""
    path = tmp_path / "two_tables.zarr"
    g = write_group(path)
    add_array(g, "a", ["x", "y"], np.arange(12.0).reshape(4, 3), chunks=(2, 2))
    add_array(g, "b", ["x", "y"], np.arange(12).reshape(4, 3).astype("i4"), chunks=(2, 2))
    add_array(g, "c", ["t"], np.arange(5.0), chunks=(2,))
    add_array(g, "x", ["x"], np.array([10, 20, 30, 40]), chunks=(4,))
    return path


@pytest.fixture
def one_table(tmp_path: Path) -> Path:
    path = tmp_path / "one_table.zarr"
    g = write_group(path)
    add_array(g, "a", ["x", "y"], np.arange(12.0).reshape(4, 3), chunks=(2, 2))
    add_array(g, "x", ["x"], np.array([10.0, 20.0, 30.0, 40.0]), chunks=(4,))
    return path


# --------------------------------------------------------------------------------------
# no store
# --------------------------------------------------------------------------------------


def test_missing_path(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = str(tmp_path / "nope.zarr")
    for run in sql_ways(con, f"SELECT * FROM read_zarr('{store}')").values():
        check(run, zarrsql.StoreNotFoundError, store, "check the path")
    check(lambda: zarrsql.read_zarr(store, connection=con).fetchall(), zarrsql.StoreNotFoundError, store)
    for fn in ("read_zarr_metadata", "read_zarr_tables"):
        check(lambda fn=fn: con.execute(f"SELECT * FROM {fn}('{store}')").fetchall(),
              zarrsql.StoreNotFoundError, store, "check the path")
    check(lambda: zarrsql.read_zarr_metadata(store, connection=con).fetchall(), zarrsql.StoreNotFoundError, store)
    check(lambda: zarrsql.read_zarr_tables(store, connection=con).fetchall(), zarrsql.StoreNotFoundError, store)


def test_path_to_a_file_is_not_a_store(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = tmp_path / "file.zarr"
    store.write_text("not a folder")
    check(lambda: con.execute(f"SELECT * FROM read_zarr('{store}')").fetchall(), zarrsql.StoreNotFoundError,
          str(store))


@pytest.mark.parametrize("where", ["fixture", "empty"])
def test_folder_that_is_not_a_store(where: str, fixture_path: Callable[[str], str], tmp_path: Path,
                                    con: zarrsql.Connection) -> None:
    if where == "fixture":
        store = fixture_path("corrupt/not_a_store")
    else:
        (tmp_path / "empty").mkdir()
        store = str(tmp_path / "empty")
    # names the folder, what is missing (either format's root document), and where to point
    fragments = (store, "not a Zarr store", "zarr.json", ".zgroup", "root")
    for run in sql_ways(con, f"SELECT * FROM read_zarr('{store}')").values():
        check(run, zarrsql.StoreNotFoundError, *fragments)
    check(lambda: con.execute(f"SELECT * FROM read_zarr_tables('{store}')").fetchall(),
          zarrsql.StoreNotFoundError, *fragments)
    check(lambda: zarrsql.read_zarr(store, connection=con).fetchall(), zarrsql.StoreNotFoundError, *fragments)
    check(lambda: zarrsql.read_zarr_metadata(store, connection=con).fetchall(), zarrsql.StoreNotFoundError,
          *fragments)


# --------------------------------------------------------------------------------------
# corrupt metadata
# --------------------------------------------------------------------------------------


def test_corrupt_root_zarr_json(fixture_path: Callable[[str], str], con: zarrsql.Connection) -> None:
    store = fixture_path("corrupt/bad_json.zarr")
    fragments = ("zarr.json", store, "not valid JSON", "rewrite")
    for fn in ("read_zarr", "read_zarr_metadata", "read_zarr_tables"):
        check(lambda fn=fn: con.execute(f"SELECT * FROM {fn}('{store}')").fetchall(), zarrsql.MetadataError,
              *fragments)
    check(lambda: con.sql(f"SELECT * FROM read_zarr('{store}')").fetchall(), zarrsql.MetadataError, *fragments)
    check(lambda: zarrsql.read_zarr(store, connection=con).fetchall(), zarrsql.MetadataError, *fragments)
    check(lambda: zarrsql.read_zarr_tables(store, connection=con).fetchall(), zarrsql.MetadataError, *fragments)


@pytest.mark.parametrize(("key", "text", "fragments"), [
    ("zarr.json", "[1, 2, 3]", ("not a Zarr group",)),
    ("zarr.json", '{"zarr_format": 3, "node_type": "group", "attributes": {', ("not valid JSON",)),
    (".zgroup", '{"zarr_format": 2', ("not valid JSON",)),
], ids=["v3-not-an-object", "v3-truncated", "v2-truncated-zgroup"])
def test_corrupt_root_documents_written_here(key: str, text: str, fragments: tuple[str, ...], tmp_path: Path,
                                             con: zarrsql.Connection) -> None:
    store = tmp_path / "broken.zarr"
    store.mkdir()
    (store / key).write_text(text)
    check(lambda: con.execute(f"SELECT * FROM read_zarr('{store}')").fetchall(), zarrsql.MetadataError,
          key, *fragments)


# --------------------------------------------------------------------------------------
# corrupt or truncated chunks
# --------------------------------------------------------------------------------------


def _truncate(path: Path, keep: float = 0.5) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: max(1, int(len(raw) * keep))])


def _flip_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    path.write_bytes(bytes(raw))


def _corrupt_store(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """A store whose array 'temperature' (12 cells, chunks of 4) has one broken chunk."""
    path = tmp_path / f"{kind}.zarr"
    data = np.arange(12.0) * 1.5
    if kind == "v3-uncompressed-truncated":
        add_array(write_group(path), "temperature", ["i"], data, chunks=(4,), compressors=None)
        _truncate(path / "temperature" / "c" / "1")
    elif kind == "v3-crc32c-bit-flip":
        add_array(write_group(path), "temperature", ["i"], data, chunks=(4,), compressors=Crc32cCodec())
        _flip_byte(path / "temperature" / "c" / "1")
    elif kind == "v3-big-endian-blosc-garbage":
        add_array(write_group(path), "temperature", ["i"], data, chunks=(4,),
                  serializer=BytesCodec(endian="big"), compressors=BloscCodec(cname="lz4", shuffle="shuffle"))
        (path / "temperature" / "c" / "1").write_bytes(b"\x00garbage, not blosc")
    elif kind == "v3-blosc-truncated":
        add_array(write_group(path), "temperature", ["i"], data, chunks=(4,),
                  compressors=BloscCodec(cname="lz4", shuffle="shuffle"))
        _truncate(path / "temperature" / "c" / "1")
    elif kind == "v3-sharded-truncated":
        add_array(write_group(path), "temperature", ["i"], data, chunks=(2,), shards=(4,))
        _truncate(path / "temperature" / "c" / "1")
    elif kind == "v2-blosc-truncated":
        add_array(write_group(path, 2), "temperature", ["i"], data, chunks=(4,),
                  compressors=numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE))
        _truncate(path / "temperature" / "1")
    elif kind == "v2-zstd-too-long":
        add_array(write_group(path, 2), "temperature", ["i"], data, chunks=(4,), compressors=numcodecs.Zstd())
        (path / "temperature" / "1").write_bytes(numcodecs.Zstd().encode(np.arange(7.0).tobytes()))
    else:
        raise AssertionError(kind)
    return path, "temperature"


CORRUPT = ["fixture", "v3-uncompressed-truncated", "v3-crc32c-bit-flip", "v3-big-endian-blosc-garbage",
           "v3-blosc-truncated", "v3-sharded-truncated", "v2-blosc-truncated", "v2-zstd-too-long"]


@pytest.fixture(params=CORRUPT)
def corrupt(request: pytest.FixtureRequest, fixture_path: Callable[[str], str], tmp_path: Path) -> tuple[str, str]:
    """(store, array name) of a store with one corrupt chunk among good ones."""
    if request.param == "fixture":
        return fixture_path("corrupt/bad_chunk.zarr"), "v"
    path, name = _corrupt_store(request.param, tmp_path)
    return str(path), name


def _consumers(con: zarrsql.Connection, store: str, name: str) -> dict[str, Callable[[], object]]:
    q = f"SELECT * FROM read_zarr('{store}')"
    return {
        "execute.fetchall": lambda: con.execute(q).fetchall(),
        "sql.fetchall": lambda: con.sql(q).fetchall(),
        "sql.df": lambda: con.sql(q).df(),
        "sql.arrow": lambda: con.sql(q).to_arrow_table(),
        "sql.fetchnumpy": lambda: con.sql(q).fetchnumpy(),
        "aggregate": lambda: con.execute(f'SELECT sum("{name}"), count(*) FROM read_zarr(\'{store}\')').fetchall(),
        "create table": lambda: con.execute(f"CREATE OR REPLACE TEMP TABLE copy AS {q}"),
        "python": lambda: zarrsql.read_zarr(store, connection=con).fetchall(),
    }


def test_corrupt_chunk_fails_the_whole_query(corrupt: tuple[str, str], con: zarrsql.Connection) -> None:
    """Every way of consuming the whole table fails, naming the array: no partial result."""
    store, name = corrupt
    for way, run in _consumers(con, store, name).items():
        err = failure(run)
        assert f"'{name}'" in str(err), (way, str(err)[:500])
    # nothing half-made survives the failure
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'copy'").fetchall() == [(0,)]


def test_corrupt_chunk_raises_decode_error(corrupt: tuple[str, str], con: zarrsql.Connection) -> None:
    """The failure is a `DecodeError` (a ZarrSQLError) naming the array and what to do."""
    store, name = corrupt
    errors = {way: failure(run) for way, run in _consumers(con, store, name).items() if way != "create table"}
    err = check_streamed(errors, zarrsql.DecodeError)
    assert f"'{name}'" in str(err)
    assert "corrupt" in str(err).lower() or "could not be" in str(err).lower(), str(err)[:300]


def test_corrupt_chunk_in_a_large_table_fails_fast_and_leaves_the_connection_usable(
        tmp_path: Path, con: zarrsql.Connection) -> None:
    """Units decoded in parallel after the broken one must not keep the query alive."""
    path = tmp_path / "many_chunks.zarr"
    add_array(write_group(path), "temperature", ["i", "j"], np.arange(400 * 500.0).reshape(400, 500),
              chunks=(20, 25))
    _truncate(path / "temperature" / "c" / "3" / "7", keep=0.3)
    err = failure(lambda: con.execute(f"SELECT sum(temperature) FROM read_zarr('{path}')").fetchall())
    assert "'temperature'" in str(err)
    # the connection still answers, and a query that skips the broken chunk still works
    assert con.execute("SELECT 42").fetchall() == [(42,)]
    got = con.execute(f"SELECT count(*) FROM read_zarr('{path}') WHERE i < 20").fetchall()
    assert got == [(20 * 500,)]


# --------------------------------------------------------------------------------------
# selections
# --------------------------------------------------------------------------------------


def test_several_tables_without_a_selection(two_tables: Path, con: zarrsql.Connection) -> None:
    fragments = ("x_y", "'/'", "table_name :=", "dims :=", "array_path :=")
    for run in sql_ways(con, f"SELECT * FROM read_zarr('{two_tables}')").values():
        err = check(run, zarrsql.SelectionError, *fragments)
        assert re.search(r"[\[;,]\s*'?t\b", str(err)), str(err)   # the other table, t, is listed too
    check(lambda: zarrsql.read_zarr(str(two_tables), connection=con), zarrsql.SelectionError, *fragments)
    # a string ending in .zarr in FROM takes no parameters: the same error
    check(lambda: con.execute(f"SELECT * FROM '{two_tables}'").fetchall(), zarrsql.SelectionError, *fragments)


def test_unknown_table_name(two_tables: Path, con: zarrsql.Connection) -> None:
    q = f"SELECT * FROM read_zarr('{two_tables}', table_name := 'nope')"
    for run in sql_ways(con, q).values():
        check(run, zarrsql.SelectionError, "'nope'", "x_y")
    check(lambda: zarrsql.read_zarr(str(two_tables), connection=con, table_name="nope"), zarrsql.SelectionError,
          "'nope'", "x_y")
    check(lambda: con.execute(f"SELECT * FROM read_zarr('{two_tables}', \"table\" := 'nope')").fetchall(),
          zarrsql.SelectionError, "'nope'")


@pytest.mark.parametrize("dims", [["y", "x"], ["x"], ["x", "y", "t"], ["X", "Y"]])
def test_unknown_dims(dims: list[str], two_tables: Path, con: zarrsql.Connection) -> None:
    q = f"SELECT * FROM read_zarr('{two_tables}', dims := {dims})"
    for run in sql_ways(con, q).values():
        check(run, zarrsql.SelectionError, str(dims), "x_y")
    check(lambda: zarrsql.read_zarr(str(two_tables), connection=con, dims=dims), zarrsql.SelectionError, str(dims))


def test_table_name_and_dims_together(two_tables: Path, con: zarrsql.Connection) -> None:
    q = f"SELECT * FROM read_zarr('{two_tables}', table_name := 'x_y', dims := ['x', 'y'])"
    check(lambda: con.execute(q).fetchall(), zarrsql.ParameterError, "table_name", "dims")


def test_unknown_group(two_tables: Path, con: zarrsql.Connection) -> None:
    for fn in ("read_zarr", "read_zarr_tables", "read_zarr_metadata"):
        check(lambda fn=fn: con.execute(f"SELECT * FROM {fn}('{two_tables}', group_path := 'nowhere')").fetchall(),
              zarrsql.SelectionError, "nowhere")
    check(lambda: con.execute(f"SELECT * FROM read_zarr('{two_tables}', group_path := 'a')").fetchall(),
          zarrsql.SelectionError, "array_path :=")


def test_array_path_not_in_the_store(two_tables: Path, con: zarrsql.Connection) -> None:
    for fn in ("read_zarr", "read_zarr_metadata", "read_zarr_tables"):
        check(lambda fn=fn: con.execute(f"SELECT * FROM {fn}('{two_tables}', array_path := 'missing')").fetchall(),
              zarrsql.SelectionError, "'missing'", "read_zarr_metadata" if fn == "read_zarr" else "array")
    check(lambda: zarrsql.read_zarr(str(two_tables), connection=con, array_path="missing"), zarrsql.SelectionError,
          "'missing'")


@pytest.fixture
def neighbour(tmp_path: Path, two_tables: Path) -> Path:
    """A second store beside `two_tables`, holding an array 'secret' a path could escape to."""
    path = tmp_path / "neighbour.zarr"
    add_array(write_group(path), "secret", ["s"], np.array([4.0, 2.0]), chunks=(2,))
    return path


@pytest.mark.parametrize("param", ["array_path", "group_path"])
@pytest.mark.parametrize("escape", ["../neighbour.zarr/secret", "a/../../neighbour.zarr/secret", "..", "./a",
                                    "a//b", "a\\..\\b"])
def test_paths_that_leave_the_store_are_refused(param: str, escape: str, two_tables: Path, neighbour: Path,
                                                con: zarrsql.Connection) -> None:
    # the message quotes the path (a backslash may be shown escaped) and says what is allowed
    fragments = ("inside the store", "relative to the store root") + (() if "\\" in escape else (escape,))
    q = f"SELECT * FROM read_zarr('{two_tables}', {param} := '{escape}')"
    for run in sql_ways(con, q).values():
        check(run, zarrsql.ParameterError, *fragments)
    check(lambda: zarrsql.read_zarr(str(two_tables), connection=con, **{param: escape}), zarrsql.ParameterError,
          *fragments)
    for fn in ("read_zarr_metadata", "read_zarr_tables"):
        check(lambda fn=fn: con.execute(f"SELECT * FROM {fn}('{two_tables}', {param} := '{escape}')").fetchall(),
              zarrsql.ParameterError, *fragments)


def test_absolute_array_path_never_reads_outside(two_tables: Path, neighbour: Path, con: zarrsql.Connection) -> None:
    """An absolute path names an array inside the store, never a file elsewhere."""
    outside = str(neighbour / "secret")
    q = f"SELECT * FROM read_zarr('{two_tables}', array_path := '{outside}')"
    err = check(lambda: con.execute(q).fetchall(), zarrsql.ZarrSQLError, "secret")
    assert isinstance(err, (zarrsql.SelectionError, zarrsql.ParameterError)), err
    check(lambda: zarrsql.read_zarr_metadata(str(two_tables), connection=con, array_path=outside).fetchall(),
          zarrsql.ZarrSQLError, "secret")


# --------------------------------------------------------------------------------------
# symbolic links
# --------------------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def test_symlinked_chunk_outside_the_store_is_refused(tmp_path: Path, outside: Path,
                                                      con: zarrsql.Connection) -> None:
    path = tmp_path / "linked.zarr"
    add_array(write_group(path), "v", ["i"], np.arange(6.0), chunks=(3,), compressors=None)
    # replace chunk 1 by a link to a file outside holding other, valid chunk bytes
    (outside / "chunk").write_bytes(np.array([7.0, 7.0, 7.0]).tobytes())
    (path / "v" / "c" / "1").unlink()
    os.symlink(outside / "chunk", path / "v" / "c" / "1")
    q = f"SELECT * FROM read_zarr('{path}')"
    ways = {**sql_ways(con, q), "python": lambda: zarrsql.read_zarr(str(path), connection=con).fetchall()}
    errors = {way: failure(run) for way, run in ways.items()}  # refused: no row of 7.0 comes back
    for way, err in errors.items():
        assert "outside the store" in str(err), (way, str(err)[:300])
    check_streamed(errors, zarrsql.StoreReadError)


def test_symlinked_array_outside_the_store_is_refused(tmp_path: Path, outside: Path,
                                                      con: zarrsql.Connection) -> None:
    other = outside / "other.zarr"
    add_array(write_group(other), "v", ["i"], np.array([7.0, 7.0]), chunks=(2,))
    path = tmp_path / "linked.zarr"
    add_array(write_group(path), "w", ["i"], np.arange(2.0), chunks=(2,))
    os.symlink(other / "v", path / "v", target_is_directory=True)
    q = f"SELECT * FROM read_zarr('{path}', array_path := 'v')"
    for run in sql_ways(con, q).values():
        check(run, zarrsql.StoreReadError, "outside the store", "'v'")
    # the link is refused by name; the rest of the store reads (tests/integration/test_store_errors.py)
    listed = dict(con.execute(f"SELECT name, role FROM read_zarr_metadata('{path}')").fetchall())
    assert listed == {"v": "unsupported", "w": "data"}
    assert con.execute(f"SELECT w FROM read_zarr('{path}')").fetchall() == [(0.0,), (1.0,)]


def test_symlinked_metadata_document_outside_the_store_is_refused(tmp_path: Path, outside: Path,
                                                                   con: zarrsql.Connection) -> None:
    path = tmp_path / "linked.zarr"
    add_array(write_group(path), "v", ["i"], np.arange(2.0), chunks=(2,))
    shutil.move(path / "v" / "zarr.json", outside / "zarr.json")
    os.symlink(outside / "zarr.json", path / "v" / "zarr.json")
    check(lambda: con.execute(f"SELECT * FROM read_zarr('{path}')").fetchall(), zarrsql.StoreReadError,
          "outside the store")


def test_symlinks_inside_the_store_are_followed(tmp_path: Path, con: zarrsql.Connection) -> None:
    """Control: a link that stays inside the store, and a store path that is itself a link, read."""
    real = tmp_path / "real.zarr"
    add_array(write_group(real), "v", ["i"], np.arange(6.0), chunks=(3,), compressors=None)
    shutil.move(real / "v" / "c" / "1", real / "spare")
    os.symlink(real / "spare", real / "v" / "c" / "1")
    alias = tmp_path / "alias.zarr"
    os.symlink(real, alias, target_is_directory=True)
    for store in (real, alias):
        assert con.execute(f"SELECT sum(v), count(*) FROM read_zarr('{store}')").fetchall() == [(15.0, 6)]


# --------------------------------------------------------------------------------------
# unsupported data types and codecs
# --------------------------------------------------------------------------------------


def _metadata(con: zarrsql.Connection, store: Path) -> dict[str, tuple[str, str, dict]]:
    rows = con.execute(f"SELECT name, role, dtype, attrs FROM read_zarr_metadata('{store}')").fetchall()
    return {name: (role, dtype, json.loads(attrs)) for name, role, dtype, attrs in rows}


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def complex_store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "complex.zarr"
    g = write_group(path, request.param)
    add_array(g, "cplx", ["i"], np.array([1 + 2j, 3 - 4j, 0j]), chunks=(2,))
    add_array(g, "good", ["i"], np.array([1.0, 2.0, 3.0]), chunks=(2,))
    return path


def test_complex_dtype_is_listed_as_unsupported(complex_store: Path, con: zarrsql.Connection) -> None:
    meta = _metadata(con, complex_store)
    role, dtype, attrs = meta["cplx"]
    assert (role, dtype) == ("unsupported", "unsupported")
    assert "complex" in attrs.get("error", "")
    assert meta["good"][:2] == ("data", "float64")


def test_complex_dtype_is_refused_by_read_zarr(complex_store: Path, con: zarrsql.Connection) -> None:
    for q in (f"SELECT * FROM read_zarr('{complex_store}')",
              f"SELECT * FROM read_zarr('{complex_store}', array_path := 'cplx')"):
        for run in sql_ways(con, q).values():
            check(run, zarrsql.UnsupportedError, "'cplx'", "complex")
    check(lambda: zarrsql.read_zarr(str(complex_store), connection=con, table_name="i"), zarrsql.UnsupportedError,
          "'cplx'", "complex", "array_path := 'good'")
    # the other array of the group still reads on its own
    got = con.execute(f"SELECT * FROM read_zarr('{complex_store}', array_path := 'good') ORDER BY i").fetchall()
    assert got == [(0, 1.0), (1, 2.0), (2, 3.0)]


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def unknown_codec_store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Arrays 'v' (its codec renamed to one nobody knows) and 'w' (intact) over dimension i."""
    path = tmp_path / "codec.zarr"
    g = write_group(path, request.param)
    add_array(g, "v", ["i"], np.arange(6.0), chunks=(3,))
    add_array(g, "w", ["i"], np.arange(6.0) * 2, chunks=(3,))
    if request.param == 3:
        doc_path = path / "v" / "zarr.json"
        doc = json.loads(doc_path.read_text())
        doc["codecs"] = [*doc["codecs"][:-1], {"name": "frobnicate", "configuration": {"level": 3}}]
    else:
        doc_path = path / "v" / ".zarray"
        doc = json.loads(doc_path.read_text())
        doc["compressor"] = {"id": "frobnicate", "level": 3}
    doc_path.write_text(json.dumps(doc))
    return path


def test_unknown_codec_is_listed_as_unsupported(unknown_codec_store: Path, con: zarrsql.Connection) -> None:
    """An array whose codec zarrsql cannot decode is listed with role and dtype 'unsupported'
    and the reason in attrs (API.md, read_zarr_metadata)."""
    meta = _metadata(con, unknown_codec_store)
    role, dtype, attrs = meta["v"]
    assert (role, dtype) == ("unsupported", "unsupported"), meta["v"]
    assert "frobnicate" in json.dumps(attrs)
    assert meta["w"][:2] == ("data", "float64")


def test_unknown_codec_is_refused_by_read_zarr(unknown_codec_store: Path, con: zarrsql.Connection) -> None:
    """Refused when the query is planned (before any row), as an UnsupportedError naming the
    array and the codec."""
    for q in (f"SELECT * FROM read_zarr('{unknown_codec_store}')",
              f"SELECT * FROM read_zarr('{unknown_codec_store}', array_path := 'v')"):
        check(lambda q=q: con.sql(q), zarrsql.UnsupportedError, "'v'", "frobnicate")
        for run in sql_ways(con, q).values():
            check(run, zarrsql.UnsupportedError, "'v'", "frobnicate")
    got = con.execute(f"SELECT * FROM read_zarr('{unknown_codec_store}', array_path := 'w') ORDER BY i").fetchall()
    assert got == [(i, 2.0 * i) for i in range(6)]


INVALID_METADATA = [
    # (id, change to the array's zarr.json, fragment of the reason)
    ("rectilinear-chunk-grid", {"chunk_grid": {"name": "rectilinear", "configuration": {"chunk_shapes": [[2, 4]]}}},
     "chunk grid"),
    ("negative-shape", {"shape": [-6]}, "shape"),
    ("float128", {"data_type": "float128"}, "float128"),
    ("dimension-names-of-another-rank", {"dimension_names": ["i", "j"]}, "dimension names"),
    ("zero-chunk-length", {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [0]}}}, "chunk"),
]


@pytest.mark.parametrize(("change", "reason"), [(c[1], c[2]) for c in INVALID_METADATA],
                         ids=[c[0] for c in INVALID_METADATA])
def test_invalid_array_metadata_is_listed_and_refused(change: dict[str, Any], reason: str, tmp_path: Path,
                                                      con: zarrsql.Connection) -> None:
    """An array whose own metadata is invalid is listed as unsupported with the reason, its
    read is refused naming it, and the rest of the store still reads."""
    path = tmp_path / "invalid.zarr"
    g = write_group(path)
    add_array(g, "v", ["i"], np.arange(6.0), chunks=(3,))
    add_array(g, "w", ["i"], np.arange(6.0) * 2, chunks=(3,))
    doc_path = path / "v" / "zarr.json"
    doc_path.write_text(json.dumps({**json.loads(doc_path.read_text()), **change}))
    role, dtype, attrs = _metadata(con, path)["v"]
    assert (role, dtype) == ("unsupported", "unsupported"), (role, dtype, attrs)
    assert reason in attrs.get("error", ""), attrs
    q = f"SELECT * FROM read_zarr('{path}', array_path := 'v')"
    err = check(lambda: con.execute(q).fetchall(), zarrsql.ZarrSQLError, "'v'", reason)
    assert isinstance(err, (zarrsql.UnsupportedError, zarrsql.MetadataError)), err
    got = con.execute(f"SELECT sum(w) FROM read_zarr('{path}', array_path := 'w')").fetchall()
    assert got == [(30.0,)]


# --------------------------------------------------------------------------------------
# parameters of the wrong type
# --------------------------------------------------------------------------------------

WRONG_PARAMS = [
    # (SQL text, Python keyword arguments, fragments of the message)
    ("dims := 'xy'", {"dims": "xy"}, ("dims", "list")),
    ("dims := ['x', NULL]", {"dims": ["x", None]}, ("dims", "list")),
    ("dims := [1, 2]", {"dims": [1, 2]}, ("dims",)),
    ("decode_times := 'yes'", {"decode_times": "yes"}, ("decode_times", "true or false")),
    ("nan_as_null := 1", {"nan_as_null": 1}, ("nan_as_null", "true or false")),
    ("bounds := 5", {"bounds": 5}, ("bounds", "[dimension, low, high]")),
    ("bounds := ['x', '1', '2']", {"bounds": ["x", "1", "2"]}, ("bounds", "[dimension, low, high]")),
    ("bounds := [['x', '1']]", {"bounds": [["x", "1"]]}, ("bounds", "[dimension, low, high]")),
    ("table_name := 42", {"table_name": 42}, ("table_name", "string")),
    ("group_path := ['a']", {"group_path": ["a"]}, ("group_path", "string")),
    ("array_path := 3.5", {"array_path": 3.5}, ("array_path", "string")),
    ("storage_options := 'anon'", {"storage_options": "anon"}, ("storage_options", "MAP")),
]


@pytest.mark.parametrize(("sql_param", "py_params", "fragments"), WRONG_PARAMS, ids=[w[0] for w in WRONG_PARAMS])
def test_parameter_of_the_wrong_type(sql_param: str, py_params: dict[str, Any], fragments: tuple[str, ...],
                                     one_table: Path, con: zarrsql.Connection) -> None:
    q = f"SELECT * FROM read_zarr('{one_table}', {sql_param})"
    for run in sql_ways(con, q).values():
        check(run, zarrsql.ParameterError, *fragments)
    check(lambda: zarrsql.read_zarr(str(one_table), connection=con, **py_params).fetchall(),
          zarrsql.ParameterError, *fragments)


def test_store_argument_of_the_wrong_type(con: zarrsql.Connection) -> None:
    check(lambda: con.execute("SELECT * FROM read_zarr(42)").fetchall(), zarrsql.ParameterError, "store")
    check(lambda: con.execute("SELECT * FROM read_zarr(NULL)").fetchall(), zarrsql.ParameterError, "store")


@pytest.mark.parametrize("bounds", ["[['nope', '1', '2']]", "[['x', 'abc', NULL]]", "[['x', '30', '10']]",
                                    "[['y', '0', '1']]"],
                         ids=["unknown-dimension", "not-a-number", "low-above-high", "positional-dimension"])
def test_bounds_with_bad_values(bounds: str, one_table: Path, con: zarrsql.Connection) -> None:
    q = f"SELECT * FROM read_zarr('{one_table}', bounds := {bounds})"
    check(lambda: con.execute(q).fetchall(), zarrsql.ParameterError, "bounds :=")


# --------------------------------------------------------------------------------------
# errors of the listings through a lazily run relation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", ["read_zarr_metadata", "read_zarr_tables"])
@pytest.mark.parametrize("case", ["missing", "not_a_store", "bad_json", "escape"])
def test_listing_errors_reach_sql_relations_as_zarrsql_errors(fn: str, case: str, tmp_path: Path,
                                                                fixture_path: Callable[[str], str],
                                                                con: zarrsql.Connection) -> None:
    """`con.sql(...)` runs a SELECT only when its rows are fetched; the listing's error must
    still arrive as the ZarrSQLError, as it does for `con.execute(...)` and for read_zarr."""
    store, extra, cls = {
        "missing": (str(tmp_path / "nope.zarr"), "", zarrsql.StoreNotFoundError),
        "not_a_store": (fixture_path("corrupt/not_a_store"), "", zarrsql.StoreNotFoundError),
        "bad_json": (fixture_path("corrupt/bad_json.zarr"), "", zarrsql.MetadataError),
        "escape": (fixture_path("air_temperature.zarr"), ", array_path := '../x'", zarrsql.ParameterError),
    }[case]
    q = f"SELECT * FROM {fn}('{store}'{extra})"
    expected = failure(lambda: con.execute(q).fetchall())
    assert isinstance(expected, cls)
    err = check(lambda: con.sql(q).fetchall(), cls)
    assert str(err) == str(expected)
