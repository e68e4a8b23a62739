"""Zarr stores in the table convention, written with zarr-python for the tests of this folder.

`write_stores(root)` writes, in Zarr format 2 and 3 (`<root>/v2/...`, `<root>/v3/...`):

- `examples.zarr`: one group per example of the convention document (weather_stations,
  survey_plots, forest_inventory, station_hourly, trajectories, stations) with the
  attributes the document gives them, plus `parcels` (polygons with holes), `tracks_3d`
  (linestrings with x, y, z, m), `stations_3d` (points stored in y, x, z order),
  `readings` (column names apart from node names, the index in the middle, a string and an
  integer sentinel) and `unregistered` (`table:columns` without the registration);
- `sites.zarr`: a 1000-row table with a string index, chunked by 100 rows, with plain,
  linestring and polygon columns whose offsets and coordinates are chunked differently,
  for pushdown;
- `opaque.zarr`: a table with a column of an encoding-type no reader knows;
- `broken.zarr`: one group per broken structural rule (see `BROKEN`);
- `plots.zarr`: a store whose root group is the table.

Values are deterministic (one seeded generator per group). Each writer returns nothing:
the tests' oracle (`oracle.py`) reads the stores back with zarr-python, so expectations
never come from the code that wrote them or from zarrsql.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr

UUID = "d517ea5f-92bb-4df1-8bbf-db736286a307"
REGISTRATION = {
    "schema_url": "https://raw.githubusercontent.com/R-CF/zarr_convention_table/main/schema.json",
    "spec_url": "https://github.com/R-CF/zarr_convention_table/blob/main/README.md",
    "uuid": UUID,
    "name": "table",
    "description": "Tabular data as a group of row-aligned column arrays",
}
FORMATS = (2, 3)
EXAMPLES = (
    "weather_stations",
    "survey_plots",
    "forest_inventory",
    "station_hourly",
    "trajectories",
    "stations",
    "parcels",
    "tracks_3d",
    "stations_3d",
    "readings",
)
#: broken group → (the rule it breaks, words its error must contain, raised when read not listed)
BROKEN = {
    "unequal_length": ("columns of unequal length", ["'short'", "same N rows"]),
    "unequal_chunks": ("unequal row-axis chunking", ["'b'", "axis-0 chunk size"]),
    "missing_node": ("a listed node that does not exist", ["'ghost'", "does not exist"]),
    "missing_child": ("a compound column without a child", ["'species'", "'codes'"]),
    "geom_length": ("geom_offsets of the wrong length", ["'track'", "N+1"]),
    "bad_axes": ("axes outside the vocabulary", ["'where'", "axes"]),
    "bad_index": ("table:index naming no column", ["table:index", "'nope'"]),
    "compound_array": ("a linestring stored as an array", ["'track'", "group"]),
}
#: broken groups whose metadata is valid: their data breaks a rule when read
BROKEN_DATA = {
    "decreasing_offsets": ["'track'", "geom_offsets[2]", "non-decreasing"],
    "overrun_offsets": ["'track'", "overruns coords"],
    "decreasing_rings": ["'outline'", "ring_offsets", "non-decreasing"],
    "bad_codes": ["'kind'", "code 7", "categories"],
}


def _strings(values: list[str]) -> np.ndarray:
    return np.array(values, dtype=object)


class _Writer:
    """Arrays and groups of one store in one Zarr format."""

    def __init__(self, path: Path, fmt: int) -> None:
        self.fmt = fmt
        self.root = zarr.open_group(str(path), mode="w", zarr_format=fmt)

    def table(self, group: Any, columns: list[tuple[str, str]], **extra: Any) -> None:
        attrs = {"zarr_conventions": [REGISTRATION], "table:columns": [{"name": n, "node": d} for n, d in columns]}
        attrs.update({f"table:{k}": v for k, v in extra.items()})
        group.attrs.update(attrs)

    def array(
        self,
        group: Any,
        name: str,
        data: np.ndarray,
        chunks: tuple[int, ...] | int,
        *,
        attrs: dict[str, Any] | None = None,
        dims: list[str] | None = None,
        fill: Any = None,
    ) -> None:
        chunks = (chunks, *data.shape[1:]) if isinstance(chunks, int) else chunks
        kwargs: dict[str, Any] = {}
        if dims is not None and self.fmt == 3:
            kwargs["dimension_names"] = dims
        if fill is not None:
            kwargs["fill_value"] = fill
        dtype = str if data.dtype == object else data.dtype
        a = group.create_array(name, shape=data.shape, chunks=chunks, dtype=dtype, **kwargs)
        if data.size:
            a[...] = data
        if attrs:
            a.attrs.update(attrs)


def _offsets(counts: list[int] | np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


# ----------------------------------------------------------------------------- examples
def _weather_stations(w: _Writer) -> None:
    rng = np.random.default_rng(1)
    g = w.root.create_group("weather_stations")
    n = 23
    w.array(
        g,
        "station_id",
        _strings([f"WMO{10000 + 7 * i}" for i in range(n)]),
        5,
        attrs={"type": "string", "description": "WMO station identifier"},
    )
    w.array(g, "elevation_m", rng.uniform(-50, 3000, n).astype(np.float32), 5)
    w.array(g, "observed_at", (1_700_000_000 + 3600 * np.arange(n)).astype(np.int64), 5)
    w.table(g, [("station_id", "station_id"), ("elevation_m", "elevation_m"), ("observed_at", "observed_at")])


def _survey_plots(w: _Writer) -> None:
    rng = np.random.default_rng(2)
    g = w.root.create_group("survey_plots")
    n = 40
    w.array(g, "plot_id", _strings([f"P{i:03d}" for i in range(n)]), 8)
    codes = rng.integers(0, 5, n).astype(np.int8)
    w.array(
        g,
        "land_cover",
        codes,
        8,
        attrs={
            "type": "string",
            "description": "Dominant land cover class",
            "categories": ["forest", "cropland", "grassland", "wetland", "urban"],
            "ordered": False,
        },
    )
    canopy = rng.uniform(0, 100, n).astype(np.float32)
    canopy[[3, 17, 18, 39]] = np.nan
    w.array(
        g,
        "canopy_pct",
        canopy,
        8,
        attrs={
            "type": "float32",
            "description": "Canopy cover, percent (NaN where not surveyed)",
            "missing_value": "NaN",
        },
    )
    w.table(g, [("plot_id", "plot_id"), ("land_cover", "land_cover"), ("canopy_pct", "canopy_pct")], index="plot_id")


def _forest_inventory(w: _Writer) -> None:
    rng = np.random.default_rng(3)
    g = w.root.create_group("forest_inventory")
    n = 300
    w.array(g, "plot_id", _strings([f"F{i:05d}" for i in range(n)]), 64)
    species = g.create_group("species")
    species.attrs.update({"type": "string", "encoding-type": "categorical", "ordered": False})
    w.array(species, "categories", _strings([f"Species {k:03d}" for k in range(40)]), 16)
    codes = rng.integers(-1, 40, n).astype(np.int16)
    w.array(species, "codes", codes, 64)
    depth = g.create_group("depth_m")
    depth.attrs.update({"type": "float32", "encoding-type": "nullable"})
    values = rng.normal(0, 1e30, n).astype(np.float32)
    values[:2] = [np.finfo(np.float32).max, np.finfo(np.float32).min]  # the full range is data
    mask = rng.random(n) < 0.2
    w.array(depth, "values", values, 64)
    w.array(depth, "mask", mask, 64)
    w.table(g, [("plot_id", "plot_id"), ("species", "species"), ("depth_m", "depth_m")])


def _station_hourly(w: _Writer) -> None:
    rng = np.random.default_rng(4)
    g = w.root.create_group("station_hourly")
    n = 30
    w.array(g, "station_id", _strings([f"ST{i:02d}" for i in range(n)]), 7)
    temps = rng.normal(12, 8, (n, 24)).astype(np.float32)
    temps[5, 3] = temps[6, :] = np.nan
    w.array(
        g,
        "temperature_c",
        temps,
        (7, 12),
        dims=["row", "hour"],
        attrs={"type": "float32", "description": "Hourly temperature readings"},
    )
    w.table(g, [("station_id", "station_id"), ("temperature_c", "temperature_c")], index="station_id")


def _trajectories(w: _Writer) -> None:
    rng = np.random.default_rng(5)
    g = w.root.create_group("trajectories")
    n = 15
    w.array(g, "trajectory_id", _strings([f"T{i:02d}" for i in range(n)]), 4)
    platforms = ["ship", "glider", "float", "drifter"]
    w.array(
        g,
        "platform",
        _strings([platforms[k] for k in rng.integers(0, 4, n)]),
        4,
        attrs={"type": "string", "categories": platforms},
    )
    counts = rng.integers(2, 9, n)
    counts[4], counts[9] = 0, 1  # an empty track and a single vertex
    track = g.create_group("track")
    track.attrs.update(
        {
            "type": "float64",
            "description": "Trajectory vertices, in temporal order",
            "encoding-type": "linestring",
            "axes": ["x", "y"],
        }
    )
    w.array(track, "coords", rng.uniform(-180, 180, (int(counts.sum()), 2)), 10)
    w.array(track, "geom_offsets", _offsets(counts), 6)
    w.table(
        g,
        [("trajectory_id", "trajectory_id"), ("platform", "platform"), ("track", "track")],
        index="trajectory_id",
        primary_geometry="track",
    )


def _stations(w: _Writer) -> None:
    rng = np.random.default_rng(6)
    g = w.root.create_group("stations")
    n = 18
    w.array(g, "station_id", _strings([f"S{i:02d}" for i in range(n)]), 5)
    loc = np.column_stack([rng.uniform(-10, 10, n), rng.uniform(40, 60, n)])
    loc[7] = np.nan  # every coordinate missing: a NULL point
    w.array(g, "location", loc, 5, attrs={"type": "float64", "encoding-type": "point", "axes": ["x", "y"]})
    w.table(
        g, [("station_id", "station_id"), ("location", "location")], index="station_id", primary_geometry="location"
    )


def _ring(cx: float, cy: float, r: float, k: int, clockwise: bool) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, k, endpoint=False) * (-1 if clockwise else 1)
    pts = np.column_stack([cx + r * np.cos(t), cy + r * np.sin(t)])
    return np.vstack([pts, pts[:1]])  # closed


def _parcels(w: _Writer) -> None:
    rng = np.random.default_rng(7)
    g = w.root.create_group("parcels")
    n = 10
    holes = [0, 1, 2, 0, 1, 0, 0, 3, 1, 0]
    rings, ring_counts = [], []
    for i in range(n):
        cx, cy = 100.0 * i, 50.0
        rings.append(_ring(cx, cy, 40, int(rng.integers(4, 9)), clockwise=False))
        rings.extend(_ring(cx - 20 + 15 * h, cy, 5, 4, clockwise=True) for h in range(holes[i]))
        ring_counts.append(1 + holes[i])
    w.array(g, "parcel_id", np.arange(1000, 1000 + n, dtype=np.int32), 3)
    w.array(g, "owner", _strings([f"owner {i % 4}" for i in range(n)]), 3)
    poly = g.create_group("outline")
    poly.attrs.update({"type": "float64", "encoding-type": "polygon", "axes": ["x", "y"]})
    w.array(poly, "coords", np.vstack(rings), 16)
    w.array(poly, "ring_offsets", _offsets([len(r) for r in rings]), 5)
    w.array(poly, "geom_offsets", _offsets(ring_counts), 4)
    w.table(
        g,
        [("parcel_id", "parcel_id"), ("owner", "owner"), ("outline", "outline")],
        index="parcel_id",
        primary_geometry="outline",
    )


def _tracks_3d(w: _Writer) -> None:
    rng = np.random.default_rng(8)
    g = w.root.create_group("tracks_3d")
    n = 6
    counts = rng.integers(1, 5, n)
    w.array(g, "dive", np.arange(n, dtype=np.int64), 4)
    track = g.create_group("path")
    track.attrs.update({"encoding-type": "linestring", "axes": ["x", "y", "z", "m"]})
    w.array(track, "coords", rng.uniform(-5, 5, (int(counts.sum()), 4)), 8)
    w.array(track, "geom_offsets", _offsets(counts), 8)
    w.table(g, [("dive", "dive"), ("path", "path")])


def _stations_3d(w: _Writer) -> None:
    rng = np.random.default_rng(9)
    g = w.root.create_group("stations_3d")
    n = 7
    w.array(g, "code", _strings([f"Z{i}" for i in range(n)]), 3)
    w.array(
        g,
        "position",
        rng.uniform(0, 90, (n, 3)).astype(np.float32),
        3,
        attrs={"encoding-type": "point", "axes": ["y", "x", "z"]},
    )
    w.table(g, [("code", "code"), ("position", "position")], index="code")


def _readings(w: _Writer) -> None:
    rng = np.random.default_rng(10)
    g = w.root.create_group("readings")
    n = 12
    temps = rng.integers(-300, 400, n).astype(np.int16)
    temps[[2, 8]] = -999
    w.array(g, "temp_c", temps, 6, attrs={"missing_value": -999, "description": "tenths of a degree"})
    w.array(g, "rid", _strings([f"R{i:02d}" for i in range(n)]), 6)
    status = ["ok", "n/a", "ok", "stale", "n/a", "ok", "ok", "ok", "stale", "ok", "n/a", "ok"]
    w.array(g, "status", _strings(status), 6, attrs={"missing_value": "n/a"})
    w.table(g, [("Temp (dC)", "temp_c"), ("reading_id", "rid"), ("status", "status")], index="reading_id")


def _unregistered(w: _Writer) -> None:
    g = w.root.create_group("unregistered")
    w.array(g, "a", np.arange(4, dtype=np.int64), 2)
    g.attrs.update({"table:columns": [{"name": "a", "node": "a"}]})


# ----------------------------------------------------------------------------- other stores
def _sites(w: _Writer) -> None:
    rng = np.random.default_rng(11)
    g = w.root.create_group("sites")
    n = 1000
    w.array(g, "site_id", _strings([f"S{i:04d}" for i in range(n)]), 100)
    w.array(g, "value", rng.normal(size=n), 100)
    counts = rng.integers(0, 6, n)
    track = g.create_group("track")
    track.attrs.update({"encoding-type": "linestring", "axes": ["x", "y"]})
    w.array(track, "coords", rng.uniform(0, 1, (int(counts.sum()), 2)), 128)
    w.array(track, "geom_offsets", _offsets(counts), 100)
    ring_counts = rng.integers(1, 3, n)
    vertex_counts = rng.integers(4, 7, int(ring_counts.sum()))
    area = g.create_group("area")
    area.attrs.update({"encoding-type": "polygon", "axes": ["x", "y"]})
    w.array(area, "coords", rng.uniform(0, 1, (int(vertex_counts.sum()), 2)), 256)
    w.array(area, "ring_offsets", _offsets(vertex_counts), 64)
    w.array(area, "geom_offsets", _offsets(ring_counts), 100)
    w.table(g, [("site_id", "site_id"), ("value", "value"), ("track", "track"), ("area", "area")], index="site_id")


def _opaque(w: _Writer) -> None:
    g = w.root.create_group("mixed")
    w.array(g, "id", np.arange(5, dtype=np.int64), 5)
    multi = g.create_group("shapes")
    multi.attrs.update({"encoding-type": "multipolygon", "axes": ["x", "y"]})
    w.array(multi, "coords", np.zeros((3, 2)), 3)
    w.array(multi, "part_offsets", np.array([0, 1, 2], dtype=np.int64), 3)
    w.array(g, "blob", np.arange(5, dtype=np.uint8), 5, attrs={"encoding-type": "x-custom-bits"})
    w.array(g, "label", _strings(list("abcde")), 5)
    w.table(g, [("id", "id"), ("shapes", "shapes"), ("blob", "blob"), ("label", "label")])


def _linestring(w: _Writer, g: Any, name: str, coords: np.ndarray, offsets: np.ndarray) -> None:
    track = g.create_group(name)
    track.attrs.update({"encoding-type": "linestring", "axes": ["x", "y"]})
    w.array(track, "coords", coords, 4)
    w.array(track, "geom_offsets", offsets.astype(np.int64), 4)


def _broken(w: _Writer) -> None:
    root = w.root
    g = root.create_group("unequal_length")
    w.array(g, "long", np.arange(10.0), 5)
    w.array(g, "short", np.arange(9.0), 5)
    w.table(g, [("long", "long"), ("short", "short")])
    g = root.create_group("unequal_chunks")
    w.array(g, "a", np.arange(10.0), 5)
    w.array(g, "b", np.arange(10.0), 4)
    w.table(g, [("a", "a"), ("b", "b")])
    g = root.create_group("missing_node")
    w.array(g, "a", np.arange(3.0), 3)
    w.table(g, [("a", "a"), ("ghost", "ghost")])
    g = root.create_group("missing_child")
    w.array(g, "a", np.arange(3.0), 3)
    sp = g.create_group("species")
    sp.attrs.update({"encoding-type": "categorical", "ordered": False})
    w.array(sp, "categories", _strings(["x", "y"]), 2)
    w.table(g, [("a", "a"), ("species", "species")])
    g = root.create_group("geom_length")
    w.array(g, "a", np.arange(4.0), 2)
    _linestring(w, g, "track", np.zeros((6, 2)), np.array([0, 2, 4, 6]))  # N offsets, not N+1
    w.table(g, [("a", "a"), ("track", "track")])
    g = root.create_group("bad_axes")
    w.array(g, "where", np.zeros((3, 2)), 3, attrs={"encoding-type": "point", "axes": ["x"]})
    w.table(g, [("where", "where")])
    g = root.create_group("bad_index")
    w.array(g, "a", np.arange(3.0), 3)
    w.table(g, [("a", "a")], index="nope")
    g = root.create_group("compound_array")
    w.array(g, "track", np.zeros((3, 2)), 3, attrs={"encoding-type": "linestring", "axes": ["x", "y"]})
    w.table(g, [("track", "track")])
    # data that breaks a rule: found when read
    for name, offsets, n_coords in (
        ("decreasing_offsets", [0, 2, 3, 1, 4], 4),
        ("overrun_offsets", [0, 2, 3, 5, 9], 6),
    ):
        g = root.create_group(name)
        w.array(g, "a", np.arange(4.0), 2)
        _linestring(w, g, "track", np.arange(2.0 * n_coords).reshape(n_coords, 2), np.array(offsets))
        w.table(g, [("a", "a"), ("track", "track")])
    g = root.create_group("decreasing_rings")
    w.array(g, "a", np.arange(2.0), 2)
    poly = g.create_group("outline")
    poly.attrs.update({"encoding-type": "polygon", "axes": ["x", "y"]})
    w.array(poly, "coords", np.zeros((12, 2)), 4)
    w.array(poly, "ring_offsets", np.array([0, 4, 8, 6], dtype=np.int64), 4)
    w.array(poly, "geom_offsets", np.array([0, 1, 3], dtype=np.int64), 4)
    w.table(g, [("a", "a"), ("outline", "outline")])
    g = root.create_group("bad_codes")
    w.array(g, "kind", np.array([0, 1, 7, 1], dtype=np.int8), 2, attrs={"categories": ["p", "q"]})
    w.table(g, [("kind", "kind")])


def _root_table(w: _Writer) -> None:
    w.array(w.root, "plot", _strings(["a", "b", "c"]), 2)
    w.array(w.root, "area_ha", np.array([1.5, 2.5, 0.25]), 2)
    w.table(w.root, [("plot", "plot"), ("area_ha", "area_ha")], index="plot")


STORES = {
    "examples.zarr": [
        _weather_stations,
        _survey_plots,
        _forest_inventory,
        _station_hourly,
        _trajectories,
        _stations,
        _parcels,
        _tracks_3d,
        _stations_3d,
        _readings,
        _unregistered,
    ],
    "sites.zarr": [_sites],
    "opaque.zarr": [_opaque],
    "broken.zarr": [_broken],
    "plots.zarr": [_root_table],
}


def write_stores(root: Path) -> dict[str, Path]:
    """Write every store in both formats; returns `v<fmt>/<name>` → path."""
    out = {}
    for fmt in FORMATS:
        for name, writers in STORES.items():
            path = root / f"v{fmt}" / name
            w = _Writer(path, fmt)
            for write in writers:
                write(w)
            out[f"v{fmt}/{name}"] = path
    return out
