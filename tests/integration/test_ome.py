"""OME-Zarr images written by ome-zarr-py: axis names, pyramid levels, labels, physical
coordinates, a plate; values compared with the arrays read by zarr-python."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from ome_zarr import writer as ome_writer

import zarrsql
from zarrsql.engine.source import HAS_SOURCES

SCALE = [1.0, 0.5, 0.25, 0.25]  # c, z, y, x at level 0 (micrometer for space axes)
SHIFT = [0.0, 2.0, 10.0, -3.0]
AXES = [{"name": "c", "type": "channel"}, {"name": "z", "type": "space", "unit": "micrometer"},
        {"name": "y", "type": "space", "unit": "micrometer"}, {"name": "x", "type": "space", "unit": "micrometer"}]


def _levels(image: np.ndarray, n: int) -> list[np.ndarray]:
    out = [image]
    for _ in range(n - 1):
        out.append(np.ascontiguousarray(out[-1][:, :, ::2, ::2]))
    return out


def _transforms(level: int) -> list[dict]:
    f = 2.0 ** level
    return [{"type": "scale", "scale": [SCALE[0], SCALE[1], SCALE[2] * f, SCALE[3] * f]},
            {"type": "translation", "translation": SHIFT}]


@pytest.fixture(scope="module", params=["0.4", "0.5"])
def image(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    from ome_zarr.format import FormatV04, FormatV05

    version = request.param
    path = tmp_path_factory.mktemp("ome") / f"img{version}.ome.zarr"
    data = np.random.default_rng(3).integers(0, 4000, (2, 3, 20, 12), dtype="uint16")
    fmt = FormatV04() if version == "0.4" else FormatV05()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(path), mode="w", zarr_format=2 if version == "0.4" else 3)
        ome_writer.write_multiscale(_levels(data, 3), root, axes=AXES, fmt=fmt,
                                    coordinate_transformations=[_transforms(i) for i in range(3)],
                                    storage_options={"chunks": (1, 2, 8, 8)})
        labels = (data[0] > 2000).astype("uint8")
        ome_writer.write_labels(labels, root, name="cells", axes="zyx", fmt=fmt)
    return str(path)


def _level_paths(path: str) -> list[str]:
    attrs = dict(zarr.open_group(path, mode="r").attrs)
    ms = attrs.get("multiscales") or attrs["ome"]["multiscales"]
    return [d["path"] for d in ms[0]["datasets"]]


def test_levels_are_listed_without_names_and_read_with_axis_names(image: str) -> None:
    levels = _level_paths(image)
    with zarrsql.connect() as con:
        rows = con.sql(f"SELECT table_name, dims, shape FROM read_zarr_tables('{image}') WHERE group_path = '/'").fetchall()
        assert len(rows) == 3 and all(r[0] is None and r[1] == ["c", "z", "y", "x"] for r in rows)
        meta = dict(con.sql(f"SELECT name, array_path_dims FROM read_zarr_metadata('{image}')").fetchall())
        assert meta[levels[0]] == ["c", "z", "y", "x"]
        rel = zarrsql.read_zarr(image, connection=con, array_path=levels[1])
        assert rel.columns == ["c", "z", "y", "x", "z_um", "y_um", "x_um", "value"]
        got = np.array(rel.order("c, z, y, x").select("value").fetchall()).reshape(-1)
    expected = zarr.open_array(f"{image}/{levels[1]}", mode="r")[...]
    assert np.array_equal(got, expected.reshape(-1))


def test_physical_coordinates_follow_the_level_transforms(image: str) -> None:
    level = _level_paths(image)[1]
    with zarrsql.connect() as con:
        rows = con.sql(f"SELECT DISTINCT y, y_um FROM read_zarr('{image}', array_path := '{level}') ORDER BY y").fetchall()
    # level 1 doubles the y spacing of level 0 (the fixture's definition)
    assert rows == [(i, i * SCALE[2] * 2 + SHIFT[2]) for i in range(len(rows))]


def test_where_in_physical_units_prunes_and_is_exact(image: str) -> None:
    level = _level_paths(image)[0]
    data = zarr.open_array(f"{image}/{level}", mode="r")[...]
    x_um = np.arange(data.shape[3]) * SCALE[3] + SHIFT[3]
    with zarrsql.connect() as con, zarrsql.trace() as t:
        got = con.sql(f"SELECT count(*), sum(value) FROM read_zarr('{image}', array_path := '{level}') "
                      "WHERE x_um < -1.5 AND c = 1").fetchall()
    keep = data[1][:, :, x_um < -1.5]
    assert got == [(keep.size, int(keep.sum()))]
    if HAS_SOURCES:
        assert t.work_units_read < t.work_units_planned


def test_labels_are_reachable(image: str) -> None:
    with zarrsql.connect() as con:
        groups = {r[0] for r in con.sql(f"SELECT group_path FROM read_zarr_tables('{image}')").fetchall()}
        assert "/labels/cells" in groups
        level = _level_paths(f"{image}/labels/cells")[0]
        got = con.sql(f"SELECT sum(value) FROM read_zarr('{image}', array_path := 'labels/cells/{level}')").fetchall()
    labels = zarr.open_array(f"{image}/labels/cells/{level}", mode="r")[...]
    assert got == [(int(labels.sum()),)]


def test_single_level_image_is_a_named_table(tmp_path: Path) -> None:
    from ome_zarr.format import FormatV05

    path = tmp_path / "one.ome.zarr"
    data = np.arange(2 * 5 * 6, dtype="float32").reshape(2, 5, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(path), mode="w", zarr_format=3)
        ome_writer.write_multiscale([data], root, axes="cyx", fmt=FormatV05())
    with zarrsql.connect() as con:
        assert con.sql(f"SELECT table_name FROM read_zarr_tables('{path}')").fetchall() == [("c_y_x",)]
        got = con.sql(f"SELECT c, avg(value) FROM '{path}' GROUP BY c ORDER BY c").fetchall()
    assert got == [(c, float(data[c].mean())) for c in range(2)]


def test_plate_fields_are_listed(tmp_path: Path) -> None:
    from ome_zarr.format import FormatV04

    path = tmp_path / "plate.ome.zarr"
    fmt = FormatV04()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(path), mode="w", zarr_format=2)
        ome_writer.write_plate_metadata(root, ["A"], ["1", "2"], ["A/1", "A/2"], fmt=fmt)
        for well in ("A/1", "A/2"):
            w = root.require_group(well)
            ome_writer.write_well_metadata(w, [{"path": "0"}], fmt=fmt)
            field = w.require_group("0")
            ome_writer.write_multiscale([np.ones((3, 4), dtype="uint8")], field, axes="yx", fmt=fmt)
    with zarrsql.connect() as con:
        rows = con.sql(f"SELECT group_path, table_name FROM read_zarr_tables('{path}') ORDER BY 1").fetchall()
        assert rows == [("/A/1/0", "y_x"), ("/A/2/0", "y_x")]
        assert con.sql(f"SELECT count(*) FROM read_zarr('{path}', group_path := 'A/2/0')").fetchall() == [(12,)]
