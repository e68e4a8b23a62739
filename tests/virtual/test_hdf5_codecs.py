"""The codecs HDF5 archives use: shuffle, zlib and fletcher32 as Zarr v2 filters and as v3
`numcodecs.*` codecs after `bytes`, read through reference stores (which have no
zarr-python fallback, so zarrsql decodes them itself); and a filter nothing can decode is
listed as unsupported, naming it, while the rest of the file reads. Oracles: numpy on the
values written, h5py on the HDF5 datasets."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import h5py
import numcodecs
import numpy as np
import pytest
import zarr

import zarrsql

DATA = (np.arange(120, dtype="f8").reshape(12, 10) * 0.25) - 7.0


def _as_reference_set(store: Path, out: Path) -> Path:
    """A version 0 reference set of a Zarr store's files: documents inline, chunks as
    whole-file references (`[url]`)."""
    refs: dict[str, object] = {}
    for f in store.rglob("*"):
        if f.is_file():
            key = f.relative_to(store).as_posix()
            is_doc = f.name in ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")
            refs[key] = f.read_text() if is_doc else [str(f)]
    out.write_text(json.dumps(refs))
    return out


def _write(path: Path, fmt: int, *, drop_elementsize: bool = False) -> None:
    from zarr.codecs import numcodecs as zn

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python warns that numcodecs.* codecs are not in the v3 spec
        g = zarr.open_group(path, mode="w", zarr_format=fmt)
        if fmt == 2:
            kwargs = {
                "filters": [numcodecs.Shuffle(elementsize=8), numcodecs.Fletcher32()],
                "compressors": numcodecs.Zlib(level=3),
            }
        else:
            kwargs = {"compressors": [zn.Shuffle(elementsize=8), zn.Zlib(level=3), zn.Fletcher32()]}
        a = g.create_array("x", shape=DATA.shape, chunks=(5, 10), dtype="f8", **kwargs)
        a[:] = DATA
    if drop_elementsize:
        doc_path = path / "x" / "zarr.json"
        doc = json.loads(doc_path.read_text())
        for c in doc["codecs"]:
            c.get("configuration", {}).pop("elementsize", None)
        doc_path.write_text(json.dumps(doc))


def _values(store: Path) -> np.ndarray:
    rows = zarrsql.connect().execute(f"SELECT x FROM read_zarr('{store}', array_path := 'x')").fetchall()
    return np.array([r[0] for r in rows])


@pytest.mark.parametrize(("fmt", "drop"), [(2, False), (3, False), (3, True)])
def test_shuffle_zlib_fletcher32_decode_through_references(tmp_path: Path, fmt: int, drop: bool) -> None:
    store = tmp_path / "s.zarr"
    _write(store, fmt, drop_elementsize=drop)
    refs = _as_reference_set(store, tmp_path / "s.json")
    np.testing.assert_array_equal(_values(refs), DATA.ravel())
    np.testing.assert_array_equal(_values(store), DATA.ravel())


def test_the_v3_codec_list_is_accepted_as_written(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    _write(store, 3)
    names = [c["name"] for c in json.loads((store / "x" / "zarr.json").read_text())["codecs"]]
    assert names == ["bytes", "numcodecs.shuffle", "numcodecs.zlib", "numcodecs.fletcher32"]


def test_a_corrupt_chunk_fails_its_fletcher32_check_by_name(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    _write(store, 3)
    chunk = store / "x" / "c" / "1" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[-6] ^= 0xFF  # inside the zlib stream's tail: checksum or zlib must object
    chunk.write_bytes(bytes(raw))
    refs = _as_reference_set(store, tmp_path / "s.json")
    with pytest.raises(zarrsql.DecodeError) as info:
        zarrsql.connect().execute(f"SELECT x FROM read_zarr('{refs}', array_path := 'x')").fetchall()
    assert "numcodecs." in str(info.value)
    assert "x/c/1/0" in str(info.value)


def test_hdf5_datasets_with_gzip_shuffle_fletcher32_read_as_h5py_reads(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=DATA, chunks=(4, 5), compression="gzip", shuffle=True, fletcher32=True)
        f.create_dataset("b", data=DATA.astype("i4"), chunks=(6, 10), compression="gzip", compression_opts=9)
    con = zarrsql.connect()
    with h5py.File(path) as f:
        for name in ("a", "b"):
            sql = (
                f"SELECT * FROM read_zarr('{path}', array_path := '{name}') ORDER BY 1, 2"  # units come chunk by chunk
            )
            rows = con.execute(sql).fetchall()
            np.testing.assert_array_equal(np.array([r[2] for r in rows]), f[name][()].ravel())


def test_a_filter_without_a_codec_is_listed_unsupported_by_name(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("good", data=np.arange(10.0))
        f.create_dataset("packed", data=np.arange(20000.0), chunks=(1000,), compression="lzf")
    con = zarrsql.connect()
    roles = dict(con.execute(f"SELECT name, role FROM read_zarr_metadata('{path}')").fetchall())
    assert roles == {"good": "data", "packed": "unsupported"}
    ((attrs,),) = con.execute(f"SELECT attrs FROM read_zarr_metadata('{path}') WHERE name = 'packed'").fetchall()
    assert "lzf" in json.loads(attrs)["error"]
    with pytest.raises(zarrsql.UnsupportedError, match="HDF5 filter 'lzf'"):
        con.execute(f"SELECT * FROM read_zarr('{path}', array_path := 'packed')").fetchall()
    assert con.execute(f"SELECT sum(good) FROM read_zarr('{path}', array_path := 'good')").fetchall() == [(45.0,)]


def test_an_unknown_numcodecs_codec_is_listed_unsupported_by_name(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    _write(store, 3)
    doc_path = store / "x" / "zarr.json"
    doc = json.loads(doc_path.read_text())
    doc["codecs"][1] = {"name": "numcodecs.nosuchcodec", "configuration": {}}
    doc_path.write_text(json.dumps(doc))
    refs = _as_reference_set(store, tmp_path / "s.json")
    con = zarrsql.connect()
    ((role, attrs),) = con.execute(f"SELECT role, attrs FROM read_zarr_metadata('{refs}') WHERE name = 'x'").fetchall()
    assert role == "unsupported"
    assert "numcodecs.nosuchcodec" in json.loads(attrs)["error"]


def test_hdf5s_fletcher32_checksum_is_verified(tmp_path: Path) -> None:
    """A flipped byte inside a stored chunk fails the chunk's checksum, named; h5py agrees
    the chunk is damaged."""
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=DATA, chunks=(4, 5), shuffle=True, fletcher32=True)  # no deflate
        info = f["a"].id.get_chunk_info(1)
    raw = bytearray(path.read_bytes())
    raw[info.byte_offset + 10] ^= 0x01
    path.write_bytes(bytes(raw))
    with h5py.File(path) as f, pytest.raises(OSError, match="(?i)checksum|filter|read"):
        f["a"][()]
    with pytest.raises(zarrsql.DecodeError) as err:
        zarrsql.connect().execute(f"SELECT * FROM read_zarr('{path}', array_path := 'a')").fetchall()
    assert "fletcher32" in str(err.value)
