"""Fuzzing: mutated metadata documents and chunk bytes give a zarrsql error or the right rows.

Start from small stores written by zarr-python (Zarr v2 and v3, consolidated or not), mutate
one document (a field's JSON type changed, a field dropped, deep nesting, huge and negative
numbers, a wrong number of dimension names, non-UTF-8 bytes, truncation) or one chunk
(random bytes, truncation, bit flips in gzip/zlib/zstd/blosc/sharded chunks, deletion), then
list and read the store. Allowed outcomes:

- a metadata mutation: a `ZarrSQLError` whose text carries no DuckDB traceback, or a result;
  when zarrsql reads array `v` and zarr-python reads the same mutated store, the values agree;
- a chunk mutation: a `DecodeError`, or exactly the values zarr-python reads from the same bytes.

Each search runs in a subprocess with an address-space limit (`FUZZ_MEMORY`) and a timeout
(`FUZZ_TIMEOUT`), so a blow-up or a hang fails its test instead of the suite. The searches use
the hypothesis profile named by `ZARRSQL_FUZZ_PROFILE`: `fuzz-ci` (the default: derandomized,
no example database, a few tens of seconds) or `fuzz-long` (random, many more examples).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

FUZZ_TIMEOUT = 300  # seconds for one search; the CI profile takes ~20 s alone
FUZZ_MEMORY = 4 * 2**30  # bytes of address space for the search process


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (FUZZ_MEMORY, FUZZ_MEMORY))


def _search(kind: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(
            [sys.executable, __file__, kind],
            env=env,
            capture_output=True,
            text=True,
            timeout=FUZZ_TIMEOUT,
            preexec_fn=_limit_memory,  # noqa: PLW1509 (no threads are running in the child yet)
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        out = (err.stdout or b"")[-4000:]
        pytest.fail(f"the {kind} fuzz search did not finish in {FUZZ_TIMEOUT} s (a hang?); output:\n{out!r}")
    assert proc.returncode == 0, f"{kind} fuzz search failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-12000:]}"
    print(proc.stdout[-2000:])


@pytest.mark.timeout(FUZZ_TIMEOUT + 60)
def test_mutated_metadata_gives_only_zarrsql_errors_or_right_rows() -> None:
    _search("metadata")


@pytest.mark.timeout(FUZZ_TIMEOUT + 60)
def test_mutated_chunks_give_only_decode_errors_or_right_rows() -> None:
    _search("chunks")


# ---------------------------------------------------------------------------------------------
# the searches (run as `python test_fuzz_metadata.py metadata|chunks`, in the child process)
# ---------------------------------------------------------------------------------------------

#: Integers that break sizes: negative, zero, tiny, beyond 2**32 (a scan's dimension bound),
#: 2**63 and 2**64 (signed/unsigned 64-bit edges). No values between 2**10 and 2**32: a shape
#: there is a large but valid table whose positions would really be allocated.
INTERESTING_INTS = [-(2**63), -1, 0, 1, 2, 3, 5, 8, 2**40, 10**18, 2**63 - 1, 2**63, 2**64, 10**30]
WORDS = ["", "a", "t", "x", "v", "float64", "int8", "uint64", "bool", "string", "regular", "default", "v2"]
WORDS += ["bytes", "gzip", "zstd", "blosc", "zlib", "transpose", "sharding_indexed", "little", "big", "NaN"]
WORDS += [
    "Infinity",
    "0x7ff8000000000000",
    "NaT",
    "/",
    ".",
    "C",
    "F",
    "<f8",
    "|O",
    "array",
    "group",
    "\u00e9",
    "\ud800",
]
KEYS = ["name", "configuration", "id", "level", "order", "endian", "shape", "separator", "a", "chunk_shape"]
DEPTHS = [2, 100, 128, 129, 1000, 100_000]
NON_UTF8 = [b"\xff", b"\xc3\x28", b"\x80", b"\xed\xa0\x80", b"\x00"]


def _profiles() -> None:
    from hypothesis import HealthCheck, settings

    common = {"deadline": None, "suppress_health_check": list(HealthCheck), "print_blob": True}
    settings.register_profile("fuzz-ci", max_examples=200, derandomize=True, database=None, **common)
    settings.register_profile("fuzz-long", max_examples=5000, **common)
    settings.load_profile(os.environ.get("ZARRSQL_FUZZ_PROFILE", "fuzz-ci"))


def _write_bases(root: Path) -> dict[str, Path]:
    """The stores every example starts from, written by zarr-python."""
    import numpy as np
    import zarr

    out = {}
    rng = np.random.default_rng(0)
    for fmt in (2, 3):
        path = root / f"v{fmt}.zarr"
        g = zarr.open_group(path, mode="w", zarr_format=fmt, attributes={"title": "fuzz"})

        def dims(*names: str, fmt: int = fmt) -> dict[str, Any]:
            return {"dimension_names": list(names)} if fmt == 3 else {"attributes": {"_ARRAY_DIMENSIONS": list(names)}}

        g.create_array("t", shape=(6,), chunks=(4,), dtype="i8", **dims("t"))[:] = np.arange(6) * 10
        v = g.create_array("v", shape=(6, 3), chunks=(4, 2), dtype="f8", fill_value=-1.5, **dims("t", "x"))
        v[:] = rng.normal(size=(6, 3)).round(3)
        w = g.create_array("w", shape=(6,), chunks=(2,), dtype="i2", fill_value=7, **dims("t"))
        w[:2] = [1, 2]  # the other chunks are missing: they read as the fill value
        out[f"v{fmt}"] = path
        consolidated = root / f"v{fmt}c.zarr"
        shutil.copytree(path, consolidated)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(str(consolidated), zarr_format=fmt)
        out[f"v{fmt}c"] = consolidated
    return out


def _documents(store: Path) -> list[str]:
    names = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.name in names)


def _json_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every position in a JSON value, as the keys/indexes that reach it (the root is ())."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _json_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _json_paths(v, (*prefix, i))
    return out


_MARK = "\x00zarrsql-fuzz-mark\x00"


def _set(doc: Any, path: tuple, value: Any, *, delete: bool = False) -> Any:
    if not path:
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _strategies() -> Any:
    from hypothesis import strategies as st

    scalars = (
        st.none()
        | st.booleans()
        | st.sampled_from(INTERESTING_INTS)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from(WORDS)
    )
    values = st.recursive(
        scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(KEYS), c, max_size=3), max_leaves=8
    )

    @st.composite
    def json_mutation(draw: Callable[..., Any], doc: Any) -> tuple[Any, int]:
        """The mutated document and the depth to nest the marked value at (0: none)."""
        doc = json.loads(json.dumps(doc))
        for _ in range(draw(st.integers(1, 3))):
            paths = _json_paths(doc)
            path = draw(st.sampled_from(paths))
            op = draw(st.sampled_from(["replace", "replace", "delete", "ints", "names"]))
            if op == "delete" and path:
                doc = _set(doc, path, None, delete=True)
            elif op == "ints":
                doc = _set(doc, path, draw(st.lists(st.sampled_from(INTERESTING_INTS), max_size=3)))
            elif op == "names":
                doc = _set(doc, path, draw(st.lists(st.sampled_from(["t", "x", None, ""]), max_size=3)))
            else:
                doc = _set(doc, path, draw(values))
        depth = 0
        if draw(st.integers(0, 4)) == 0:
            depth = draw(st.sampled_from(DEPTHS))
            path = draw(st.sampled_from(_json_paths(doc)))
            doc = _set(doc, path, _MARK) if path else _MARK
        return doc, depth

    @st.composite
    def byte_mutation(draw: Callable[..., Any], raw: bytes) -> bytes:
        op = draw(st.sampled_from(["truncate", "flip", "non-utf8", "junk"]))
        pos = draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "truncate":
            return raw[:pos]
        if op == "flip":
            return raw[:pos] + bytes([raw[pos] ^ (1 << draw(st.integers(0, 7)))]) + raw[pos + 1 :] if raw else raw
        if op == "non-utf8":
            return raw[:pos] + draw(st.sampled_from(NON_UTF8)) + raw[pos:]
        return draw(st.binary(max_size=64))

    return st, json_mutation, byte_mutation


def _serialize(doc: Any, depth: int) -> bytes:
    text = json.dumps(doc, allow_nan=True)
    if depth:
        marked = json.dumps(_MARK)
        text = text.replace(marked, "[" * depth + "1" + "]" * depth, 1)
    return text.encode()


def _comparable(values: list[Any], fill: Any) -> tuple[int, list[Any]]:
    """(count, the values sorted) leaving out NULL, NaN and the fill value: the cells zarrsql may
    read as NULL (a fill value is a missing-value sentinel, decode/sentinel.py) and zarr-python
    reads as values."""

    def missing(v: Any) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v)) or (fill is not None and v == fill)

    return len(values), sorted((v for v in values if not missing(v)), key=repr)


def _zarr_values(store: Path, path: str) -> tuple[list[Any], Any] | None:
    """zarr-python's values of a numeric array and its fill value; None when it cannot read it."""
    import numpy as np
    import zarr

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = zarr.open_group(str(store), mode="r")[path]  # through consolidated metadata, as zarrsql
            if not isinstance(arr, zarr.Array):
                return None
            if arr.dtype.kind not in "biuf" or arr.size > 10_000:
                return None
            values = np.asarray(arr[...]).ravel().tolist()
            fill = None if arr.fill_value is None else np.asarray(arr.fill_value).item()
    except Exception:  # zarr-python refusing the mutated store is its business
        return None
    return values, fill


def _our_values(con: Any, store: Path, path: str) -> list[Any]:
    """zarrsql's values of the array (through `execute`, so a streamed error keeps its type)."""
    rows = con.execute(f"SELECT * FROM read_zarr('{store}', array_path := '{path}')").fetchall()
    return [r[-1] for r in rows]  # the array's column comes last


def _check_agrees(ours: list[Any], store: Path, path: str, what: str) -> None:
    """When zarr-python reads the array too, both read the same cells."""
    theirs = _zarr_values(store, path)
    if theirs is not None:
        values, fill = theirs
        assert _comparable(ours, fill) == _comparable(values, fill), f"{what}: zarrsql {ours} != zarr-python {values}"


def _check_text(err: BaseException) -> None:
    text = str(err)
    assert "Python exception" not in text, f"DuckDB's UDF text leaked: {text}"
    assert "Traceback" not in text, f"a traceback leaked: {text}"


def _metadata_search(bases: dict[str, Path], scratch: Path) -> Counter:
    from hypothesis import given

    import zarrsql

    st, json_mutation, byte_mutation = _strategies()
    con = zarrsql.connect()
    raws = {(b, d): (p / d).read_bytes() for b, p in bases.items() for d in _documents(p)}
    outcomes: Counter = Counter()
    counter = iter(range(10**9))

    @st.composite
    def examples(draw: Callable[..., Any]) -> tuple[str, str, bytes]:
        base, doc = draw(st.sampled_from(sorted(raws)))
        raw = raws[(base, doc)]
        if draw(st.integers(0, 3)) == 0:
            return base, doc, draw(byte_mutation(raw))
        mutated, depth = draw(json_mutation(json.loads(raw)))
        return base, doc, _serialize(mutated, depth)

    @given(examples())
    def search(example: tuple[str, str, bytes]) -> None:
        base, doc, raw = example
        store = scratch / f"m{next(counter)}.zarr"
        shutil.copytree(bases[base], store)
        (store / doc).write_bytes(raw)
        reads: list[tuple[str, Callable[[], Any]]] = [
            ("metadata", lambda: zarrsql.read_zarr_metadata(str(store), connection=con).fetchall()),
            ("tables", lambda: con.execute(f"SELECT * FROM read_zarr_tables('{store}')").fetchall()),
            (
                "table",
                lambda: con.execute(f"SELECT * FROM read_zarr('{store}', table_name := 't_x') LIMIT 5").fetchall(),
            ),
            ("array", lambda: _our_values(con, store, "v")),
        ]
        for name, read in reads:
            try:
                result = read()
            except zarrsql.ZarrSQLError as err:
                _check_text(err)
                outcomes[f"{name}: {type(err).__name__}"] += 1
                continue
            outcomes[f"{name}: ok"] += 1
            if name == "array":
                _check_agrees(result, store, "v", f"{doc} of {base} mutated")
        shutil.rmtree(store)

    search()
    return outcomes


def _write_chunk_bases(root: Path) -> dict[str, Path]:
    """One store per compressor, written by zarr-python (v2 and v3; a sharded v3 array)."""
    import numcodecs
    import numpy as np
    import zarr
    import zarr.codecs as zc

    rng = np.random.default_rng(1)
    data = rng.integers(-1000, 1000, size=(6, 4)).astype("i4")
    v3 = {
        "gzip": {"compressors": [zc.GzipCodec(level=5)]},
        "zstd": {"compressors": [zc.ZstdCodec(level=3)]},
        "blosc": {"compressors": [zc.BloscCodec(cname="lz4", shuffle="shuffle")]},
        "raw": {"compressors": None},
        "sharded": {"compressors": [zc.GzipCodec()], "shards": (6, 4)},
    }
    v2 = {
        "zlib": numcodecs.Zlib(level=1),
        "gzip": numcodecs.GZip(level=1),
        "zstd": numcodecs.Zstd(level=1),
        "blosc": numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE),
    }
    out = {}
    for name, kw in v3.items():
        path = root / f"v3-{name}.zarr"
        g = zarr.open_group(path, mode="w", zarr_format=3)
        g.create_array("v", shape=data.shape, chunks=(3, 2), dtype="i4", fill_value=-9, **kw)[:] = data
        out[f"v3-{name}"] = path
    for name, codec in v2.items():
        path = root / f"v2-{name}.zarr"
        g = zarr.open_group(path, mode="w", zarr_format=2)
        g.create_array("v", shape=data.shape, chunks=(3, 2), dtype="i4", fill_value=-9, compressors=codec)[:] = data
        out[f"v2-{name}"] = path
    return out


def _chunk_search(bases: dict[str, Path], scratch: Path) -> Counter:
    from hypothesis import given

    import zarrsql

    st, _, _ = _strategies()
    con = zarrsql.connect()
    chunks = {
        (b, str(c.relative_to(p))): c.read_bytes()
        for b, p in bases.items()
        for c in (p / "v").rglob("*")
        if c.is_file() and not c.name.startswith((".z", "zarr.json"))
    }
    outcomes: Counter = Counter()
    counter = iter(range(10**9))

    @st.composite
    def examples(draw: Callable[..., Any]) -> tuple[str, str, bytes | None]:
        base, key = draw(st.sampled_from(sorted(chunks)))
        raw = chunks[(base, key)]
        op = draw(st.sampled_from(["flip", "flip", "truncate", "random", "append", "delete", "empty"]))
        pos = draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            for _ in range(draw(st.integers(1, 3))):
                raw = raw[:pos] + bytes([raw[pos] ^ (1 << draw(st.integers(0, 7)))]) + raw[pos + 1 :]
                pos = draw(st.integers(0, len(raw) - 1))
            return base, key, raw
        if op == "truncate":
            return base, key, raw[:pos]
        if op == "random":
            return base, key, draw(st.binary(max_size=2 * len(raw)))
        if op == "append":
            return base, key, raw + draw(st.binary(min_size=1, max_size=32))
        return base, key, None if op == "delete" else b""

    @given(examples())
    def search(example: tuple[str, str, bytes | None]) -> None:
        base, key, raw = example
        store = scratch / f"c{next(counter)}.zarr"
        shutil.copytree(bases[base], store)
        if raw is None:
            (store / key).unlink()
        else:
            (store / key).write_bytes(raw)
        try:
            result = _our_values(con, store, "v")
        except zarrsql.DecodeError as err:
            _check_text(err)
            outcomes[f"{base}: DecodeError"] += 1
        else:
            outcomes[f"{base}: ok"] += 1
            _check_agrees(result, store, "v", f"chunk {key} of {base} mutated")
        shutil.rmtree(store)

    search()
    return outcomes


def main(kind: str) -> None:
    _profiles()
    with tempfile.TemporaryDirectory(prefix="zarrsql-fuzz-") as tmp:
        root = Path(tmp)
        (root / "scratch").mkdir()
        if kind == "metadata":
            outcomes = _metadata_search(_write_bases(root), root / "scratch")
        else:
            outcomes = _chunk_search(_write_chunk_bases(root), root / "scratch")
    for outcome, n in sorted(outcomes.items()):
        print(f"{n:6d}  {outcome}")


if __name__ == "__main__":
    main(sys.argv[1])
