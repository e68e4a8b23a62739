"""Joins that prune: a zarrsql table joined on its dimensions to a small relation reads only
the work units that can hold a matching key.

DuckDB hands a Python scan no join keys and no dynamic filters, so the connection does it
before the statement runs. It reads the statement's tree (`json_serialize_sql`) and looks
for two shapes:

1. `<zarr table> [INNER] JOIN <other> USING (dims)` or `ON z.dim = o.col AND ...` (also the
   zarr table on the NULL-supplying side of a LEFT or RIGHT join), where the zarr table is
   `read_zarr(...)`, a `'x.zarr'` string or a view that is `SELECT *` of one;
2. `... FROM <zarr table> WHERE (dims) IN (SELECT ...) AND ...` (the IN a top-level conjunct).

The other side (or the subquery) is run first, on its own, for its distinct keys (beyond
`MAX_KEYS` of them, for each dimension's values or range), and the zarr table is replaced by
`(SELECT * FROM <it> WHERE <keys>)`, every key a literal of the other side's own type or of
the dimension's where that compares the same (`join_keys`), so the comparison is the join's
own. Rows that cannot match are the only ones removed, so the result is the same as without
the rewrite; the pushed filter prunes the scan. Anything else (a correlated subquery, keys
on data columns only, an error on the way) leaves the
statement as it was, and so does an other side whose keys, listed alone, may not be the ones
the join compares with (`join_sides`: a name the statement defines as a CTE, a side that may
give other rows when run again, keys under a collation).

The keys are frozen when the statement is rewritten, while a relation fetched again (or a
view made from it) runs the other side anew: each key column of the other side is therefore
wrapped in a guard (`join_keys`) that fails, saying to run the statement again, on a row
whose keys were not listed. A side that cannot be wrapped (itself a join) is not listed.

Both sides may be zarrsql tables (two stores, two tables of one store): each is identified
on its own (`_zarr_scan`). Listing the keys of a side that is itself a whole zarrsql table
reads all of it, so that is done only for a side with fewer rows than the one it prunes (the
counts come from metadata): the larger side is pruned with the smaller one's keys, never the
other way round.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from zarrsql.engine import join_keys, join_sides, parsetree
from zarrsql.engine.answers import _check_from, _NoView, bind, rewritten_or_same
from zarrsql.engine.join_keys import MAX_KEYS as MAX_KEYS  # re-exported: the limits are joins'
from zarrsql.engine.join_keys import MAX_TUPLE_KEYS as MAX_TUPLE_KEYS
from zarrsql.engine.parsetree import Decline
from zarrsql.engine.sqltext import claimable, quote_ident
from zarrsql.scan import open_table
from zarrsql.store import using_opener

if TYPE_CHECKING:
    from zarrsql.engine.connection import Connection
    from zarrsql.scan import TableScan

_QUICK = re.compile(r"\bjoin\b|\bin\s*\(\s*select\b", re.IGNORECASE)


def rewrite(conn: Connection, query: Any, has_args: bool) -> Any:
    """`query` with its prunable joins' zarr sides filtered on the other side's keys."""
    return rewritten_or_same(conn, query, has_args, _QUICK, _rewrite, "join not pruned")


def _rewrite(conn: Connection, query: str) -> str:
    doc = parsetree.serialize(conn._con, query)
    if not conn._state.refuse_function:
        raise Decline("no failing function installed for the guard")
    ctes = join_sides.check_statement(conn, doc)
    _check_wrappable(doc)
    changed = False
    for node in list(_select_nodes(doc["statements"][0]["node"])):
        changed |= _prune_joins(conn, node, ctes)
        changed |= _prune_in(conn, node, ctes)
    return parsetree.deserialize(conn._con, doc) if changed else query


def _check_wrappable(tree: Any) -> None:
    """Decline a statement naming a column the guard's `SELECT *` would hide: `rowid`, or a
    column qualified with its schema (`main.st.lat`: the guard's subquery has only an alias)."""
    if isinstance(tree, list):
        for value in tree:
            _check_wrappable(value)
    elif isinstance(tree, dict):
        if tree.get("class") == "COLUMN_REF":
            names = tree.get("column_names") or []
            if len(names) > 2 or (names and str(names[-1]).lower() == "rowid"):
                raise Decline("a column the guard's subquery would hide")
        for value in tree.values():
            _check_wrappable(value)


def _select_nodes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every SELECT node of the statement, outer first (subqueries, CTEs, set operations)."""
    if isinstance(tree, dict):
        if tree.get("type") == "SELECT_NODE":
            yield tree
        for value in tree.values():
            yield from _select_nodes(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _select_nodes(value)


def _is_zarr(conn: Connection, table: dict[str, Any]) -> bool:
    try:
        _check_from(conn._con, table)
    except _NoView:
        plain = table.get("type") == "BASE_TABLE" and not table.get("schema_name") and not table.get("catalog_name")
        return plain and claimable(str(table.get("table_name")))
    except Decline:
        return False
    return True


def _joins(table: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if table.get("type") == "JOIN":
        yield table
        yield from _joins(table["left"])
        yield from _joins(table["right"])


#: The sides of a join that may be filtered on the other side's keys, by join type.
_PRUNABLE = {"INNER": ("left", "right"), "SEMI": ("left",), "LEFT": ("right",), "RIGHT": ("left",)}


def _prune_joins(conn: Connection, node: dict[str, Any], ctes: frozenset[str]) -> bool:
    """Prune one side of each join with the other's keys, that other side guarded. One side at
    most: both sides are zarrsql tables when both could be, and then only the larger is."""
    changed = False
    for join in list(_joins(node.get("from_table") or {})):
        if join.get("ref_type") not in (None, "REGULAR"):
            continue
        for side in _PRUNABLE.get(join.get("join_type", ""), ()):
            other = "right" if side == "left" else "left"
            zarr, rest = join[side], join[other]
            if zarr.get("type") == "JOIN" or not _is_zarr(conn, zarr) or zarr.get("column_name_alias"):
                continue
            pairs = _key_pairs(join, parsetree.alias(zarr), parsetree.alias(rest))
            if not pairs or rest.get("type") == "JOIN":  # a join cannot be wrapped in the guard
                continue
            try:
                join_sides.check_zarr_side(zarr, ctes)
                join_sides.check_side(conn, rest, ctes)
                scan = _zarr_scan(conn, zarr)
                if _listing_costs_more(conn, scan, rest):
                    continue
                others = _spelled(conn, rest, [o for _, o in pairs])
                keys = join_keys.list_keys(
                    conn, scan, [z for z, _ in pairs], _select(conn, rest, others), [quote_ident(o) for o in others]
                )
                guarded = join_keys.guarded_side(conn, rest, keys)
            except Decline:  # this side stays as written; the other may still be pruned
                continue
            join[side] = _filtered(conn, zarr, keys.where)
            join[other] = guarded
            changed = True
            break
    return changed


def _listing_costs_more(conn: Connection, scan: TableScan, keys_from: dict[str, Any] | None) -> bool:
    """Whether the keys would come from a whole zarrsql table (`keys_from`, a join's other side
    or a key subquery's FROM) with at least as many rows as `scan`, the table they would prune:
    listing them reads all of that table, more than pruning `scan` can save, and the statement
    then reads it again. Row counts come from metadata; a side that is no whole zarrsql table
    (a DuckDB table, a subquery) is listed as before."""
    if keys_from is None or keys_from.get("type") == "JOIN" or not _is_zarr(conn, keys_from):
        return False
    return _rows(_zarr_scan(conn, keys_from)) >= _rows(scan)


def _rows(scan: TableScan) -> int:
    """The table's rows, or its cells when the count is not known without reading (an upper
    bound: a sparse matrix stores at most one entry per cell)."""
    known = scan.num_rows
    return int(known) if known is not None else math.prod(scan.table.shape)


def _key_pairs(join: dict[str, Any], zarr: str, other: str) -> list[tuple[str, str]]:
    """(zarr column, other column) of the join's equalities between its two sides."""
    using = join.get("using_columns") or []
    if using:
        return [(c, c) for c in using]
    out = []
    for cond in parsetree.conjuncts(join.get("condition")):
        if cond.get("class") != "COMPARISON" or cond.get("type") != "COMPARE_EQUAL":
            continue
        a, b = cond["left"], cond["right"]
        if a.get("class") != "COLUMN_REF" or b.get("class") != "COLUMN_REF":
            continue
        (qa, ca), (qb, cb) = _qualified(a), _qualified(b)
        if qa == zarr and qb == other and zarr != other:
            out.append((ca, cb))
        elif qb == zarr and qa == other and zarr != other:
            out.append((cb, ca))
    return out


def _qualified(ref: dict[str, Any]) -> tuple[str, str]:
    names = ref["column_names"]
    return (names[0].lower(), names[1]) if len(names) == 2 else ("", names[-1])


def _template(conn: Connection, sql: str, *, keep: bool = True) -> dict[str, Any]:
    return parsetree.serialize(conn._con, sql, keep=keep)


def _spelled(conn: Connection, table: dict[str, Any], columns: list[str]) -> list[str]:
    """`columns` of `table` as the table spells them (the guard replaces them by these names,
    and the statement's result keeps their case), declined when one is not a single column."""
    doc = _template(conn, "SELECT * FROM t")
    doc["statements"][0]["node"]["from_table"] = copy.deepcopy(table)
    names: dict[str, list[str]] = {}
    for name in join_keys.column_names(conn, parsetree.deserialize(conn._con, doc)):
        names.setdefault(name.lower(), []).append(name)
    spelled = [names.get(c.lower(), []) for c in columns]
    if any(len(found) != 1 for found in spelled):
        raise Decline("a key column the other side does not have exactly once")
    return [found[0] for found in spelled]


def _select(conn: Connection, table: dict[str, Any], columns: list[str]) -> str:
    """`SELECT DISTINCT <columns> FROM <table>` as SQL text, the table's tree reused."""
    doc = _template(conn, "SELECT DISTINCT " + ", ".join(f"__zarrsql_k{i}" for i in range(len(columns))) + " FROM t")
    node = doc["statements"][0]["node"]
    node["from_table"] = copy.deepcopy(table)
    for item, name in zip(node["select_list"], columns, strict=True):
        item["column_names"] = [name]
    return parsetree.deserialize(conn._con, doc)


def _dimension_columns(conn: Connection, zarr: dict[str, Any]) -> dict[str, str]:
    """The columns of the zarr table a pushed predicate may name (its dimensions), with
    their logical types."""
    return dict(_zarr_scan(conn, zarr).filterable())


def _zarr_scan(conn: Connection, zarr: dict[str, Any]) -> TableScan:
    """The table the zarr table `zarr` reads, found by binding `SELECT * FROM <zarr>` alone.

    The scan UDF answers a call it already answered in this statement's generation from its
    memo, without recording it again, so the statement's other zarrsql reads bound before
    (the other side of a join, a key subquery, an earlier probe) are hidden from it while the
    probe binds: the one call recorded is then this side's own. Their tables are offered to
    the UDF as opened for this statement (`fresh`), so a hidden read is not opened again, and
    everything is put back as it was after (the statement binds what its probes bound)."""
    doc = _template(conn, "SELECT * FROM t")
    doc["statements"][0]["node"]["from_table"] = copy.deepcopy(zarr)
    probe = "DESCRIBE " + parsetree.deserialize(conn._con, doc)
    state = conn._state
    now = state.generation
    with state.lock:
        hidden = {args: made for args, made in state.scan_keys.items() if made[0] == now}
        opened = dict(state.opened)
        offered = {repr(opened[args].request): opened[args] for args in hidden if args in opened}
        offered = {request: scan for request, scan in offered.items() if request not in state.fresh}
        for args in hidden:
            del state.scan_keys[args]
        state.fresh.update(offered)
    try:
        bind(conn, probe, part=True).fetchall()  # a store that fails to open: the statement's error
        asked = [args for args, (gen, _) in list(state.scan_keys.items()) if gen == now]
    finally:
        with state.lock:
            state.scan_keys.update(hidden)
            state.opened.update(opened)
            for request in offered:
                state.fresh.pop(request, None)
    if len(asked) != 1:
        raise Decline("not exactly one zarrsql scan on the zarr side")
    scan = state.opened.get(asked[0])  # the table the UDF opened for this statement
    if scan is None:
        from zarrsql.engine import params

        with using_opener(state.opener):
            scan = open_table(params.read_request(params.parse_args(asked[0])))
    return scan


def _filtered(conn: Connection, zarr: dict[str, Any], where: str) -> dict[str, Any]:
    """A subquery node `(SELECT * FROM <zarr> WHERE <where>) AS <alias>` in place of `zarr`."""
    alias = zarr.get("alias") or (zarr.get("table_name") if zarr.get("type") == "BASE_TABLE" else "") or "z"
    doc = _template(conn, f"SELECT * FROM (SELECT * FROM t WHERE {where}) AS {quote_ident(alias)}", keep=False)
    sub = doc["statements"][0]["node"]["from_table"]
    inner = copy.deepcopy(zarr)
    inner["alias"] = ""
    sub["subquery"]["node"]["from_table"] = inner
    return sub  # type: ignore[no-any-return]


def _prune_in(conn: Connection, node: dict[str, Any], ctes: frozenset[str]) -> bool:
    """`FROM <zarr> WHERE (dims) IN (SELECT ...)`: the subquery's keys pushed beside it, the
    subquery guarded."""
    table = node.get("from_table") or {}
    where = node.get("where_clause")
    if where is None or table.get("type") == "JOIN" or not _is_zarr(conn, table):
        return False
    try:
        join_sides.check_zarr_side(table, ctes)
    except Decline:
        return False
    scan: TableScan | None = None  # found at the first key subquery
    added = []
    alias = parsetree.alias(table)
    for cond in parsetree.conjuncts(where):
        if cond.get("class") != "SUBQUERY" or cond.get("subquery_type") != "ANY":
            continue
        if cond.get("comparison_type", "COMPARE_EQUAL") != "COMPARE_EQUAL":
            continue
        child = cond.get("child") or {}
        refs = [child] if child.get("class") == "COLUMN_REF" else _row_refs(child)
        if not refs or any(_qualified(r)[0] not in ("", alias) for r in refs):
            continue
        columns = [_qualified(r)[1] for r in refs]
        subquery = cond["subquery"]["node"]
        doc = {"statements": [{"node": copy.deepcopy(subquery), "named_param_map": []}]}
        sql = parsetree.deserialize(conn._con, {**_template(conn, "SELECT 1"), **doc})
        names = join_keys.column_names(conn, sql)
        if len(names) != len(columns):
            continue
        keys = "SELECT DISTINCT " + ", ".join(
            f"s.{quote_ident(n)} AS {quote_ident(f'__zarrsql_k{i}')}" for i, n in enumerate(names)
        )
        try:
            join_sides.check_side(conn, subquery, ctes)
            if scan is None:
                scan = _zarr_scan(conn, table)
            if _listing_costs_more(conn, scan, _whole_table_read(subquery)):
                continue
            renamed = [f"__zarrsql_k{i}" for i in range(len(names))]
            found = join_keys.list_keys(
                conn, scan, columns, f"{keys} FROM ({sql}) AS s", [quote_ident(n) for n in renamed]
            )
        except Decline:
            continue
        cond["subquery"]["node"] = join_keys.guarded_query(conn, subquery, renamed, found)
        added.append(found.where)
    if not added:
        return False
    both = _template(conn, "SELECT * FROM t WHERE true AND (" + " AND ".join(f"({a})" for a in added) + ")", keep=False)
    clause = both["statements"][0]["node"]["where_clause"]
    clause["children"][0] = where  # `<the statement's WHERE> AND <the pushed keys>`
    node["where_clause"] = clause
    return True


def _whole_table_read(node: dict[str, Any]) -> dict[str, Any] | None:
    """The FROM of a key subquery that reads all of it (no WHERE, no LIMIT), else None."""
    if node.get("type") != "SELECT_NODE" or node.get("where_clause") is not None:
        return None
    if any(str(m.get("type", "")).startswith("LIMIT") for m in node.get("modifiers") or []):
        return None
    return node.get("from_table")  # type: ignore[no-any-return]


def _row_refs(expr: dict[str, Any]) -> list[dict[str, Any]]:
    if expr.get("class") != "FUNCTION" or str(expr.get("function_name", "")).lower() != "row":
        return []
    args = [a.get("expression", a) for a in expr.get("arguments", expr.get("children")) or []]
    return args if all(a.get("class") == "COLUMN_REF" for a in args) else []
