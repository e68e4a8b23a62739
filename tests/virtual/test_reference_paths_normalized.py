"""`virtual_chunks :=` on kerchunk references that contain `.` or `..` segments: a reference
is authorized, and read, where it really leads, and a prefix matches on path boundaries only.

Layout of the fixture (one folder per container):

    secret/a.nc       v = 0..19       (reached from allowed/ through '..')
    allowed/b.nc      v = 100..129    (a plain reference, in the authorized folder)
    allowed2/c.nc     v = 500..509    (a sibling whose name starts with 'allowed')
    allowed/*.json    reference sets, each pointing at one of the files

Oracles: xarray on each NetCDF file. The HTTP cases serve the same folder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import zarrsql
from tests.kerchunk_refs import kerchunk_refs
from zarrsql.errors import StoreReadError

NOT_AUTHORIZED = "which no virtual_chunks := prefix authorizes"


@dataclass(frozen=True)
class Folders:
    root: Path
    secret: Path
    plain: Path
    sibling: Path


def _write(nc: Path, values: np.ndarray) -> dict[str, Any]:
    """A NetCDF file of `values` and kerchunk's references to it (every chunk a byte range)."""
    nc.parent.mkdir(exist_ok=True)
    xr.Dataset({"v": ("x", values)}).to_netcdf(nc, engine="h5netcdf")
    return kerchunk_refs(nc, inline_threshold=0)


def _write_set(path: Path, refs: dict[str, Any], old: str, new: str) -> Path:
    """The references `refs` with every target `old` written as `new`, saved at `path`."""
    out = {
        **refs,
        "refs": {k: [new, *v[1:]] if isinstance(v, list) and v[0] == old else v for k, v in refs["refs"].items()},
    }
    assert any(isinstance(v, list) and v[0] == new for v in out["refs"].values())  # a chunk is a byte range
    path.write_text(json.dumps(out))
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Folders:
    root = tmp_path_factory.mktemp("paths")
    secret, plain, sibling = root / "secret" / "a.nc", root / "allowed" / "b.nc", root / "allowed2" / "c.nc"
    refs = _write(secret, np.arange(20.0))
    plain_refs = _write(plain, np.arange(100.0, 130.0))
    sibling_refs = _write(sibling, np.arange(500.0, 510.0))
    allowed = root / "allowed"
    for name, target in {
        "up.json": "../secret/a.nc",  # relative, as sets are written to travel with their files
        "up_dot.json": "./../secret/./a.nc",
        "abs_up.json": f"{root}/allowed/../secret/a.nc",
        "file_up.json": f"file://{root}/allowed/../secret/a.nc",
        "abs_secret.json": str(secret),
    }.items():
        _write_set(allowed / name, refs, str(secret), target)
    _write_set(allowed / "plain_relative.json", plain_refs, str(plain), "b.nc")
    _write_set(allowed / "plain_absolute.json", plain_refs, str(plain), str(plain))
    _write_set(allowed / "sibling.json", sibling_refs, str(sibling), str(sibling))
    _write_set(allowed / "sibling_relative.json", sibling_refs, str(sibling), "../allowed2/c.nc")
    return Folders(root, secret, plain, sibling)


def _oracle(nc: Path) -> list[tuple[int, float]]:
    with xr.open_dataset(nc, engine="h5netcdf") as ds:
        values = ds["v"].values
    return [(values.size, float(values.sum()))]


def _sum(refs: Path | str, prefixes: list[str] | None) -> list[tuple[Any, ...]]:
    given = "" if prefixes is None else ", virtual_chunks := MAP {" + ", ".join(f"'{p}': NULL" for p in prefixes) + "}"
    with zarrsql.connect() as con:
        return con.execute(f"SELECT count(*), sum(v) FROM read_zarr('{refs}'{given})").fetchall()


# ----------------------------------------------------------------------------- traversal
@pytest.mark.parametrize("name", ["up.json", "up_dot.json", "abs_up.json", "file_up.json"])
def test_a_reference_climbing_out_of_the_authorized_folder_is_refused(folders: Folders, name: str, fresh: None) -> None:
    """'allowed/../secret/a.nc' lies in secret/: authorizing allowed/ must not read it, and the
    error names the file where it really is (and the folder that would authorize it)."""
    with pytest.raises(StoreReadError, match=NOT_AUTHORIZED) as err:
        _sum(folders.root / "allowed" / name, [f"file://{folders.root}/allowed/"])
    message = str(err.value)
    assert f"points at 'file://{folders.secret}'" in message
    assert f"MAP {{'file://{folders.secret.parent}/': NULL}}" in message
    assert ".." not in message.split("points at", 1)[1]


@pytest.mark.parametrize("name", ["up.json", "up_dot.json", "abs_up.json", "file_up.json", "abs_secret.json"])
def test_the_folder_a_reference_really_reaches_authorizes_it(folders: Folders, name: str, fresh: None) -> None:
    expected = _oracle(folders.secret)
    assert _sum(folders.root / "allowed" / name, [f"file://{folders.root}/secret/"]) == expected
    assert _sum(folders.root / "allowed" / name, [f"file://{folders.root}/secret"]) == expected


def test_a_prefix_with_dot_segments_authorizes_where_it_leads(folders: Folders, fresh: None) -> None:
    refs = folders.root / "allowed" / "abs_secret.json"
    assert _sum(refs, [f"file://{folders.root}/allowed/../secret/"]) == _oracle(folders.secret)
    with pytest.raises(StoreReadError, match=NOT_AUTHORIZED):
        _sum(refs, [f"file://{folders.root}/secret/../allowed/"])


def test_without_virtual_chunks_a_relative_reference_reads_its_file(folders: Folders, fresh: None) -> None:
    """Documented: without `virtual_chunks :=` a set reads every file it points at, and a URL
    without a scheme is relative to the set's folder."""
    assert _sum(folders.root / "allowed" / "up.json", None) == _oracle(folders.secret)


# ----------------------------------------------------------------------------- siblings
@pytest.mark.parametrize("prefix", ["allowed/", "allowed", "allowed/.", "secret/../allowed/"])
@pytest.mark.parametrize("name", ["sibling.json", "sibling_relative.json"])
def test_a_prefix_does_not_authorize_a_sibling_folder(folders: Folders, prefix: str, name: str, fresh: None) -> None:
    """'allowed' is a text prefix of 'allowed2/c.nc' but not a folder holding it, written
    with or without a trailing '/' and however it collapses."""
    with pytest.raises(StoreReadError, match=NOT_AUTHORIZED):
        _sum(folders.root / "allowed" / name, [f"file://{folders.root}/{prefix}"])
    assert _sum(folders.root / "allowed" / name, [f"file://{folders.root}/allowed2/"]) == _oracle(folders.sibling)


# ----------------------------------------------------------------------------- plain paths
@pytest.mark.parametrize("name", ["plain_relative.json", "plain_absolute.json"])
@pytest.mark.parametrize(
    "prefix", ["file://{root}/allowed/", "file://{root}/allowed", "file://{root}/", "{root}/allowed/"]
)
def test_plain_references_read_as_before(folders: Folders, name: str, prefix: str, fresh: None) -> None:
    refs = folders.root / "allowed" / name
    expected = _oracle(folders.plain)
    assert _sum(refs, [prefix.format(root=folders.root)]) == expected
    assert _sum(refs, None) == expected
    with pytest.raises(StoreReadError, match=f"points at 'file://{folders.plain}'"):
        _sum(refs, [f"file://{folders.root}/secret/"])


# ----------------------------------------------------------------------------- object stores
def test_an_object_store_reference_is_checked_where_it_leads(folders: Folders, tmp_path: Path, fresh: None) -> None:
    """Refused before any request: no server is needed to see that 's3://bucket/allowed/../
    secret/a.nc' is the object 'secret/a.nc', outside 's3://bucket/allowed/'."""
    refs = json.loads((folders.root / "allowed" / "abs_secret.json").read_text())
    for target in ("s3://bucket/allowed/../secret/a.nc", "s3://bucket/allowed/%2e%2e/secret/a.nc"):
        path = _write_set(tmp_path / "s3.json", refs, str(folders.secret), target)
        with pytest.raises(StoreReadError, match=f"points at 's3://bucket/secret/a.nc', {NOT_AUTHORIZED}"):
            _sum(path, ["s3://bucket/allowed/"])
    path = _write_set(tmp_path / "s3_sibling.json", refs, str(folders.secret), "s3://bucket/allowed2/a.nc")
    with pytest.raises(StoreReadError, match=NOT_AUTHORIZED):
        _sum(path, ["s3://bucket/allowed"])


@pytest.fixture(scope="module")
def served_paths(folders: Folders) -> Iterator[Any]:
    """An HTTP server over the fixture's folder, beside a remote set in allowed/ pointing at
    the secret file relatively, once plainly and once with the dots percent-encoded."""
    from tests.remote import httpserver
    from tests.remote.conftest import stop_http

    refs = json.loads((folders.root / "allowed" / "abs_secret.json").read_text())
    _write_set(folders.root / "allowed" / "http_up.json", refs, str(folders.secret), "../secret/a.nc")
    _write_set(folders.root / "allowed" / "http_encoded.json", refs, str(folders.secret), "%2e%2e/secret/a.nc")
    server = httpserver.start(folders.root)
    yield server
    stop_http(server)


@pytest.mark.parametrize("name", ["http_up.json", "http_encoded.json"])
def test_a_remote_set_reference_climbing_out_is_refused_unread(
    folders: Folders, served_paths: Any, name: str, fresh: None
) -> None:
    served = served_paths
    served.reset()
    with pytest.raises(StoreReadError, match=f"points at '{served.url('/secret/a.nc')}', {NOT_AUTHORIZED}"):
        _sum(served.url(f"/allowed/{name}"), [served.url("/allowed/")])
    assert served.count("GET", where=lambda p: p.endswith("a.nc")) == 0
    assert _sum(served.url(f"/allowed/{name}"), [served.url("/secret/")]) == _oracle(folders.secret)
