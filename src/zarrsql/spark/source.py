"""The `zarr` Spark data source: a `DataSource` and its `DataSourceReader` over the core.

The driver opens the table (metadata and coordinates only) to give Spark its schema, takes
the filters Spark pushes, plans the scan and groups its work units into partitions. The
reader Spark pickles to the executors holds only the options, the column names and the
predicate; each executor opens the table again, rebuilds its partition's units and streams
them through the core's threaded Arrow reader. Nothing here imports DuckDB.

For `CREATE TABLE ... USING zarr OPTIONS (...)` Spark gives the reader no options, only the
schema; so `schema()` writes the options (every one but secret storage options) into each
field's metadata under `zarrsql.options`, and the reader falls back on them.

Filter pushdown is opt-in (`pushdown` option): `ZarrReader` has no `pushFilters`, so it plans
every work unit and Spark filters the rows; `ZarrPushdownReader` adds `pushFilters`. Spark
(observed with pyspark 4.3.0) keeps the reader it pickled when planning a filtered query and
reuses it for a later query on the same DataFrame without calling `reader()`, `pushFilters`
or `partitions()` again, so the later query silently gets the earlier filter's rows; nothing
in Python can notice, hence the safe default.

Spark keeps a DataFrame's partitions as well: a later query on it (a second `df.count()`,
a sum after a count, a query on a temporary view made from it) reads the partitions planned
the first time, again without asking the source. A partition names its work units by ordinal
on the version of the table it was planned on, so it carries that version (`planned_on`)
and an executor that opens another version refuses with `StoreReadError` rather than read
units of another chunk grid: the rows would be of neither version.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition

from zarrsql.errors import ParameterError, StoreReadError, ZarrSQLError
from zarrsql.plan.predicate import Predicate, conjoin
from zarrsql.scan import Column, TableScan, begin_coordinates, open_table, read_request
from zarrsql.scan.contract import Plan
from zarrsql.scan.entry import select_columns
from zarrsql.spark.filters import Untranslatable, exact, pruning
from zarrsql.spark.options import SparkRead, refuse_repeated, shareable, spark_read
from zarrsql.spark.partitions import PartitionPlan, Runs, group, kept_ordinals, planned_on, unit_bytes
from zarrsql.spark.types import arrow_target, spark_schema, spark_type, to_spark
from zarrsql.store.base import note_changed

OPTIONS_KEY = "zarrsql.options"


class ZarrPartition(InputPartition):
    """A partition: runs of unit ordinals (see `spark/partitions.py`) and the digest of the
    table version they were planned on (`planned_on`); small to pickle."""

    def __init__(self, runs: Runs, planned: str) -> None:
        super().__init__(runs)
        self.runs = runs
        self.planned_on = planned

    def __repr__(self) -> str:
        units = sum(b - a for a, b in self.runs)
        return f"ZarrPartition({units} work units in {len(self.runs)} runs)"


def _open(read: SparkRead) -> TableScan:
    return open_table(read_request(read.args))


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _short(fn: _Fn) -> _Fn:
    """Raise a `ZarrSQLError` with one frame: Spark shows the Python traceback beside the
    message, and zarrsql's own frames say nothing to a Spark user."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ZarrSQLError as err:
            raise err.with_traceback(None) from None

    return run  # type: ignore[return-value]


class ZarrDataSource(DataSource):
    """`spark.read.format("zarr")`: options are `read_zarr`'s parameters (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "zarr"

    @_short
    def schema(self) -> T.StructType:
        read = spark_read(self.options)
        scan = _open(read)
        meta = {OPTIONS_KEY: json.dumps(shareable(dict(self.options)), sort_keys=True)}
        return spark_schema(list(select_columns(scan, read.columns)), meta)

    @_short
    def reader(self, schema: T.StructType) -> ZarrReader:
        """A `ZarrPushdownReader` only under `pushdown=true` (see the module docstring)."""
        options = dict(self.options)
        if "path" not in options and schema.fields and OPTIONS_KEY in schema.fields[0].metadata:
            options = json.loads(schema.fields[0].metadata[OPTIONS_KEY])
        read = spark_read(options)  # refuses a missing path or a bad option before Spark plans
        refuse_repeated(schema.fieldNames(), "schema", "give each column once")
        if read.pushdown:
            return ZarrPushdownReader(options, schema)
        return ZarrReader(options, schema)


class ZarrReader(DataSourceReader):
    """Plans on the driver, reads on the executors; holds only picklable plain values.

    Takes no filters (no `pushFilters`): it plans every work unit and Spark applies the whole
    `WHERE`, so a reader Spark reuses for a later query still returns every row."""

    def __init__(self, options: dict[str, str], schema: T.StructType) -> None:
        self.options = options
        self.schema = schema
        self.names = tuple(schema.fieldNames())
        self.exact: list[Predicate] = []
        self.pruning: list[Predicate] = []
        self._scan: TableScan | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_scan"] = None  # opened again where it is used
        return state

    def _table(self) -> tuple[SparkRead, TableScan, list[Column]]:
        read = spark_read(self.options)
        if self._scan is None:
            self._scan = _open(read)
        return read, self._scan, self._columns(self._scan)

    def _columns(self, scan: TableScan) -> list[Column]:
        refuse_repeated(self.names, "schema", "give each column once")
        columns = list(select_columns(scan, self.names))
        for col, f in zip(columns, self.schema.fields, strict=True):
            if spark_type(col.logical) != f.dataType:
                raise ParameterError(
                    f"schema: column '{col.name}' of table '{scan.table.label}' is "
                    f"{spark_type(col.logical).simpleString()}, not {f.dataType.simpleString()}; "
                    "leave the schema out or give that type"
                )
        return columns

    def predicate(self) -> Predicate | None:
        return conjoin([*self.exact, *self.pruning])

    @_short
    def partitions(self) -> Sequence[InputPartition]:
        read, scan, columns = self._table()
        plan = scan.plan(self.predicate())
        per_partition = read.partition_bytes // max(1, unit_bytes(scan, columns))
        runs = group(kept_ordinals(plan), per_partition)
        planned = planned_on(scan)
        return [ZarrPartition(r, planned) for r in runs] or [ZarrPartition((), planned)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from zarrsql.scan.reader import read_batches

        runs: Runs = getattr(partition, "runs", ())
        if not runs:
            return
        try:
            scan, plan = self._plan_as_planned(getattr(partition, "planned_on", ""))
            columns = self._columns(scan)
            target = arrow_target(self.schema)
            begin_coordinates(scan, columns)
            batches = read_batches(scan, PartitionPlan(plan, runs), columns)  # type: ignore[arg-type]
            for batch in batches:
                yield to_spark(batch, target)
        except ZarrSQLError as err:
            raise err.with_traceback(None) from None

    def _plan_as_planned(self, planned: str) -> tuple[TableScan, Plan]:
        """The table and plan on an executor, when they are the version the partition was
        planned on; its ordinals mean other units of any other version, so that refuses.

        A mismatch is checked once more with the store's metadata read again: this Python
        worker may hold metadata cached before the driver's (`metadata_ttl`)."""
        read = spark_read(self.options)
        for attempt in range(2):
            scan = _open(read)
            plan = scan.plan(self.predicate())
            if planned_on(scan) == planned:
                return scan, plan
            if attempt == 0:
                note_changed(str(getattr(scan.store, "cache_key", scan.store.url)))
        version = getattr(scan.store, "version", None)  # an Icechunk store's branch, tag or snapshot
        where = f"store '{scan.store.url}'" + (f" ({version})" if isinstance(version, str) else "")
        raise StoreReadError(
            f"{where} changed after this Spark query was planned: table "
            f"'{scan.table.label}' is no longer the version its partitions name, and reading them "
            "would mix the two versions. Spark plans a DataFrame's scan once and reuses that plan "
            "in later queries on the DataFrame, so load the DataFrame again "
            "(spark.read.format('zarr')...load(...)), and make any temporary view of it again, to "
            "read the store as it is now"
        )


class ZarrPushdownReader(ZarrReader):
    """`ZarrReader` with filter pushdown (`pushdown=true`): prunes work units by the filters.

    Unsafe when a DataFrame is reused after a filtered query (see the module docstring):
    load a fresh DataFrame per query."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Accept what the scan applies exactly; give back the rest, pruning with it if safe."""
        try:
            _, scan, _ = self._table()
        except ZarrSQLError as err:
            raise err.with_traceback(None) from None
        dims = scan.filterable()
        for f in filters:
            try:
                self.exact.append(exact(f, dims))
                continue
            except Untranslatable:
                pass
            with contextlib.suppress(Untranslatable):
                self.pruning.append(pruning(f, dims))
            yield f
