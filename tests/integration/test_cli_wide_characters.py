"""`zarrsql query`'s text table lines up text of East Asian wide characters and combining
marks: every line of the box is as wide on a terminal as the others, as in DuckDB's own
renderer, and a value wider than a cell is clipped by columns, not characters.

The width of a line is counted here from the Unicode data (`unicodedata`): wide (W) and
full-width (F) characters take two columns, combining marks none. DuckDB's box renderer,
run on the same values, checks that this count is the one a terminal uses."""

from __future__ import annotations

import unicodedata
import warnings
from pathlib import Path

import duckdb
import numpy as np
import xarray as xr

from cli_runner import run_cli
from zarrsql.boxtable import MAX_CELL

CITIES = ["Zürich", "東京", "e\u0301cole", "ｶﾀｶﾅ", "서울특별시"]  # wide, combining, half-width


def _columns(text: str) -> int:
    return sum(
        2 if unicodedata.east_asian_width(c) in ("W", "F") else 0 if unicodedata.combining(c) else 1 for c in text
    )


def _box(text: str) -> list[str]:
    """The lines of the box (without the footer)."""
    return [line for line in text.splitlines() if line[:1] in ("┌", "│", "├", "└")]


def _cells(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("├")) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return [[c.strip() for c in line.strip("│").split("│")] for line in lines[start:end]]


def _store(tmp_path: Path, labels: list[str]) -> str:
    path = str(tmp_path / "cities.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: fixed-length strings have no Zarr v3 specification yet
        xr.Dataset({"v": (("city",), np.arange(len(labels)))}, coords={"city": labels}).to_zarr(path)
    return path


def test_wide_and_combining_characters_keep_the_box_aligned(tmp_path: Path) -> None:
    store = _store(tmp_path, CITIES)
    out = run_cli("query", store, "SELECT city, v FROM city ORDER BY v")
    assert out.returncode == 0, out.stderr
    expected = xr.open_zarr(store).to_dataframe().reset_index()
    assert _cells(out.stdout) == [[c, str(v)] for c, v in zip(expected["city"], expected["v"], strict=True)]
    # the oracle's count of columns is the one DuckDB's renderer pads by
    duckdb_box = _box(str(duckdb.sql("SELECT * FROM expected ORDER BY v")))
    assert len({_columns(line) for line in duckdb_box}) == 1, duckdb_box
    lines = _box(out.stdout)
    assert len({_columns(line) for line in lines}) == 1, lines


def test_a_value_wider_than_a_cell_is_clipped_by_columns(tmp_path: Path) -> None:
    wide = "東" * 40  # 80 columns, 40 characters: within MAX_CELL characters, not columns
    store = _store(tmp_path, [wide, "x"])
    out = run_cli("query", store, "SELECT city FROM city")
    assert out.returncode == 0, out.stderr
    shown = {row[0] for row in _cells(out.stdout)}
    (clipped,) = shown - {"x"}
    assert clipped.endswith("…")
    assert wide.startswith(clipped[:-1])
    assert MAX_CELL - 2 <= _columns(clipped) <= MAX_CELL  # a wide character is never cut in half
    lines = _box(out.stdout)
    assert len({_columns(line) for line in lines}) == 1, lines
