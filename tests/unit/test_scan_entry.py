"""The core's entry point `zarrsql.scan.open_scan`: projection, predicate, limit and batch
size together, against numpy on the arrays zarr-python wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrsql.errors import ParameterError
from zarrsql.plan.predicate import And, Cmp
from zarrsql.scan import ReadRequest, open_scan, open_table

TEMP = (np.arange(6 * 8 * 5, dtype="float64").reshape(6, 8, 5) - 40) / 3
LAT = np.linspace(70, 35, 8)  # descending


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("entry") / "s.zarr"
    root = zarr.open_group(str(path), mode="w")
    root.create_array("time", data=np.arange(6), dimension_names=["time"])
    root.create_array("lat", data=LAT, dimension_names=["lat"])
    root.create_array("lon", data=np.arange(5.0), dimension_names=["lon"])
    root.create_array("t", data=TEMP, chunks=(2, 3, 5), dimension_names=["time", "lat", "lon"])
    return str(path)


def _rows(parts: list[dict]) -> list[tuple]:
    out = []
    for p in parts:
        names = list(p)
        out += list(zip(*[p[n][0].tolist() for n in names], strict=True))
    return out


def _expected(mask: np.ndarray) -> list[tuple]:
    i, j, k = np.nonzero(mask)
    return list(zip(LAT[j].tolist(), TEMP[i, j, k].tolist(), strict=True))


def test_a_predicate_filters_rows_exactly_and_prunes_units(store: str) -> None:
    pred = And((Cmp("lat", "<", 60.0), Cmp("time", ">=", 4)))
    scan = open_scan({"store": store}, columns=["lat", "t"], predicate=pred)
    mask = np.zeros(TEMP.shape, bool)
    mask[4:, LAT < 60.0, :] = True
    assert sorted(_rows(list(scan.arrays()))) == sorted(_expected(mask))
    assert len(list(scan.plan.units())) < scan.plan.units_total


def test_limit_and_batch_rows_cut_both_readers_alike(store: str) -> None:
    scan = open_scan(ReadRequest(store=store), columns=["t"], limit=23, batch_rows=4)
    parts = list(scan.arrays())
    assert [len(p["t"][0]) for p in parts] == [4, 4, 4, 4, 4, 3]
    batches = list(scan.batches())
    assert all(b.num_rows <= 4 for b in batches)
    assert sum(b.num_rows for b in batches) == 23
    # the first 23 rows in plan order: unit by unit, the same rows either way
    assert [v for p in parts for v in p["t"][0].tolist()] == [v for b in batches for v in b.column(0).to_pylist()]
    assert scan.reader().read_all().num_rows == 23


def test_no_columns_still_counts_rows(store: str) -> None:
    scan = open_scan(open_table(ReadRequest(store=store)), columns=[], predicate=Cmp("lon", "=", 2.0))
    assert sum(b.num_rows for b in scan.batches()) == 6 * 8


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"columns": ["nope"]}, ["'nope'", "'t'"]),
        ({"limit": -1}, ["limit"]),
        ({"batch_rows": 0}, ["batch_rows"]),
        ({"predicate": Cmp("t", ">", 1.0)}, ["'t'", "dimension"]),
    ],
)
def test_bad_arguments_are_parameter_errors(store: str, kwargs: dict, words: list[str]) -> None:
    with pytest.raises(ParameterError) as err:
        open_scan({"store": store}, **kwargs)
    assert all(w in str(err.value) for w in words)


def test_parameters_are_checked_as_sql_checks_them(store: str) -> None:
    with pytest.raises(ParameterError, match="dims := must be a list"):
        open_scan({"store": store, "dims": "time"})
    assert Path(store).exists()
