"""`zarrsql.describe` on the fixture stores: every array zarr-python finds is either a
column of a listed table or listed with a reason; units and long names are the arrays'
attributes; the HTML is well formed (checked with a parser) and collapsible."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import zarr
from ome_zarr import writer as ome_writer

import zarrsql

STORES = [
    "air_temperature.zarr",
    "v2/air_temperature.zarr",
    "era5_like.zarr",
    "cf_roles.zarr",
    "datatree.zarr",
    "mixed_chunks.zarr",
    "labels.zarr",
    "unsupported_dtype.zarr",
    "dtypes.zarr",
]
VOID = {"br", "hr", "img", "input", "meta", "link", "wbr", "col"}


class _Checker(HTMLParser):
    """Fails on an end tag that closes anything but the innermost open element."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.seen: dict[str, int] = {}
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen[tag] = self.seen.get(tag, 0) + 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1:] == [tag], f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parsed(markup: str) -> _Checker:
    checker = _Checker()
    checker.feed(markup)
    checker.close()
    assert checker.stack == [], f"unclosed: {checker.stack}"
    return checker


def _zarr_arrays(path: str) -> dict[str, zarr.Array]:
    root = zarr.open_group(path, mode="r")
    return {name: a for name, a in root.arrays()} | {
        name: node for name, node in root.members(max_depth=None) if isinstance(node, zarr.Array)
    }


@pytest.mark.parametrize("name", STORES)
def test_every_array_is_in_a_table_or_listed_with_a_reason(fixture_path: Callable[[str], str], name: str) -> None:
    path = fixture_path(name)
    d = zarrsql.describe(path)
    tables = d.tables.fetchall()
    columns = d.tables.columns
    read = {
        p
        for row in tables
        if dict(zip(columns, row, strict=True))["table_name"]
        for p in [
            *dict(zip(columns, row, strict=True))["data_vars"],
            *dict(zip(columns, row, strict=True))["coord_vars"],
        ]
    }
    # auxiliary coordinates are read too: as columns of the tables whose variables name them
    read |= {f"{t.group_path.strip('/')}/{c.name}".lstrip("/") for t in d.table_list() if t.name for c in t.columns}
    unread = {a.path: a.reason for a in d.unread}
    for array_path in _zarr_arrays(path):
        assert array_path in read or array_path in unread, array_path
        assert not (array_path in read and array_path in unread), array_path
    assert all(reason for reason in unread.values())
    # every table of the listing is shown, named or with its problem
    listed = [(t.group_path, t.name, t.dims) for t in d.table_list()]
    assert sorted(listed, key=str) == sorted(((r[0], r[2], tuple(r[3])) for r in tables), key=str)
    assert all(t.name or t.problem for t in d.table_list())
    markup = _parsed(d._repr_html_())
    assert markup.seen.get("details", 0) >= len(d.groups)  # collapsible, as xarray's repr
    text = "".join(markup.text)
    for t in d.table_list():
        assert (t.name or "(unnamed)") in text
        assert t.name is None or t.name in repr(d)
    for a in d.unread:
        assert a.path in text
        assert a.path in repr(d)


def test_columns_carry_units_long_names_and_engine_types(fixture_path: Callable[[str], str]) -> None:
    path = fixture_path("air_temperature.zarr")
    d = zarrsql.describe(path)
    (table,) = d.table_list()
    attrs = dict(zarr.open_array(path + "/air", mode="r").attrs)
    air = next(c for c in table.columns if c.name == "air")
    assert air.units == attrs["units"]
    assert air.long_name == attrs["long_name"]
    con = zarrsql.connect()
    rel = con.sql(f"SELECT * FROM read_zarr('{path}') LIMIT 0")
    assert [(c.name, c.type) for c in table.columns] == [
        (n, str(t)) for n, t in zip(rel.columns, rel.types, strict=True)
    ]
    assert table.dims == ("time", "lat", "lon")
    assert table.shape == zarr.open_array(path + "/air", mode="r").shape
    assert "air DOUBLE" in repr(d) or "air FLOAT" in repr(d)


def test_conventions_are_named(tmp_path: Path, fixture_path: Callable[[str], str]) -> None:
    image = tmp_path / "img.ome.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(image), mode="w", zarr_format=2)
        data = np.arange(2 * 16 * 16, dtype="uint16").reshape(2, 16, 16)
        ome_writer.write_image(data, root, axes="cyx", storage_options={"chunks": (1, 8, 8)})
    assert [g.convention for g in zarrsql.describe(str(image)).groups][0] == "OME-Zarr"
    assert {g.convention for g in zarrsql.describe(fixture_path("datatree.zarr")).groups} == {"xarray / CF"}


def test_describe_refuses_unknown_parameters(fixture_path: Callable[[str], str]) -> None:
    with pytest.raises(zarrsql.ParameterError, match="table_name.*group_path"):
        zarrsql.describe(fixture_path("air_temperature.zarr"), table_name="x")
    with pytest.raises(zarrsql.StoreNotFoundError):
        zarrsql.describe(str(Path(fixture_path("air_temperature.zarr")).parent / "nothing.zarr"))


def test_group_path_narrows_the_description(fixture_path: Callable[[str], str]) -> None:
    d = zarrsql.describe(fixture_path("datatree.zarr"), group_path="simulation")
    assert {g.path for g in d.groups} == {"/simulation", "/simulation/coarse", "/simulation/fine"}
    assert {t.name for t in d.table_list()} == {"x_y"}
