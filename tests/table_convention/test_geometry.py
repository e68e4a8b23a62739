"""Point, linestring and polygon columns: GeoArrow-native values, WKB on request (checked with
a `struct` parser and, where it is installed, shapely), selected rows, and the WKB writer."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrsql
from tests.table_convention.oracle import AXES, linestrings, parse_wkb, polygons
from zarrsql.decode.geometry import wkb_linestrings, wkb_points, wkb_polygons, wkb_type


@pytest.fixture(scope="module")
def con() -> zarrsql.Connection:
    return zarrsql.connect()


def _canonical(coords: np.ndarray, axes: list[str]) -> list[tuple[float, ...]]:
    order = [axes.index(a) for a in AXES if a in axes]
    return [tuple(float(v) for v in row[order]) for row in np.asarray(coords, dtype=np.float64)]


def _wkb(con, store: str, group: str, column: str) -> list:
    return [
        r[0]
        for r in con.sql(
            f"SELECT \"{column}\" FROM read_zarr('{store}', group_path := '{group}', geometry := 'wkb')"
        ).fetchall()
    ]


#: (group, column, ISO WKB code): x/y 2-D, z +1000, m +2000, z and m +3000
WKB_CASES = [
    ("stations", "location", 1),
    ("stations_3d", "position", 1001),
    ("trajectories", "track", 2),
    ("tracks_3d", "path", 3002),
    ("parcels", "outline", 3),
]


@pytest.mark.parametrize(("group", "column", "code"), WKB_CASES)
def test_wkb_matches_the_stored_coordinates(con, stores, fmt, group, column, code) -> None:
    store = stores("examples.zarr", fmt)
    node = zarr.open(store, path=f"{group}/{column}", mode="r")
    axes = list(node.attrs["axes"])
    got = _wkb(con, store, group, column)
    if isinstance(node, zarr.Array):  # a point column: all-NaN rows are NULL
        data = node[...]
        want = [None if np.isnan(row).all() else (code, _canonical(row[None], axes)[0]) for row in data]
    elif node.attrs["encoding-type"] == "linestring":
        want = [(code, _canonical(line, axes)) for line in linestrings(node)]
    else:
        want = [(code, [_canonical(r, axes) for r in rings]) for rings in polygons(node)]
    assert [None if b is None else parse_wkb(b) for b in got] == want


@pytest.mark.parametrize(
    ("group", "column"),
    [
        ("trajectories", "track"),
        ("parcels", "outline"),
        ("stations", "location"),
        ("tracks_3d", "path"),
        ("stations_3d", "position"),
    ],
)
def test_wkb_reads_back_with_shapely(con, stores, group, column) -> None:
    shapely = pytest.importorskip("shapely", minversion="2.1")
    store = stores("examples.zarr")
    node = zarr.open(store, path=f"{group}/{column}", mode="r")
    axes = list(node.attrs["axes"])
    got = _wkb(con, store, group, column)
    if isinstance(node, zarr.Array):
        kind, want = "Point", [None if np.isnan(p).all() else [p[None]] for p in node[...]]
    elif node.attrs["encoding-type"] == "linestring":
        kind, want = "LineString", [[line] for line in linestrings(node)]
    else:
        kind, want = "Polygon", polygons(node)
    for b, rings in zip(got, want, strict=True):
        if rings is None:
            assert b is None
            continue
        if kind == "LineString" and len(rings[0]) == 1:
            continue  # GEOS reads no one-vertex linestring (the struct parser checks those rows)
        g = shapely.from_wkb(b)
        assert g.geom_type == kind
        assert g.has_z == ("z" in axes)
        assert shapely.has_m(g) == ("m" in axes)
        coords = shapely.get_coordinates(g, include_z="z" in axes, include_m="m" in axes)
        assert [tuple(p) for p in coords.tolist()] == [p for r in rings for p in _canonical(r, axes)]
        if kind == "Polygon":
            assert len(g.interiors) == len(rings) - 1  # the first ring is the exterior, the rest holes
            exterior = shapely.Polygon(_canonical(rings[0], axes)).area
            holes = sum(shapely.Polygon(_canonical(h, axes)).area for h in rings[1:])
            assert g.area == pytest.approx(exterior - holes)


def test_polygon_rings_are_exterior_then_holes(con, stores, fmt) -> None:
    store = stores("examples.zarr", fmt)
    node = zarr.open_group(store, path="parcels/outline", mode="r")
    geom = node["geom_offsets"][...]
    got = con.sql(
        f"SELECT len(outline), len(outline[1]) FROM read_zarr('{store}', group_path := 'parcels') ORDER BY parcel_id"
    ).fetchall()
    rings = node["ring_offsets"][...]
    assert got == [(int(geom[i + 1] - geom[i]), int(rings[geom[i] + 1] - rings[geom[i]])) for i in range(len(geom) - 1)]


def test_selected_rows_get_their_own_geometries(con, stores, fmt) -> None:
    """IN on the index pushes a row selection into the geometry codecs (empty and one-vertex
    tracks included); NOT IN reads every unit but a subset of rows."""
    store = stores("examples.zarr", fmt)
    node = zarr.open_group(store, path="trajectories/track", mode="r")
    lines = linestrings(node)
    ids = zarr.open_array(store, path="trajectories/trajectory_id", mode="r")[...].tolist()
    for op, named in (("IN", ("T09", "T04", "T05", "T14")), ("NOT IN", ("T00", "T06", "T07"))):
        got = con.sql(
            f"SELECT trajectory_id, track FROM read_zarr('{store}', group_path := 'trajectories', "
            f"geometry := 'wkb') WHERE trajectory_id {op} {named} ORDER BY trajectory_id"
        ).fetchall()
        keep = [i for i, t in enumerate(ids) if (t in named) == (op == "IN")]
        assert [(t, parse_wkb(b)[1]) for t, b in got] == [(ids[i], _canonical(lines[i], ["x", "y"])) for i in keep]


def test_selected_polygons_in_a_big_table(con, stores, fmt) -> None:
    store = stores("sites.zarr", fmt)
    node = zarr.open_group(store, path="sites/area", mode="r")
    shapes = polygons(node)
    picked = [7, 421, 422, 999]
    got = con.sql(
        f"SELECT site_id, area FROM read_zarr('{store}', group_path := 'sites') WHERE site_id IN "
        f"({', '.join(repr(f'S{i:04d}') for i in picked)}) ORDER BY site_id"
    ).fetchall()
    want = [(f"S{i:04d}", [[{"x": float(x), "y": float(y)} for x, y in r] for r in shapes[i]]) for i in picked]
    assert got == want


def test_bad_geometry_parameter_is_refused(con, stores) -> None:
    with pytest.raises(zarrsql.ParameterError, match="geometry := must be 'native' or 'wkb'"):
        zarrsql.read_zarr(stores("examples.zarr"), group_path="stations", geometry="geojson", connection=con)


# ----------------------------------------------------------------------------- the writer
def _random_lines(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    counts = rng.choice([0, 2, 3, 4], n)  # GEOS refuses one-vertex linestrings; WKB allows them
    return np.concatenate([[0], np.cumsum(counts)]), rng.normal(size=(int(counts.sum()), d))


@pytest.mark.parametrize("axes", [("x", "y"), ("x", "y", "z"), ("x", "y", "m"), ("x", "y", "z", "m")])
def test_wkb_writer_against_the_struct_parser(axes) -> None:
    rng = np.random.default_rng(len(axes))
    d = len(axes)
    pts = rng.normal(size=(5, d))
    assert [parse_wkb(b) for b in wkb_points(pts, wkb_type("point", axes))] == [
        (wkb_type("point", axes), tuple(p)) for p in pts.tolist()
    ]
    offsets, coords = _random_lines(rng, 6, d)
    code = wkb_type("linestring", axes)
    want = [(code, [tuple(p) for p in coords[a:b].tolist()]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    assert [parse_wkb(b) for b in wkb_linestrings(offsets, coords, code)] == want
    geom = np.array([0, 2, 2, 3])  # two rings, none (an empty polygon), one
    rings, coords = _random_lines(rng, 3, d)
    code = wkb_type("polygon", axes)
    want = [
        (code, [[tuple(p) for p in coords[rings[j] : rings[j + 1]].tolist()] for j in range(geom[i], geom[i + 1])])
        for i in range(3)
    ]
    assert [parse_wkb(b) for b in wkb_polygons(geom, rings, coords, code)] == want


def test_wkb_writer_against_shapely() -> None:
    shapely = pytest.importorskip("shapely", minversion="2.1")
    rng = np.random.default_rng(3)
    offsets, coords = _random_lines(rng, 8, 3)
    for b, (lo, hi) in zip(
        wkb_linestrings(offsets, coords, 1002), zip(offsets[:-1], offsets[1:], strict=True), strict=True
    ):
        g = shapely.from_wkb(b)
        assert g.geom_type == "LineString"
        assert g.has_z
        assert np.array_equal(shapely.get_coordinates(g, include_z=True), coords[lo:hi])
    shell = [(0.0, 0.0), (10.0, 0.0), (10.0, 10.0), (0.0, 10.0), (0.0, 0.0)]
    hole = [(2.0, 2.0), (2.0, 4.0), (4.0, 4.0), (4.0, 2.0), (2.0, 2.0)]
    (b,) = wkb_polygons(np.array([0, 2]), np.array([0, 5, 10]), np.array(shell + hole), 3)
    assert shapely.from_wkb(b).equals(shapely.Polygon(shell, [hole]))
    assert shapely.from_wkb(b).area == 96.0  # 10 x 10 less the 2 x 2 hole


@pytest.mark.parametrize("select", ["mask", "indices", "all"])
def test_a_codec_reads_the_rows_a_work_unit_selects(stores, select) -> None:
    """Every form of `WorkUnit.select` (None, per-dimension indices, a boolean mask) gives the
    selected rows' polygons, in order."""
    from zarrsql.decode.columns import DecodeOptions
    from zarrsql.decode.registry import codec_for
    from zarrsql.metadata.tree import cached_tree
    from zarrsql.plan.units import WorkUnit
    from zarrsql.store import open_store
    from zarrsql.tables.analyze import analyze_group

    path = stores("sites.zarr")
    store = open_store(path)
    (table,) = analyze_group(cached_tree(store), "sites").tables
    var = next(v for v in table.data_vars if v.path == "sites/area")
    codec = codec_for(var, store, DecodeOptions())
    rows = np.array([0, 3, 4, 57, 99])
    sel = {"mask": np.isin(np.arange(100), rows), "indices": (rows,), "all": None}[select]
    (geom, rings, coords), nulls = codec.read(store, WorkUnit((2,), ((200, 300),), sel))
    assert nulls is None
    shapes = polygons(zarr.open_group(path, path="sites/area", mode="r"))
    picked = range(200, 300) if select == "all" else rows + 200
    got = [[coords[rings[j]:rings[j + 1]].tolist() for j in range(geom[i], geom[i + 1])]
           for i in range(len(geom) - 1)]
    assert got == [[r.tolist() for r in shapes[i]] for i in picked]
