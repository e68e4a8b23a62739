"""The `zarrsql` command line: tables, metadata, query and demo."""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from collections.abc import Sequence

from zarrsql.errors import ZarrSQLError


def _database_name(store: str) -> str:
    stem = os.path.basename(store.rstrip("/")) or "store"
    stem = re.sub(r"\.zarr$", "", stem, flags=re.IGNORECASE)
    name = re.sub(r"\W", "_", stem) or "store"
    return name if not name[0].isdigit() else f"s_{name}"


def _print(rel: object, fmt: str, output: str | None) -> None:
    import duckdb

    assert isinstance(rel, duckdb.DuckDBPyRelation)
    if fmt == "parquet":
        if not output:
            raise ZarrSQLError("--format parquet needs --output FILE")
        rel.write_parquet(output)
        return
    stream = open(output, "w", newline="") if output else sys.stdout  # noqa: SIM115
    try:
        if fmt == "table":
            rel.show(max_width=10_000, max_rows=10_000) if not output else stream.write(str(rel))
        elif fmt == "csv":
            writer = csv.writer(stream)
            writer.writerow(rel.columns)
            writer.writerows(rel.fetchall())
        else:
            for row in rel.fetchall():
                stream.write(json.dumps(dict(zip(rel.columns, row, strict=True)), default=str) + "\n")
    finally:
        if output:
            stream.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zarrsql", description="SQL over Zarr stores, with DuckDB.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in [("tables", "list the tables of a store"), ("metadata", "list the arrays of a store")]:
        s = sub.add_parser(name, help=text)
        s.add_argument("store")
        s.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q = sub.add_parser("query", help="run SQL with the store's tables mounted (root tables unqualified)")
    q.add_argument("store")
    q.add_argument("sql")
    q.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    q.add_argument("--output", help="write to this file instead of the terminal")
    d = sub.add_parser("demo", help="write a small example store and run example queries on it")
    d.add_argument("--path", default=None, help="where to write the store (default ./zarrsql-demo.zarr)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (1 with the message on a zarrsql error)."""
    args = _parser().parse_args(argv)
    import duckdb

    import zarrsql

    try:
        if args.command == "demo":
            from zarrsql import demo

            demo.run(args.path)
            return 0
        with zarrsql.connect() as con:
            if args.command in ("tables", "metadata"):
                fn = "read_zarr_tables" if args.command == "tables" else "read_zarr_metadata"
                _print(getattr(zarrsql, fn)(args.store, connection=con), args.format, None)
                return 0
            db = _database_name(args.store)
            zarrsql.mount(con, args.store, db)
            con.execute(f'USE "{db}"')
            _print(con.sql(args.sql), args.format, args.output)
            return 0
    except (ZarrSQLError, duckdb.Error) as err:  # the edge: report, do not trace back
        print(f"zarrsql: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
