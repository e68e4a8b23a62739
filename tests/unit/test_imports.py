"""`import zarrsql` and the command line's `--help` / `--version` load neither DuckDB nor
pyarrow, and every public name still resolves. Import state is per process, so the checks
run in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import zarrsql
from cli_runner import cli_env

HEAVY = ("duckdb", "pyarrow", "numpy", "zarr")


def _fresh(code: str) -> dict:
    """Run `code` in a new interpreter; it prints one JSON line, returned here."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_zarrsql_loads_no_engine() -> None:
    loaded = _fresh(f"import json, sys, zarrsql; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert loaded == []


def test_error_classes_need_no_engine() -> None:
    code = (
        "import json, sys\n"
        "from zarrsql import ZarrSQLError, StoreNotFoundError, ParameterError, ZarrSQLWarning, trace\n"
        "assert issubclass(StoreNotFoundError, (ZarrSQLError, FileNotFoundError))\n"
        "print(json.dumps([m for m in ('duckdb', 'pyarrow') if m in sys.modules]))"
    )
    assert _fresh(code) == []


def test_cli_help_and_version_load_no_engine() -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from zarrsql.cli import main\n"
        "seen = {}\n"
        "for args in (['--help'], ['query', '--help'], ['--version']):\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            main(args)\n"
        "        except SystemExit as e:\n"
        "            assert e.code == 0, e.code\n"
        "    seen[' '.join(args)] = [buf.getvalue(), [m for m in ('duckdb', 'pyarrow') if m in sys.modules]]\n"
        "print(json.dumps(seen))"
    )
    seen = _fresh(code)
    for args, (_text, loaded) in seen.items():
        assert loaded == [], args
    assert "usage: zarrsql" in seen["--help"][0]
    assert "--max-rows" in seen["query --help"][0]
    assert seen["--version"][0].strip() == f"zarrsql {zarrsql.__version__} (DuckDB {version('duckdb')})"


def test_every_name_in_all_resolves() -> None:
    for name in zarrsql.__all__:
        assert getattr(zarrsql, name) is not None, name
    assert set(zarrsql.__all__) <= set(dir(zarrsql))
    assert zarrsql.connect().sql("SELECT 41 + 1").fetchall() == [(42,)]


def test_names_of_the_api_contract_import() -> None:
    """Every `zarrsql.<name>` of the API contract (its Python section and first release)."""
    from zarrsql import (
        Connection,
        ParameterError,
        Trace,
        ZarrSQLError,
        ZarrSQLWarning,
        connect,
        mount,
        read_zarr,
        read_zarr_groups,
        read_zarr_metadata,
        read_zarr_tables,
        read_zarr_views,
        register,
        sql,
        trace,
        unmount,
    )

    names = [Connection, ParameterError, Trace, ZarrSQLError, ZarrSQLWarning, connect, mount, read_zarr]
    names += [read_zarr_groups, read_zarr_metadata, read_zarr_tables, read_zarr_views, register, sql, trace, unmount]
    assert all(callable(n) for n in names)


def test_mount_is_the_function_and_not_a_module() -> None:
    """`zarrsql.mount` is a function defined with the other Python API functions, whatever
    was imported before it (there is no `zarrsql.mount` module to shadow it)."""
    code = (
        "import json, zarrsql, zarrsql.engine.api\n"
        "from zarrsql import unmount\n"
        "print(json.dumps([callable(zarrsql.mount), zarrsql.mount.__module__, zarrsql.unmount is unmount]))"
    )
    assert _fresh(code) == [True, "zarrsql.engine.api", True]


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        zarrsql.no_such_name  # noqa: B018


CORE = ("zarrsql.scan", "zarrsql.plan", "zarrsql.conventions", "zarrsql.decode", "zarrsql.metadata.tree")
#: The packages under the engine: the Zarr core, which must stand without DuckDB.
CORE_PACKAGES = ("scan", "expand", "plan", "decode", "tables", "conventions", "discovery", "metadata", "store")
#: The core modules whose job is to build Arrow (the only ones that may import pyarrow).
ARROW_MODULES = {"zarrsql.expand.arrow", "zarrsql.scan.reader"}


def _core_modules() -> list[str]:
    root = Path(zarrsql.__file__).parent
    out = []
    for package in CORE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_every_core_module_imports_with_duckdb_and_pyarrow_blocked() -> None:
    """The Zarr core stands without the engine: with duckdb and pyarrow made unimportable
    (a `None` in sys.modules makes `import` raise), every core module still loads (those
    that build Arrow with duckdb alone blocked), and none pulls in the engine package."""
    modules = _core_modules()
    assert len(modules) > 40 and "zarrsql.scan.entry" in modules and set(CORE) <= set(modules) | {"zarrsql.scan"}
    plain = [m for m in modules if m not in ARROW_MODULES]
    code = (
        "import importlib, json, sys\n"
        "sys.modules['duckdb'] = None\n"
        "sys.modules['pyarrow'] = None\n"
        f"for name in {plain!r}: importlib.import_module(name)\n"
        "sys.modules.pop('pyarrow')\n"
        f"for name in {sorted(ARROW_MODULES)!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('zarrsql.engine'))))"
    )
    assert _fresh(code) == []


def test_a_numpy_only_script_plans_and_decodes_through_the_entry_point(tmp_path: Path) -> None:
    """The core's entry point read from a script with DuckDB and pyarrow unimportable: the
    columns and rows equal numpy's reading of the arrays zarr-python wrote."""
    import numpy as np
    import zarr

    temp = np.arange(4 * 6 * 5, dtype="float32").reshape(4, 6, 5) / 7
    temp[1, 2, 3] = np.nan
    root = zarr.open_group(str(tmp_path / "t.zarr"), mode="w")
    for name, values in {"time": np.arange(4), "lat": np.linspace(50, 40, 6), "lon": np.arange(5.0)}.items():
        root.create_array(name, data=values, dimension_names=[name])
    root.create_array("t", data=temp, chunks=(2, 3, 5), dimension_names=["time", "lat", "lon"])
    script = (
        "import json, sys\n"
        "sys.modules['duckdb'] = None; sys.modules['pyarrow'] = None\n"
        "import numpy as np\n"
        "from zarrsql.plan.predicate import Cmp\n"
        "from zarrsql.scan import open_scan\n"
        f"scan = open_scan({{'store': {str(tmp_path / 't.zarr')!r}}}, columns=['lat', 't'], predicate=Cmp('lat', '>', 45.0))\n"
        "rows = [(float(la), None if n else float(v)) for part in scan.arrays()\n"
        "        for la, v, n in zip(part['lat'][0], part['t'][0], part['t'][1] if part['t'][1] is not None\n"
        "                            else np.zeros(len(part['t'][0]), bool))]\n"
        "print(json.dumps([rows, 'pyarrow' in sys.modules and sys.modules['pyarrow'] is not None]))"
    )
    rows, arrow_loaded = _fresh(script)
    lat = np.linspace(50, 40, 6)
    expected = [
        (float(lat[j]), None if np.isnan(temp[i, j, k]) else float(temp[i, j, k]))
        for i in range(4)
        for j in range(6)
        for k in range(5)
        if lat[j] > 45.0
    ]
    assert sorted(map(tuple, rows), key=repr) == sorted(expected, key=repr)
    assert arrow_loaded is False
