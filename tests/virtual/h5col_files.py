"""H5Col column tables written with h5py by the layout of the H5Col data model.

`write_obs(path)` writes the group `obs`: a fixed-length UTF-8 `station`, a categorical
`kind` (int8 codes, fill -1, labels in `CATEGORIES/kind__CATEGORIES` linked by an object
reference), `t_air` (float64, fill NaN, units, valid_min/valid_max, a SORTED_ROWS index),
`samples` (int32, fill -1, valid_min 0), `tags` (a list column: OFFSETS and VALUES) and
`ok` (bool, no fill). The datasets are `EXTENT` long but NROWS is smaller: the rows past it
are reserved storage holding junk that must never appear. `stale=True` writes the index with
a validity token that no longer matches GENERATION (and an order that is wrong, so using it
would drop rows). Expectations come from h5py reading the same datasets (`expected_obs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

NROWS = 37
EXTENT = 48
CHUNK = 8
KIND_LABELS = ["manned", "automatic", "buoy"]


def _column(g: h5py.Group, name: str, data: np.ndarray, *, fill: Any = None, **attrs: Any) -> h5py.Dataset:
    kwargs: dict[str, Any] = {"chunks": (CHUNK,), "maxshape": (None,), "compression": "gzip", "shuffle": True}
    if fill is not None:
        kwargs["fillvalue"] = fill
    ds = g.create_dataset(name, data=data, **kwargs)
    for k, v in attrs.items():
        ds.attrs[k] = v
    return ds


def _values(rng: np.random.Generator) -> dict[str, Any]:
    station = np.array([f"st{i:03d}".encode() for i in range(EXTENT)], dtype="S8")
    station[5] = "Zürich".encode()
    kind = rng.integers(0, 3, EXTENT).astype("i1")
    kind[[3, 11]] = -1  # missing
    t_air = np.round(rng.normal(12.0, 6.0, EXTENT), 2)
    t_air[[2, 20]] = np.nan
    samples = rng.integers(0, 50, EXTENT).astype("i4")
    samples[[7, 30]] = -1
    lengths = rng.integers(0, 4, EXTENT)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype("i8")
    values = rng.integers(0, 1000, int(offsets[-1])).astype("i4")
    ok = rng.integers(0, 2, EXTENT).astype(bool)
    # reserved rows: junk that is not missing, so that reading them would show
    t_air[NROWS:] = 999.0
    samples[NROWS:] = 12345
    return {
        "station": station,
        "kind": kind,
        "t_air": t_air,
        "samples": samples,
        "offsets": offsets,
        "values": values,
        "ok": ok,
    }


def write_obs(path: Path, *, stale: bool = False, seed: int = 0, generation: int = 3) -> dict[str, Any]:
    """Write the `obs` table (and an unrelated array beside it) to `path`; return the raw values."""
    v = _values(np.random.default_rng(seed))
    with h5py.File(path, "w") as f:
        f.create_dataset("elsewhere", data=np.arange(6.0))
        g = f.create_group("obs")
        g.attrs["CLASS"] = "COLUMN_TABLE"
        g.attrs["VERSION"] = "1.0"
        g.attrs["NROWS"] = np.uint64(NROWS)
        g.attrs["TITLE"] = "Surface observations"
        g.attrs["column-order"] = ["station", "kind", "t_air", "samples", "tags", "ok"]
        g.attrs["GENERATION"] = np.uint64(generation)
        cats = g.create_group("CATEGORIES")
        labels = cats.create_dataset("kind__CATEGORIES", data=KIND_LABELS, dtype=h5py.string_dtype())
        _column(g, "station", v["station"], units_vocabulary="none")
        _column(g, "ok", v["ok"])
        kind = _column(g, "kind", v["kind"], fill=np.int8(-1))
        kind.attrs["CATEGORIES"] = labels.ref
        t_air = _column(g, "t_air", v["t_air"], fill=np.nan, units="degC", valid_min=-40.0, valid_max=50.0)
        _column(g, "samples", v["samples"], fill=np.int32(-1), valid_min=np.int32(0))
        tags = g.create_group("tags")
        tags.create_dataset("OFFSETS", data=v["offsets"], chunks=(CHUNK,), maxshape=(None,))
        tags.create_dataset("VALUES", data=v["values"], chunks=(16,), maxshape=(None,))
        idx = g.create_group("SEARCH_INDEXES")
        order = np.argsort(v["t_air"][:NROWS], kind="stable").astype("u8")
        if stale:
            order = order[::-1][: NROWS // 2].copy()  # wrong: must never be trusted
        sorted_rows = idx.create_dataset("t_air__sorted_rows", data=order)
        sorted_rows.attrs["KIND"] = "SORTED_ROWS"
        sorted_rows.attrs["GENERATION"] = np.uint64(generation - 1 if stale else generation)
        t_air.attrs["SEARCH_INDEX_LIST"] = np.array([sorted_rows.ref], dtype=h5py.ref_dtype)
    return v


def expected_obs(path: Path) -> list[dict[str, Any]]:
    """The table's rows as h5py reads them, with the convention's rules applied by hand."""
    with h5py.File(path, "r") as f:
        g = f["obs"]
        n = int(g.attrs["NROWS"])
        labels = [s.decode() if isinstance(s, bytes) else s for s in g["CATEGORIES/kind__CATEGORIES"][()]]
        kind_fill = g["kind"].fillvalue
        samples_fill = g["samples"].fillvalue
        offsets, values = g["tags/OFFSETS"][()], g["tags/VALUES"][()]
        rows = []
        for i in range(n):
            code = int(g["kind"][i])
            t = float(g["t_air"][i])
            s = int(g["samples"][i])
            rows.append(
                {
                    "station": g["station"][i].decode("utf-8"),
                    "kind": None if code == kind_fill else labels[code],
                    "t_air": None if np.isnan(t) else t,
                    "samples": None if s == samples_fill else s,
                    "tags": [int(x) for x in values[offsets[i] : offsets[i + 1]]],
                    "ok": bool(g["ok"][i]),
                }
            )
    return rows
