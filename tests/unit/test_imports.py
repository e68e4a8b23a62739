"""`import zarrsql` and the command line's `--help` / `--version` load neither DuckDB nor
pyarrow, and every public name still resolves. Import state is per process, so the checks
run in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version

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


def test_mount_stays_the_function_after_importing_its_module() -> None:
    code = (
        "import json, zarrsql\n"
        "import zarrsql.mount\n"
        "from zarrsql.mount import unmount\n"
        "print(json.dumps([callable(zarrsql.mount), zarrsql.mount.__module__, zarrsql.unmount is unmount]))"
    )
    assert _fresh(code) == [True, "zarrsql.mount", True]


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        zarrsql.no_such_name  # noqa: B018


CORE = ("zarrsql.scan", "zarrsql.plan", "zarrsql.conventions", "zarrsql.decode", "zarrsql.metadata.tree")


def test_the_core_imports_with_duckdb_and_pyarrow_blocked() -> None:
    """The Zarr core stands without the engine: with duckdb and pyarrow made unimportable
    (a `None` in sys.modules makes `import` raise), every core module still loads."""
    code = (
        "import importlib, json, sys\n"
        "sys.modules['duckdb'] = None\n"
        "sys.modules['pyarrow'] = None\n"
        f"for name in {CORE!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('zarrsql.engine'))))"
    )
    assert _fresh(code) == []
