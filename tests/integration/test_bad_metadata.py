"""Bad metadata documents are refused with a `MetadataError` naming the document and the fault.

Stores are written by zarr-python, then one document is damaged the way a bug, a hostile
store or a concurrent writer would: nested thousands of levels deep, fields of the wrong JSON
type (attributes, codecs, codec configurations, compressor, filters, shape, chunk grid, data
type, fill value, dimension names, chunk key encoding, node type, zarr_format, v2 order and
separator, consolidated blocks), truncated mid-rewrite, non-UTF-8, absurd sizes.

The rule the tests pin down, for every entry point (SQL `read_zarr`, `read_zarr_tables`,
`read_zarr_metadata`; the Python `zarrsql.read_zarr` and `zarrsql.read_zarr_metadata`):
- a damaged root document (or consolidated document) fails everything: nothing can be trusted;
- a damaged array or group document fails every read that could involve the node (the
  group's table when nothing else is readable, the node by path, a table whose coordinate it
  may be) — never "has no tables", never positions in place of coordinate values;
- listings still list the damaged node, as unsupported, with the error in `attrs`;
- no message carries DuckDB's "Python exception" text or a traceback.
Nodes whose names start with a dot are ordinary nodes (zarr-python reads them).
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import zarrsql

pytestmark = pytest.mark.timeout(60)

FORMATS = pytest.mark.parametrize("fmt", [2, 3], ids=["v2", "v3"])


@pytest.fixture
def con() -> Iterator[zarrsql.Connection]:
    with zarrsql.connect() as c:
        yield c


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def _dims(fmt: int, *names: str) -> dict[str, Any]:
    return {"dimension_names": list(names)} if fmt == 3 else {"attributes": {"_ARRAY_DIMENSIONS": list(names)}}


def write_store(path: Path, fmt: int, *, data: str = "v", coord: str = "t", consolidated: bool = False) -> Path:
    """A group with a coordinate `coord` (0, 10, 20, 30) and a data array `data` along it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(str(path), mode="w", zarr_format=fmt)
        g.create_array(coord, shape=(4,), chunks=(2,), dtype="i8", **_dims(fmt, coord))[:] = np.arange(4) * 10
        g.create_array(data, shape=(4,), chunks=(2,), dtype="f8", **_dims(fmt, coord))[:] = [0.5, 1.5, 2.5, 3.5]
        if consolidated:
            zarr.consolidate_metadata(str(path), zarr_format=fmt)
    return path


def array_doc(fmt: int, node: str) -> str:
    return f"{node}/zarr.json" if fmt == 3 else f"{node}/.zarray"


def edit(path: Path, change: Callable[[Any], Any]) -> None:
    """Rewrite a JSON document through `change` (which edits in place or returns a new value)."""
    doc = json.loads(path.read_text())
    new = change(doc)
    path.write_text(json.dumps(doc if new is None else new))


def failure(run: Callable[[], object]) -> BaseException:
    try:
        result = run()
    except zarrsql.ZarrSQLError as err:
        return err
    pytest.fail(f"no error was raised; the call returned {str(result)[:300]}")


def refused(run: Callable[[], object], cls: type[zarrsql.ZarrSQLError], *fragments: str, way: str = "") -> str:
    """`run` raises a `cls` whose message holds every fragment and no DuckDB traceback text."""
    err = failure(run)
    text = str(err)
    for fragment in fragments:
        assert fragment in text, f"{way}: {fragment!r} is not in the message: {text[:600]!r}"
    assert "Python exception" not in text, f"{way}: {text[:600]}"
    assert "Traceback" not in text, f"{way}: {text[:600]}"
    assert isinstance(err, cls), f"{way}: {type(err).__name__} is not a {cls.__name__}: {text[:600]!r}"
    return text


def sql_args(params: dict[str, str]) -> str:
    return "".join(f", {k} := '{v}'" for k, v in params.items())


def every_read(con: zarrsql.Connection, store: Path, **params: str) -> dict[str, Callable[[], object]]:
    """Every entry point, with the same selection."""
    s, args = str(store), sql_args(params)
    return {
        "SQL read_zarr": lambda: con.execute(f"SELECT * FROM read_zarr('{s}'{args})").fetchall(),
        "SQL read_zarr_tables": lambda: con.execute(f"SELECT * FROM read_zarr_tables('{s}'{args})").fetchall(),
        "SQL read_zarr_metadata": lambda: con.execute(f"SELECT * FROM read_zarr_metadata('{s}'{args})").fetchall(),
        "Python read_zarr_metadata": lambda: zarrsql.read_zarr_metadata(s, connection=con, **params).fetchall(),
        "Python read_zarr": lambda: zarrsql.read_zarr(s, connection=con, **params).fetchall(),
    }


def table_reads(con: zarrsql.Connection, store: Path, **params: str) -> dict[str, Callable[[], object]]:
    """The entry points that read or resolve one table: `read_zarr`, and `read_zarr_tables`
    with `array_path :=` (without it, that is a listing of the tables that can be made)."""
    listing = "array_path" not in params
    return {k: v for k, v in every_read(con, store, **params).items() if "metadata" not in k
            and not (listing and "tables" in k)}  # fmt: skip


def metadata_row(con: zarrsql.Connection, store: Path, name: str) -> dict[str, Any]:
    rel = con.sql(f"SELECT * FROM read_zarr_metadata('{store}')")
    rows = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    return next(r for r in rows if r["name"] == name)


def assert_listed_as_broken(con: zarrsql.Connection, store: Path, name: str, *fragments: str) -> None:
    """The listing keeps the node, as unsupported, with its error naming the document."""
    row = metadata_row(con, store, name)
    assert row["dtype"] == "unsupported"
    assert row["role"] == "unsupported"
    error = json.loads(row["attrs"])["error"]
    for fragment in fragments:
        assert fragment in error, (fragment, error)


def assert_node_refused(con: zarrsql.Connection, store: Path, node: str, *fragments: str) -> None:
    """Every read that involves a damaged array node fails with a MetadataError; it is still listed."""
    for way, run in table_reads(con, store).items():  # the group's only data array is the broken one
        text = refused(run, zarrsql.MetadataError, f"'/{node}'", *fragments, way=way)
        assert "has no tables" not in text, way
    for way, run in table_reads(con, store, array_path=node).items():
        refused(run, zarrsql.MetadataError, *fragments, way=way)
    assert_listed_as_broken(con, store, node, *fragments)


def zarr_read(store: Path, path: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(zarr.open_array(str(store), path=path, mode="r")[...])


# --------------------------------------------------------------------------------------
# 1. deep nesting: no RecursionError from inside the UDF
# --------------------------------------------------------------------------------------


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_a_deeply_nested_array_document_is_a_metadata_error(
    depth: int, tmp_path: Path, con: zarrsql.Connection
) -> None:
    store = write_store(tmp_path / "s.zarr", 3)
    text = (store / "v/zarr.json").read_text()
    (store / "v/zarr.json").write_text(text.replace('"attributes": {}', f'"attributes": {{"a": {_nest(depth)}}}'))
    assert_node_refused(con, store, "v", "'v/zarr.json'", "levels deep")


@pytest.mark.parametrize(
    ("fmt", "document", "depth"),
    [(3, "zarr.json", 1000), (2, ".zattrs", 1000), (2, ".zmetadata", 100_000), (3, "zarr.json", 100_000)],
)
def test_a_deeply_nested_root_document_fails_every_read(
    fmt: int, document: str, depth: int, tmp_path: Path, con: zarrsql.Connection
) -> None:
    store = write_store(tmp_path / "s.zarr", fmt, consolidated=document == ".zmetadata")
    doc = json.loads((store / document).read_text())
    doc["deep"] = "MARK"
    (store / document).write_text(json.dumps(doc).replace('"MARK"', _nest(depth)))
    for way, run in every_read(con, store).items():
        refused(run, zarrsql.MetadataError, f"'{document}'", str(store), "levels deep", way=way)


# --------------------------------------------------------------------------------------
# 2./3. fields of the wrong JSON type
# --------------------------------------------------------------------------------------


def _set(key: str, value: Any) -> Callable[[dict], None]:
    return lambda d: d.__setitem__(key, value)


def _drop(key: str) -> Callable[[dict], None]:
    def drop(d: dict) -> None:
        del d[key]

    return drop


def _codec_config_list(d: dict) -> None:
    d["codecs"][0]["configuration"] = ["endian", "little"]


def _grid_config(value: Any) -> Callable[[dict], None]:
    return lambda d: d["chunk_grid"].__setitem__("configuration", value)


V3_ARRAY_FAULTS = {
    "attributes int": (_set("attributes", 1), "'attributes' must be a JSON object"),
    "attributes list": (_set("attributes", ["a"]), "'attributes' must be a JSON object"),
    "codecs true": (_set("codecs", True), "'codecs' must be a JSON array"),
    "codecs object": (_set("codecs", {"name": "bytes"}), "'codecs' must be a JSON array"),
    "codec configuration list": (_codec_config_list, "'configuration' must be a JSON object"),
    "codec without name": (_set("codecs", [{"configuration": {}}]), "a codec's 'name' must be a string"),
    "codec a number": (_set("codecs", [5]), "each codec must be a JSON object"),
    "bytes endian": (_set("codecs", [{"name": "bytes", "configuration": {"endian": 1}}]), "'endian'"),
    "transpose order": (_set("codecs", [{"name": "transpose", "configuration": {"order": [3]}}]), "transpose"),
    "sharding configuration": (_set("codecs", [{"name": "sharding_indexed", "configuration": 5}]), "configuration"),
    "shape string": (_set("shape", "4"), "shape must be a list of integers"),
    "shape negative": (_set("shape", [-4]), "shape must be a list of integers"),
    "shape float": (_set("shape", [4.0]), "shape must be a list of integers"),
    "shape of 2**64": (_set("shape", [2**64]), "shape must be a list of integers from 0 to 2**63-1"),
    "too many elements": (_set("shape", [2**40, 2**40]), "more than 2**63-1 elements"),
    "chunk_grid list": (_set("chunk_grid", ["regular"]), "'chunk_grid' must be a JSON object"),
    "chunk_grid missing": (_drop("chunk_grid"), "'chunk_grid' must be a JSON object"),
    "chunk_grid configuration": (_grid_config("x"), "'configuration' must be a JSON object"),
    "chunk_shape zero": (_grid_config({"chunk_shape": [0]}), "chunk_shape must be a list of integers"),
    "chunk_shape bool": (_grid_config({"chunk_shape": [True]}), "chunk_shape must be a list of integers"),
    "data_type number": (_set("data_type", 5), "data_type must be a name or an object"),
    "fill_value list": (_set("fill_value", [1.0]), "fill_value must be a JSON number"),
    "fill_value object": (_set("fill_value", {"a": 1}), "fill_value must be a JSON number"),
    "fill_value text": (_set("fill_value", "lots"), "fill_value 'lots' is not a value of data type float64"),
    "dimension_names string": (_set("dimension_names", "t"), "dimension names"),
    "dimension_names length": (_set("dimension_names", ["t", "u"]), "dimension names"),
    "chunk_key_encoding list": (_set("chunk_key_encoding", ["default"]), "'chunk_key_encoding' must be a JSON object"),
    "separator": (_set("chunk_key_encoding", {"name": "default", "configuration": {"separator": 1}}), "'separator'"),
    "node_type number": (_set("node_type", 5), "has node_type 5"),
    "node_type missing": (_drop("node_type"), "has node_type None"),
    "zarr_format 2": (_set("zarr_format", 2), "zarr_format must be 3"),
    "storage_transformers": (_set("storage_transformers", 5), "'storage_transformers' must be a JSON array"),
    "not an object": (lambda d: [d], "is not a JSON object"),
}


@pytest.mark.parametrize("fault", sorted(V3_ARRAY_FAULTS))
def test_a_v3_array_field_of_the_wrong_type_is_a_metadata_error(
    fault: str, tmp_path: Path, con: zarrsql.Connection
) -> None:
    change, message = V3_ARRAY_FAULTS[fault]
    store = write_store(tmp_path / "s.zarr", 3)
    edit(store / "v/zarr.json", change)
    assert_node_refused(con, store, "v", "v/zarr.json", message)


V2_ARRAY_FAULTS = {
    "compressor int": (".zarray", _set("compressor", 5), "'compressor' must be a JSON object"),
    "compressor without id": (".zarray", _set("compressor", {"level": 1}), "the compressor's 'id' must be a string"),
    "filters int": (".zarray", _set("filters", 5), "'filters' must be null or a JSON array"),
    "filters of strings": (".zarray", _set("filters", ["zlib"]), "each filter must be a JSON object"),
    "shape missing": (".zarray", _drop("shape"), "shape must be a list of integers"),
    "chunks string": (".zarray", _set("chunks", "2"), "chunks must be a list of integers"),
    "chunks mismatch": (".zarray", _set("chunks", [2, 2]), "do not match shape"),
    "dtype number": (".zarray", _set("dtype", 8), "dtype must be a numpy type string"),
    "fill_value list": (".zarray", _set("fill_value", [0]), "fill_value must be a JSON number"),
    "order": (".zarray", _set("order", "Z"), '\'order\' must be "C" or "F"'),
    "dimension_separator": (".zarray", _set("dimension_separator", 1), "'dimension_separator'"),
    "zarr_format 3": (".zarray", _set("zarr_format", 3), "zarr_format must be 2"),
    "zarray a list": (".zarray", lambda d: [d], "the document must be a JSON object"),
    "zattrs int": (".zattrs", lambda d: 1, "the document must be a JSON object"),
    "zattrs list": (".zattrs", lambda d: [d], "the document must be a JSON object"),
    "_ARRAY_DIMENSIONS string": (".zattrs", _set("_ARRAY_DIMENSIONS", "t"), "dimension names"),
}


@pytest.mark.parametrize("consolidated", [False, True], ids=["walked", "consolidated"])
@pytest.mark.parametrize("fault", sorted(V2_ARRAY_FAULTS))
def test_a_v2_array_field_of_the_wrong_type_is_a_metadata_error(
    fault: str, consolidated: bool, tmp_path: Path, con: zarrsql.Connection
) -> None:
    document, change, message = V2_ARRAY_FAULTS[fault]
    store = write_store(tmp_path / "s.zarr", 2)
    edit(store / "v" / document, change)
    if consolidated:  # the damaged document reaches zarrsql inside .zmetadata instead
        docs = {p.relative_to(store).as_posix(): json.loads(p.read_text()) for p in store.rglob(".z*")}
        (store / ".zmetadata").write_text(json.dumps({"metadata": docs, "zarr_consolidated_format": 1}))
    assert_node_refused(con, store, "v", document, message)


def test_a_consolidated_v3_entry_of_the_wrong_type_names_its_entry(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = write_store(tmp_path / "s.zarr", 3, consolidated=True)
    edit(store / "zarr.json", lambda d: d["consolidated_metadata"]["metadata"]["v"].__setitem__("codecs", True))
    assert_node_refused(con, store, "v", "consolidated_metadata['v']", "'codecs' must be a JSON array")
    edit(store / "zarr.json", lambda d: d["consolidated_metadata"]["metadata"].__setitem__("v", 5))
    assert_node_refused(con, store, "v", "consolidated_metadata['v']", "is not a JSON object")


ROOT_FAULTS = {
    "v3 attributes int": (3, False, "zarr.json", _set("attributes", 1), "'attributes' must be a JSON object"),
    "v3 zarr_format 2": (3, False, "zarr.json", _set("zarr_format", 2), "zarr_format must be 3"),
    "v3 consolidated_metadata int": (3, True, "zarr.json", _set("consolidated_metadata", 5), "consolidated_metadata"),
    "v3 consolidated metadata list": (
        3, True, "zarr.json", lambda d: d["consolidated_metadata"].__setitem__("metadata", []), "'metadata'",
    ),
    "v3 consolidated kind": (
        3, True, "zarr.json", lambda d: d["consolidated_metadata"].__setitem__("kind", 1), "'kind'",
    ),
    "v2 consolidated format": (
        2, True, ".zmetadata", _set("zarr_consolidated_format", "1"), "'zarr_consolidated_format'",
    ),
    "v2 zgroup list": (2, False, ".zgroup", lambda d: [d], "the document must be a JSON object"),
    "v2 zgroup format": (2, False, ".zgroup", _set("zarr_format", 3), "zarr_format must be 2"),
    "v2 zattrs int": (2, False, ".zattrs", lambda d: 1, "'.zattrs'"),
    "v2 zmetadata list": (2, True, ".zmetadata", lambda d: [d], "'.zmetadata'"),
    "v2 zmetadata metadata int": (2, True, ".zmetadata", _set("metadata", 5), "'metadata' must be a JSON object"),
    "v2 consolidated root zattrs": (
        2, True, ".zmetadata", lambda d: d["metadata"].__setitem__(".zattrs", [1]), "'.zattrs'",
    ),
}  # fmt: skip


@pytest.mark.parametrize("fault", sorted(ROOT_FAULTS))
def test_a_damaged_root_document_fails_every_read(fault: str, tmp_path: Path, con: zarrsql.Connection) -> None:
    fmt, consolidated, document, change, message = ROOT_FAULTS[fault]
    store = write_store(tmp_path / "s.zarr", fmt, consolidated=consolidated)
    edit(store / document, change)
    for way, run in every_read(con, store).items():
        refused(run, zarrsql.MetadataError, str(store), message, way=way)


@FORMATS
def test_a_damaged_subgroup_document_is_refused_by_path_and_listed(
    fmt: int, tmp_path: Path, con: zarrsql.Connection
) -> None:
    store = tmp_path / "s.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(store), mode="w", zarr_format=fmt)
        write_store(store / "g", fmt)
        root.create_array("u", shape=(3,), dtype="i4", **_dims(fmt, "i"))[:] = [1, 2, 3]
    document = "g/zarr.json" if fmt == 3 else "g/.zgroup"
    edit(store / document, _set("attributes", 1) if fmt == 3 else _set("zarr_format", "2"))
    message = "'attributes' must be a JSON object" if fmt == 3 else "zarr_format must be 2"
    for way, run in table_reads(con, store, group_path="g").items():
        refused(run, zarrsql.MetadataError, document, message, way=way)
    assert_listed_as_broken(con, store, "g", document, message)
    # the rest of the store still reads
    assert con.execute(f"SELECT u FROM read_zarr('{store}')").fetchall() == [(v,) for v in zarr_read(store, "u")]


# --------------------------------------------------------------------------------------
# 4. names starting with a dot are nodes like any other
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("consolidated", [False, True], ids=["walked", "consolidated"])
@FORMATS
def test_a_node_named_with_a_leading_dot_is_visible(
    fmt: int, consolidated: bool, tmp_path: Path, con: zarrsql.Connection
) -> None:
    store = tmp_path / "s.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(str(store), mode="w", zarr_format=fmt)
        g.create_array(".t", shape=(3,), dtype="i4", **_dims(fmt, ".t"))[:] = [5, 6, 7]
        g.create_array(".hidden", shape=(3,), dtype="f8", **_dims(fmt, ".t"))[:] = [0.25, 0.5, 0.75]
        sub = g.create_group(".g")
        sub.create_array("w", shape=(2,), dtype="i2")[:] = [8, 9]
        if consolidated:
            zarr.consolidate_metadata(str(store), zarr_format=fmt)
    # the oracle: zarr-python's reading of the same nodes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sorted(zarr.open_group(str(store), mode="r").array_keys()) == [".hidden", ".t"]
    names = {r[0] for r in con.execute(f"SELECT name FROM read_zarr_metadata('{store}')").fetchall()}
    assert names == {".t", ".hidden", ".g/w"}
    rows = con.execute(f'SELECT ".t", ".hidden" FROM read_zarr(\'{store}\') ORDER BY 1').fetchall()
    assert rows == list(zip(zarr_read(store, ".t").tolist(), zarr_read(store, ".hidden").tolist(), strict=True))
    path_rows = con.execute(f"SELECT * FROM read_zarr('{store}', array_path := '.g/w')").fetchall()
    assert [r[-1] for r in path_rows] == zarr_read(store, ".g/w").tolist()
    tables = con.execute(f"SELECT data_vars FROM read_zarr_tables('{store}')").fetchall()
    assert tables == [([".hidden"],)]


# --------------------------------------------------------------------------------------
# 5. a document read while being rewritten (truncated) names itself, never "has no tables"
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("consolidated", [False, True], ids=["walked", "consolidated"])
@FORMATS
def test_a_half_written_data_array_document_names_itself(
    fmt: int, consolidated: bool, tmp_path: Path, con: zarrsql.Connection
) -> None:
    store = write_store(tmp_path / "s.zarr", fmt)
    document = array_doc(fmt, "v")
    whole = (store / document).read_bytes()
    (store / document).write_bytes(whole[: len(whole) // 2])
    if consolidated and fmt == 3:  # the half-written document is the root, holding everything
        whole = (store / "zarr.json").read_bytes()
        (store / "zarr.json").write_bytes(whole[: len(whole) // 2])
        for way, run in every_read(con, store).items():
            refused(run, zarrsql.MetadataError, "'zarr.json'", "is not valid JSON", "read again", way=way)
        return
    for way, run in table_reads(con, store).items():
        text = refused(run, zarrsql.MetadataError, f"'{document}'", "is not valid JSON", "read again", way=way)
        assert "has no tables" not in text, way
    assert_listed_as_broken(con, store, "v", document, "is not valid JSON")
    # once the writer is done, the next read sees the whole document (the cache revalidates)
    (store / document).write_bytes(whole)
    got = con.execute(f"SELECT t, v FROM read_zarr('{store}') ORDER BY t").fetchall()
    assert got == list(zip(zarr_read(store, "t").tolist(), zarr_read(store, "v").tolist(), strict=True))


@FORMATS
def test_a_half_written_coordinate_document_refuses_the_table(
    fmt: int, tmp_path: Path, con: zarrsql.Connection
) -> None:
    """Reading the table anyway would give positions (0, 1, 2, 3) instead of t's values."""
    store = write_store(tmp_path / "s.zarr", fmt)
    document = array_doc(fmt, "t")
    whole = (store / document).read_bytes()
    (store / document).write_bytes(whole[:-7])
    reads = {
        **table_reads(con, store),
        **{f"{k} by name": v for k, v in table_reads(con, store, table_name="t").items()},
        **{f"{k} by path": v for k, v in table_reads(con, store, array_path="v").items()},
        "SQL by dims": lambda: con.execute(f"SELECT * FROM read_zarr('{store}', dims := ['t'])").fetchall(),
    }
    for way, run in reads.items():
        refused(run, zarrsql.MetadataError, f"'{document}'", "is not valid JSON", way=way)


@FORMATS
def test_a_non_utf8_document_is_a_metadata_error(fmt: int, tmp_path: Path, con: zarrsql.Connection) -> None:
    store = write_store(tmp_path / "s.zarr", fmt)
    document = array_doc(fmt, "v")
    raw = (store / document).read_bytes()
    (store / document).write_bytes(raw.replace(b'"', b'"\xff', 1))
    assert_node_refused(con, store, "v", document, "is not valid JSON")


def test_an_unpaired_surrogate_escape_is_a_metadata_error(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = write_store(tmp_path / "s.zarr", 3)
    text = (store / "v/zarr.json").read_text()
    (store / "v/zarr.json").write_text(text.replace('"attributes": {}', '"attributes": {"a": "\\ud800"}'))
    assert_node_refused(con, store, "v", "v/zarr.json", "surrogate")


# --------------------------------------------------------------------------------------
# huge numbers
# --------------------------------------------------------------------------------------


def test_an_absurd_shape_is_listed_but_not_allocated(tmp_path: Path, con: zarrsql.Connection) -> None:
    """A shape of 10**18 is valid Zarr; a scan would need its positions in memory: refused."""
    store = write_store(tmp_path / "s.zarr", 3, coord="t")
    edit(store / "v/zarr.json", _set("shape", [10**18]))
    edit(store / "v/zarr.json", _set("dimension_names", ["big"]))
    assert metadata_row(con, store, "v")["shape"] == list(zarr.open_array(str(store), path="v", mode="r").shape)
    refused(
        lambda: con.execute(f"SELECT * FROM read_zarr('{store}', array_path := 'v') LIMIT 3").fetchall(),
        zarrsql.UnsupportedError,
        "dimension 'big'",
        str(10**18),
    )


def test_absurd_chunks_are_unsupported_not_allocated(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = write_store(tmp_path / "s.zarr", 3)
    edit(store / "v/zarr.json", _grid_config({"chunk_shape": [10**18]}))
    row = metadata_row(con, store, "v")
    assert row["dtype"] == "unsupported"
    assert "bytes" in json.loads(row["attrs"])["error"]
    refused(
        lambda: con.execute(f"SELECT * FROM read_zarr('{store}', array_path := 'v')").fetchall(),
        zarrsql.UnsupportedError,
        "array 'v'",
        "rechunk",
    )


def test_a_number_of_thousands_of_digits_is_a_metadata_error(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = write_store(tmp_path / "s.zarr", 3)
    text = (store / "v/zarr.json").read_text()
    (store / "v/zarr.json").write_text(text.replace('"fill_value": 0.0', '"fill_value": ' + "9" * 5000))
    assert_node_refused(con, store, "v", "v/zarr.json", "is not valid JSON")


def test_the_undamaged_store_reads_as_zarr_python_reads_it(tmp_path: Path, con: zarrsql.Connection) -> None:
    """The store every fault starts from reads fine, so the faults above are the cause."""
    for fmt in (2, 3):
        store = write_store(tmp_path / f"s{fmt}.zarr", fmt)
        copy = tmp_path / f"copy{fmt}.zarr"
        shutil.copytree(store, copy)
        got = con.execute(f"SELECT t, v FROM read_zarr('{copy}') ORDER BY t").fetchall()
        assert got == list(zip(zarr_read(copy, "t").tolist(), zarr_read(copy, "v").tolist(), strict=True))


# --------------------------------------------------------------------------------------
# beyond Zarr's own fields: OME-Zarr multiscales attributes of the wrong JSON type
# --------------------------------------------------------------------------------------

AXES = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]


def _scale(values: list[Any]) -> list[dict[str, Any]]:
    return [{"type": "scale", "scale": values}]


OME_FAULTS = {
    "datasets a number": ({"datasets": 5, "axes": AXES}, "datasets must be a JSON array"),
    "axes a number": ({"datasets": [{"path": "0"}], "axes": 5}, "axes must be a JSON array"),
    "axis without a name": ({"datasets": [{"path": "0"}], "axes": [{"type": "space"}] * 2}, "string name"),
    "scale of text": ({"datasets": [{"path": "0", "coordinateTransformations": _scale(["a", 1])}], "axes": AXES},
                      "must hold finite numbers"),
    "scale of null": ({"datasets": [{"path": "0", "coordinateTransformations": _scale([None, 1])}], "axes": AXES},
                      "must hold finite numbers"),
    "transforms a number": ({"datasets": [{"path": "0", "coordinateTransformations": 5}], "axes": AXES},
                            "coordinateTransformations must be a JSON array"),
    "overflowing scales": ({"datasets": [{"path": "0", "coordinateTransformations": _scale([1e308, 1])}], "axes": AXES,
                            "coordinateTransformations": _scale([1e308, 1])}, "overflow"),
}  # fmt: skip


def write_image(path: Path, multiscale: dict[str, Any]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(str(path), mode="w", zarr_format=3, attributes={"multiscales": [multiscale]})
        g.create_array("0", shape=(4, 3), chunks=(2, 2), dtype="f8")[:] = np.arange(12.0).reshape(4, 3)
    return path


@pytest.mark.parametrize("fault", sorted(OME_FAULTS))
def test_invalid_ome_multiscales_attributes_are_a_metadata_error(
    fault: str, tmp_path: Path, con: zarrsql.Connection
) -> None:
    multiscale, message = OME_FAULTS[fault]
    store = write_image(tmp_path / "img.zarr", multiscale)
    for way, run in every_read(con, store).items():
        refused(run, zarrsql.MetadataError, "group '/'", "multiscales", message, way=way)


def test_repeated_ome_axis_names_refuse_the_table(tmp_path: Path, con: zarrsql.Connection) -> None:
    """Two axes named y would give two y columns, one of them holding x's positions."""
    axes = [{"name": "y", "type": "space"}, {"name": "y", "type": "space"}]
    store = write_image(tmp_path / "img.zarr", {"datasets": [{"path": "0"}], "axes": axes})
    for way, run in table_reads(con, store).items():
        refused(run, zarrsql.SelectionError, "['y', 'y']", "repeat", way=way)
    rows = con.execute(f"SELECT table_name, dims FROM read_zarr_tables('{store}')").fetchall()
    assert rows == [(None, ["y", "y"])]


# --------------------------------------------------------------------------------------
# a consolidated document listing thousands of nested groups: bounded work, named
# --------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_groups_nested_thousands_deep_are_cut_at_the_node_depth_bound(tmp_path: Path, con: zarrsql.Connection) -> None:
    store = write_store(tmp_path / "s.zarr", 3, consolidated=True)
    doc = json.loads((store / "zarr.json").read_text())
    docs = doc["consolidated_metadata"]["metadata"]
    paths = ["/".join(["g"] * depth) for depth in range(1, 3001)]
    for path in paths:
        docs[path] = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    (store / "zarr.json").write_text(json.dumps(doc))
    # the groups down to 64 levels are read; the first one below is listed as refused
    row = metadata_row(con, store, paths[64])
    assert row["dtype"] == "unsupported"
    assert "nested more than 64 groups deep" in json.loads(row["attrs"])["error"]
    refused(
        lambda: con.execute(f"SELECT * FROM read_zarr('{store}', group_path := '{paths[63]}')").fetchall(),
        zarrsql.MetadataError,
        "nested more than 64 groups deep",
    )
    got = con.execute(f"SELECT t, v FROM read_zarr('{store}') ORDER BY t").fetchall()
    assert got == list(zip(zarr_read(store, "t").tolist(), zarr_read(store, "v").tolist(), strict=True))
