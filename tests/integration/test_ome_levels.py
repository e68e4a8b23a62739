"""OME-Zarr pyramids read by `level :=` and channel names from `omero.channels`, on images
written by ome-zarr-py (NGFF 0.4 on Zarr v2, 0.5 on Zarr v3); values compared with the
level arrays read by zarr-python and the labels read from the group's attributes."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from ome_zarr import writer as ome_writer

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

WINDOW = {"min": 0, "max": 4000, "start": 0, "end": 4000}
CHANNELS = [
    {"label": "DAPI", "color": "0000FF", "window": WINDOW},
    {"label": "GFP", "color": "00FF00", "window": WINDOW},
    {"color": "FF0000", "window": WINDOW},  # a channel without a label
]


def _fmt(version: str):  # noqa: ANN202 - ome_zarr's format classes
    from ome_zarr.format import FormatV04, FormatV05

    return FormatV04() if version == "0.4" else FormatV05()


def _write(path: Path, version: str, data: np.ndarray, **kwargs: object) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(path), mode="w", zarr_format=2 if version == "0.4" else 3)
        ome_writer.write_image(
            data,
            root,
            axes="czyx",
            fmt=_fmt(version),
            scale_factors=(2, 4),
            storage_options={"chunks": (1, 1, 8, 8)},
            **kwargs,
        )
    return str(path)


@pytest.fixture(scope="module", params=["0.4", "0.5"])
def image(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    data = np.random.default_rng(5).integers(0, 4000, (3, 2, 32, 24), dtype="uint16")
    path = tmp_path_factory.mktemp("levels") / f"img{request.param}.ome.zarr"
    return _write(path, request.param, data, omero={"channels": CHANNELS})


def _attrs(path: str) -> dict:
    attrs = dict(zarr.open_group(path, mode="r").attrs)
    return attrs.get("ome", attrs)  # NGFF 0.5 nests its metadata under "ome"


def _level_paths(path: str) -> list[str]:
    return [d["path"] for d in _attrs(path)["multiscales"][0]["datasets"]]


def _level(path: str, k: int) -> np.ndarray:
    return zarr.open_array(f"{path}/{_level_paths(path)[k]}", mode="r")[...]


def test_the_fixture_is_a_three_level_pyramid(image: str) -> None:
    shapes = [_level(image, k).shape for k in range(3)]
    assert len(_level_paths(image)) == 3
    assert shapes[0][2] > shapes[1][2] > shapes[2][2]


def test_without_a_level_the_error_lists_the_levels_and_says_how_to_read_one(image: str) -> None:
    paths = _level_paths(image)
    with zarrsql.connect() as con, pytest.raises(zarrsql.SelectionError) as info:
        con.sql(f"SELECT * FROM read_zarr('{image}')")
    text = str(info.value)
    assert all(f"'{p}'" in text for p in paths)
    assert "level := 0" in text
    assert f"array_path := '{paths[0]}'" in text
    assert "table_name :=" not in text
    assert "dims :=" not in text
    assert len(re.findall(r"\(", text)) <= 1  # no reason repeated per level


@pytest.mark.parametrize("k", [0, 1, 2])
def test_level_reads_the_kth_dataset(image: str, k: int) -> None:
    expected = _level(image, k)
    with zarrsql.connect() as con:
        rel = con.sql(f"SELECT c, z, y, x, value FROM read_zarr('{image}', level := {k}) ORDER BY c, z, y, x")
        got = np.array(rel.fetchall())
        by_path = con.sql(
            f"SELECT count(*) FROM read_zarr('{image}', array_path := '{_level_paths(image)[k]}')"
        ).fetchall()
    assert got.shape[0] == expected.size
    assert np.array_equal(got[:, 4], expected.reshape(-1))
    idx = np.indices(expected.shape).reshape(len(expected.shape), -1).T
    assert np.array_equal(got[:, :4], idx)
    assert by_path == [(expected.size,)]


def test_level_from_python(image: str) -> None:
    expected = _level(image, 1)
    with zarrsql.connect() as con:
        got = zarrsql.read_zarr(image, connection=con, level=1).aggregate("count(*), sum(value)").fetchall()
    assert got == [(expected.size, int(expected.sum()))]


@pytest.mark.parametrize("bad", [3, 10, -1])
def test_level_out_of_range_names_the_count(image: str, bad: int) -> None:
    with zarrsql.connect() as con, pytest.raises(zarrsql.ParameterError, match="has 3 levels") as info:
        con.sql(f"SELECT * FROM read_zarr('{image}', level := {bad})")
    assert f"level := {bad}" in str(info.value)


def test_level_with_array_path_is_refused(image: str) -> None:
    with zarrsql.connect() as con, pytest.raises(zarrsql.ParameterError, match="level := or array_path :="):
        con.sql(f"SELECT * FROM read_zarr('{image}', level := 0, array_path := '{_level_paths(image)[0]}')")


def test_level_with_table_name_is_refused(image: str) -> None:
    with zarrsql.connect() as con, pytest.raises(zarrsql.ParameterError, match="table_name"):
        con.sql(f"SELECT * FROM read_zarr('{image}', level := 0, table_name := 'c_z_y_x')")


def test_level_must_be_an_integer(image: str) -> None:
    with zarrsql.connect() as con, pytest.raises(zarrsql.ParameterError, match="integer"):
        con.sql(f"SELECT * FROM read_zarr('{image}', level := 's0')")


def test_level_on_a_group_that_is_no_image_is_refused(tmp_path: Path) -> None:
    import xarray as xr

    path = tmp_path / "plain.zarr"
    xr.Dataset({"t": (("x",), np.arange(4.0))}, coords={"x": np.arange(4)}).to_zarr(path, zarr_format=3)
    with zarrsql.connect() as con, pytest.raises(zarrsql.ParameterError, match="multiscales"):
        con.sql(f"SELECT * FROM read_zarr('{path}', level := 0)")


def test_level_reads_a_labels_image_by_group_path(tmp_path: Path) -> None:
    data = np.random.default_rng(1).integers(0, 9, (2, 2, 16, 16), dtype="uint8")
    path = _write(tmp_path / "with_labels.ome.zarr", "0.5", data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(path, mode="r+")
        ome_writer.write_labels((data[0] > 4).astype("uint8"), root, name="cells", axes="zyx", fmt=_fmt("0.5"))
    expected = _level(f"{path}/labels/cells", 1)
    with zarrsql.connect() as con:
        got = con.sql(
            f"SELECT count(*), sum(value) FROM read_zarr('{path}', group_path := 'labels/cells', level := 1)"
        ).fetchall()
    assert got == [(expected.size, int(expected.sum()))]


# --------------------------------------------------------------------------------------
# channel labels
# --------------------------------------------------------------------------------------


def _labels(path: str) -> list[str | None]:
    return [c.get("label") for c in _attrs(path)["omero"]["channels"]]


def test_channel_label_column_holds_omero_labels(image: str) -> None:
    labels = _labels(image)
    assert labels[:2] == ["DAPI", "GFP"]  # what ome-zarr-py wrote
    with zarrsql.connect() as con:
        types = {r[0]: r[1] for r in con.sql(f"DESCRIBE SELECT * FROM read_zarr('{image}', level := 0)").fetchall()}
        got = con.sql(f"SELECT DISTINCT c, c_label FROM read_zarr('{image}', level := 0) ORDER BY c").fetchall()
    assert types["c_label"] == "VARCHAR"
    assert got == list(enumerate(labels))


@pytest.mark.parametrize(
    ("where", "keep"),
    [
        ("c_label = 'GFP'", lambda labels: [lab == "GFP" for lab in labels]),
        ("c_label IN ('DAPI', 'GFP') AND c_label <> 'DAPI'", lambda labels: [lab == "GFP" for lab in labels]),
        ("c_label IS NULL", lambda labels: [lab is None for lab in labels]),
        ("c_label IS NOT NULL", lambda labels: [lab is not None for lab in labels]),
        ("c_label LIKE '%A%'", lambda labels: [lab is not None and "A" in lab for lab in labels]),
        ("c_label > 'E'", lambda labels: [lab is not None and lab > "E" for lab in labels]),
        ("lower(c_label) = 'dapi'", lambda labels: [lab is not None and lab.lower() == "dapi" for lab in labels]),
    ],
)
def test_where_on_the_channel_label_is_exact(image: str, where: str, keep) -> None:  # noqa: ANN001
    data = _level(image, 0)
    mask = np.array(keep(_labels(image)))
    with zarrsql.connect() as con:
        got = con.sql(f"SELECT count(*), sum(value) FROM read_zarr('{image}', level := 0) WHERE {where}").fetchall()
    kept = data[mask]
    assert got == [(kept.size, int(kept.sum()) if kept.size else None)]


def test_where_on_the_channel_label_prunes(image: str) -> None:
    with zarrsql.connect() as con, zarrsql.trace() as t:
        con.sql(f"SELECT sum(value) FROM read_zarr('{image}', level := 0) WHERE c_label = 'DAPI'").fetchall()
    if HAS_SOURCES:
        assert t.work_units_read * 3 <= t.work_units_planned  # one channel of three


def test_no_label_column_when_the_channel_list_does_not_match(tmp_path: Path) -> None:
    data = np.zeros((3, 1, 8, 8), dtype="uint8")
    path = _write(tmp_path / "two_of_three.ome.zarr", "0.4", data, omero={"channels": CHANNELS[:2]})
    assert len(_labels(path)) != data.shape[0]
    with zarrsql.connect() as con:
        columns = zarrsql.read_zarr(path, connection=con, level=0).columns
    assert "c_label" not in columns
    assert columns[:4] == ["c", "z", "y", "x"]


def _nested_image(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """An NGFF 0.4 image whose levels lie one group down (`datasets[].path` 'res/0', 'res/1'),
    which the specification allows; the second level has a translation too."""
    full = np.arange(2 * 4 * 6, dtype="uint16").reshape(2, 4, 6)
    half = full[:, ::2, ::2] * 10
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("res/0", data=full, chunks=(1, 2, 3))
    group.create_array("res/1", data=half, chunks=(1, 2, 3))
    axes = [
        {"name": "t", "type": "time", "unit": "hour"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"},
    ]
    datasets = [
        {"path": "res/0", "coordinateTransformations": [{"type": "scale", "scale": [0.5, 2.0, 0.25]}]},
        {
            "path": "res/1",
            "coordinateTransformations": [
                {"type": "scale", "scale": [0.5, 4.0, 0.5]},
                {"type": "translation", "translation": [0.0, 1.0, 0.25]},
            ],
        },
    ]
    group.attrs["multiscales"] = [{"version": "0.4", "axes": axes, "datasets": datasets}]
    return full, half


@pytest.mark.parametrize(
    ("level", "scale", "shift"), [(0, (0.5, 2.0, 0.25), (0.0, 0.0, 0.0)), (1, (0.5, 4.0, 0.5), (0.0, 1.0, 0.25))]
)
def test_levels_one_group_down_keep_the_images_axes(tmp_path: Path, level: int, scale: tuple, shift: tuple) -> None:
    """Before, such a level read as a plain array (dim_0, dim_1, dim_2, no physical columns) and
    the image listed no table (found by a hunter). The oracle: zarr-python's arrays and the
    transformations applied by hand."""
    path = tmp_path / "nested.ome.zarr"
    arrays = _nested_image(path)
    data = zarr.open_array(path / f"res/{level}", mode="r")[...]
    assert np.array_equal(data, arrays[level])
    con = zarrsql.connect()
    listed = con.sql(f"SELECT group_path, dims, shape FROM read_zarr_tables('{path}')").fetchall()
    assert sorted(listed, key=lambda r: r[2]) == sorted(
        [("/", ["t", "y", "x"], list(a.shape)) for a in arrays], key=lambda r: r[2]
    )
    expected = [
        (t, y, x, t * scale[0] + shift[0], y * scale[1] + shift[1], x * scale[2] + shift[2], int(data[t, y, x]))
        for t in range(data.shape[0])
        for y in range(data.shape[1])
        for x in range(data.shape[2])
    ]
    for how in (f"level := {level}", f"array_path := 'res/{level}'"):
        rel = con.sql(f"SELECT * FROM read_zarr('{path}', {how}) ORDER BY t, y, x")
        assert rel.columns == ["t", "y", "x", "t_h", "y_um", "x_um", "value"]
        assert rel.fetchall() == expected


def test_an_ngff_0_2_image_has_the_axes_its_specification_fixes(tmp_path: Path) -> None:
    """NGFF 0.1 and 0.2 list no axes: every image is 5-D `t, c, z, y, x`."""
    path = tmp_path / "early.ome.zarr"
    data = np.arange(2 * 2 * 1 * 3 * 4, dtype="uint8").reshape(2, 2, 1, 3, 4)
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("0", data=data, chunks=(1, 1, 1, 3, 4))
    group.attrs["multiscales"] = [{"version": "0.2", "datasets": [{"path": "0"}]}]
    rel = zarrsql.connect().sql(f"SELECT t, c, z, y, x, value FROM read_zarr('{path}') ORDER BY t, c, z, y, x")
    assert rel.fetchall() == [tuple(int(i) for i in idx) + (int(v),) for idx, v in np.ndenumerate(data)]
