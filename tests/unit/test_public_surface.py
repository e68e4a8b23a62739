"""The public surface: what `zarrsql` exports is the contract's names, no more and no less.

The names are the Python ones of the API contract (the project's design/API.md): those of
the first release must always be there; those planned for open issues are checked as they
land (a planned name in `__all__` must resolve and be callable); any other name in
`__all__` fails here, so a new public name is a decision, not an accident.
"""

from __future__ import annotations

import importlib

import pytest

import zarrsql

RELEASED = {
    "Connection",
    "connect",
    "register",
    "sql",
    "read_zarr",
    "read_zarr_metadata",
    "read_zarr_tables",
    "read_zarr_groups",
    "read_zarr_views",
    "mount",
    "unmount",
    "trace",
    "Trace",
    "ZarrSQLError",
    "ZarrSQLWarning",
    "__version__",
}
#: The exception tree under ZarrSQLError (user-guide.md, "Errors").
ERRORS = {
    "AccessDeniedError",
    "DecodeError",
    "MetadataError",
    "ParameterError",
    "SelectionError",
    "StoreArgumentError",
    "StoreNotFoundError",
    "StoreReadError",
    "UnsupportedError",
    # the writers' (zarrsql issue 12): refusals that leave nothing half-written
    "WriteError",
    "StoreExistsError",
    "StoreLockedError",
    "AppendSchemaError",
    "UnwritableColumnError",
}
#: Planned in the contract for the open issues (writers, places, notebooks, clients), and
#: `get_option`, the reading side of `set_option` that came with it.
PLANNED = {"to_xarray", "to_zarr", "sample", "describe", "set_option", "get_option", "serve"}


def test_all_holds_the_released_names_and_nothing_unplanned() -> None:
    exported = set(zarrsql.__all__)
    assert exported >= RELEASED | ERRORS
    unplanned = exported - RELEASED - ERRORS - PLANNED
    assert unplanned == set(), "a public name not in the API contract: add it there first, or keep it private"
    assert len(zarrsql.__all__) == len(exported), "a name is listed twice in __all__"


@pytest.mark.parametrize("name", sorted(RELEASED | ERRORS))
def test_a_released_name_resolves(name: str) -> None:
    value = getattr(zarrsql, name)
    assert value is not None
    if name != "__version__":
        assert callable(value)


@pytest.mark.parametrize("name", sorted(ERRORS | {"ZarrSQLWarning"}))
def test_the_error_classes_form_one_tree(name: str) -> None:
    cls = getattr(zarrsql, name)
    assert issubclass(cls, zarrsql.ZarrSQLError) or (name == "ZarrSQLWarning" and issubclass(cls, Warning))


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_a_planned_name_resolves_once_landed(name: str) -> None:
    if name not in zarrsql.__all__:
        with pytest.raises(AttributeError):
            getattr(zarrsql, name)
        return
    assert callable(getattr(zarrsql, name))


def test_load_ext_finds_the_ipython_hook() -> None:
    """`%load_ext zarrsql` calls `zarrsql.load_ipython_extension` (a hook, not in `__all__`)."""
    assert callable(zarrsql.load_ipython_extension)
    assert "load_ipython_extension" not in zarrsql.__all__


def test_the_spark_source_module_once_landed() -> None:
    """`zarrsql.spark.register(spark)` (contract: scale-out)."""
    try:
        spark = importlib.import_module("zarrsql.spark")
    except ModuleNotFoundError as err:
        assert err.name == "zarrsql.spark"
        return
    assert callable(spark.register)
