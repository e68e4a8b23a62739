"""`zarrsql demo --path DIR` never deletes what it did not write, recognises its own store,
and works whatever DIR is called. The store's values are checked with zarr-python."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import zarr

from cli_runner import assert_one_error, run_cli


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_user_folder_is_left_untouched(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "sub").mkdir()
    (folder / "sub" / "data.csv").write_text("a,b\n")
    before = _files(folder)
    out = run_cli("demo", "--path", str(folder))
    assert_one_error(out, "not empty", "was not written by the demo", "--path")
    assert _files(folder) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]  # no staging folder left behind


def test_a_folder_not_ending_in_zarr_works(tmp_path: Path) -> None:
    store = tmp_path / "my-demo"
    out = run_cli("demo", "--path", str(store))
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    t2m = zarr.open_array(str(store / "t2m"), mode="r")[...]
    lat = zarr.open_array(str(store / "lat"), mode="r")[...]
    # the third query: count(t2m) per latitude band, northernmost first (the demo's ORDER BY lat DESC)
    north = int(np.argmax(lat))
    assert f"{int(np.isfinite(t2m[:, north, :]).sum())}" in out.stdout
    assert out.stdout.count("-- ") == 5  # every example query ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-demo"]


def test_an_empty_folder_receives_the_store(tmp_path: Path) -> None:
    store = tmp_path / "empty.zarr"
    store.mkdir()
    out = run_cli("demo", "--path", str(store))
    assert out.returncode == 0, out.stderr
    assert zarr.open_array(str(store / "precip"), mode="r").shape == zarr.open_array(str(store / "t2m"), mode="r").shape


def test_its_own_store_is_marked_and_reused_without_rewriting(tmp_path: Path) -> None:
    store = tmp_path / "demo.zarr"
    first = run_cli("demo", "--path", str(store))
    assert first.returncode == 0, first.stderr
    root = json.loads((store / "zarr.json").read_text())
    assert root["attributes"]["zarrsql_demo"] == 1
    (store / "README.txt").write_text("added by the user\n")  # still the demo's store (marked)
    before = _files(store)
    again = run_cli("demo", "--path", str(store))
    assert again.returncode == 0, again.stderr
    assert "written earlier" in again.stdout
    assert _files(store) == before
    # the queries print the same tables both times (the store was not rewritten)
    assert first.stdout.split("\n", 1)[1] == again.stdout.split("\n", 1)[1]


def test_a_store_of_another_demo_layout_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "old.zarr"
    zarr.open_group(str(store), mode="w", zarr_format=3, attributes={"zarrsql_demo": 0})
    before = _files(store)
    assert_one_error(run_cli("demo", "--path", str(store)), "another zarrsql version")
    assert _files(store) == before


def test_the_default_path_is_in_the_working_folder(tmp_path: Path) -> None:
    out = run_cli("demo", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "zarrsql-demo.zarr" / "zarr.json").exists()
