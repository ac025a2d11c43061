"""Flow search in the store: index rows, and a parsed query compiled to one SQL statement.

This is the one SQL core both dialects share; :class:`SearchDialect` holds their few
differences (the parameter mark, a case-insensitive LIKE, a regular expression on an
execution ID). Values always travel as parameters, never inside the SQL text.

A predicate on an indexed field becomes ``EXISTS`` over ``search_values`` (served by the
``(key, value, run_id)`` indexes); system fields are columns of ``flows`` (or, for
``ActiveStepTypes``, of ``executions``). An ``ORDER BY`` on an indexed field joins that
field's row; a top-level range on the same field moves into the join, so PostgreSQL walks
the field's index in order and stops at the page size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dex_server.engine.query import And, Compare, Expr, FieldType, Not, Or, OrderItem, Query
from dex_server.engine.search import IndexRow
from dex_server.store._records import FlowRecord, flow_decoder, record_encoder

__all__ = ["SearchDialect", "SearchRepo", "SearchRow"]


class _Conn(Protocol):
    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...
    def cursor(self) -> Any: ...


@dataclass(frozen=True)
class SearchDialect:
    """What differs between SQLite and PostgreSQL in search SQL."""

    mark: str  # parameter placeholder
    ilike: str  # case-insensitive LIKE operator
    step_type_match: str  # "{col} <op> ?" matching an execution ID of one Step type

    def step_pattern(self, step_type: str) -> str:
        """The pattern for :attr:`step_type_match` of execution IDs ``<step_type>-<n>``."""
        if self.mark == "?":  # SQLite GLOB: bracket the wildcard characters
            return re.sub(r"([*?\[])", r"[\1]", step_type) + "-[0-9]*"
        return "^" + re.escape(step_type) + "-[0-9]+$"


SQLITE = SearchDialect(mark="?", ilike="LIKE", step_type_match="{col} GLOB ?")
POSTGRES = SearchDialect(mark="%s", ilike="ILIKE", step_type_match="{col} ~ ?")


@dataclass(frozen=True)
class SearchRow:
    """One stored index row of a run, as :meth:`SearchRepo.of_runs` returns it."""

    run_id: str
    key: str
    type: str
    row: IndexRow


_SYSTEM_COLUMNS = {
    "FlowId": "f.flow_id",
    "RunId": "f.run_id",
    "FlowType": "f.flow_type",
    "ExecutionStatus": "f.status",
    "StartTime": "f.started_at",
    "CloseTime": "f.closed_at",
}
_VALUE_COLUMN = {
    FieldType.KEYWORD: "kw",
    FieldType.KEYWORD_ARRAY: "kw",
    FieldType.TEXT: "txt",
    FieldType.INT: "i",
    FieldType.BOOL: "i",
    FieldType.DOUBLE: "num",
    FieldType.DATETIME: "num",
}
_SQL_OPS = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_LIKE_ESCAPE = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})


def _param(v: str | int | float | bool) -> object:
    return int(v) if isinstance(v, bool) else v


class _Compiler:
    def __init__(self, dialect: SearchDialect) -> None:
        self.d = dialect
        self.args: list[object] = []

    def arg(self, v: object) -> str:
        self.args.append(v)
        return "?"

    def expr(self, e: Expr) -> str:
        if isinstance(e, And):
            return "(" + " AND ".join(self.expr(p) for p in e.parts) + ")"
        if isinstance(e, Or):
            return "(" + " OR ".join(self.expr(p) for p in e.parts) + ")"
        if isinstance(e, Not):
            return "NOT " + self.expr(e.part)
        return self.compare(e)

    def value_test(self, col: str, c: Compare) -> str:
        """``col`` tested against ``c`` (an equality, a range, a list, a prefix)."""
        op, vs = c.op, c.values
        if c.type is FieldType.TEXT:
            pattern = "%" + str(vs[0]).translate(_LIKE_ESCAPE) + "%"
            return f"{col} {self.d.ilike} {self.arg(pattern)} ESCAPE '\\'"
        if op in _SQL_OPS:
            return f"{col} {_SQL_OPS[op]} {self.arg(_param(vs[0]))}"
        if op in ("in", "not_in"):
            marks = ",".join(self.arg(_param(v)) for v in vs)
            return f"{col} IN ({marks})"
        if op in ("between", "not_between"):
            lo, hi = self.arg(_param(vs[0])), self.arg(_param(vs[1]))
            return f"{col} BETWEEN {lo} AND {hi}"
        assert op == "starts_with"
        prefix = str(vs[0])
        # a half-open range keeps the (key, kw) index usable; U+10FFFF sorts after any text
        return f"{col} >= {self.arg(prefix)} AND {col} < {self.arg(prefix + chr(0x10FFFF))}"

    def compare(self, c: Compare) -> str:
        negate = c.op in ("not_in", "not_between") or (
            c.op == "!=" and c.type in (FieldType.KEYWORD_ARRAY, FieldType.TEXT)
        )
        positive = Compare(c.field, c.type, c.system, _positive(c.op) if negate else c.op, c.values)
        if c.field in _SYSTEM_COLUMNS:
            col = _SYSTEM_COLUMNS[c.field]
            if c.op == "is_null":
                return f"{col} IS NULL"
            if c.op == "is_not_null":
                return f"{col} IS NOT NULL"
            test = self.value_test(col, positive)
            return f"NOT ({test})" if negate else f"({test})"
        if c.field == "ActiveStepTypes":
            return self.active_steps(c, negate)
        exists = (
            "EXISTS (SELECT 1 FROM search_values s WHERE s.run_id = f.run_id"
            f" AND s.key = {self.arg(c.field)}"
        )
        if c.op == "is_null":
            return "NOT " + exists + ")"
        if c.op == "is_not_null":
            return exists + ")"
        test = exists + " AND " + self.value_test("s." + _VALUE_COLUMN[c.type], positive) + ")"
        return f"NOT {test}" if negate else test

    def active_steps(self, c: Compare, negate: bool) -> str:
        if c.op in ("is_null", "is_not_null"):
            exists = "EXISTS (SELECT 1 FROM executions x WHERE x.run_id = f.run_id)"
            return ("NOT " if c.op == "is_null" else "") + exists
        match = self.d.step_type_match.format(col="x.execution_id")
        tests = []
        for v in c.values:
            self.args.append(self.d.step_pattern(str(v)))
            tests.append(match)
        test = (
            "EXISTS (SELECT 1 FROM executions x WHERE x.run_id = f.run_id AND ("
            + " OR ".join(tests)
            + "))"
        )
        return f"NOT {test}" if negate else test


def _positive(op: str) -> str:
    return {"not_in": "in", "not_between": "between", "!=": "="}[op]


@dataclass(frozen=True)
class _Page:
    sql: str
    args: list[object]


def compile_search(
    dialect: SearchDialect,
    q: Query,
    *,
    include_continued_as_new: bool,
    limit: int,
    offset: int,
) -> _Page:
    """One SELECT of ``flows.data`` for the page ``[offset, offset + limit)`` of ``q``."""
    joins: list[str] = []
    order: list[str] = []
    where_parts: list[Expr] = list(
        q.where.parts if isinstance(q.where, And) else ([q.where] if q.where else [])
    )
    comp = _Compiler(dialect)
    join_args: list[object] = []
    for n, item in enumerate(q.order):
        col = _order_column(item, n)
        if item.field not in _SYSTEM_COLUMNS:
            alias = f"o{n}"
            # a top-level range on the ordered field filters the joined row itself
            # scalar values have one row (ord 0): no ord test, so the index alone serves
            on = f"{alias}.run_id = f.run_id AND {alias}.key = ?"
            join_args.append(item.field)
            kind = "LEFT JOIN"
            for p in list(where_parts):
                if _fits_join(p, item):
                    assert isinstance(p, Compare)
                    sub = _Compiler(dialect)
                    on += " AND " + sub.value_test(col, p)
                    join_args.extend(sub.args)
                    where_parts.remove(p)
                    kind = "JOIN"
            joins.append(f"{kind} search_values {alias} ON {on}")
            if kind == "JOIN" and len(q.order) == 1:
                # every row has a value: the index order (value, run_id) is the page order
                direction = "DESC" if item.descending else "ASC"
                order += [f"{col} {direction}", f"{alias}.run_id {direction}"]
                continue
        direction = "DESC" if item.descending else "ASC"
        order.append(f"{col} {direction} NULLS LAST")
    if not order or not order[-1].endswith(".run_id ASC") and not order[-1].endswith("run_id DESC"):
        order.append("f.run_id DESC")
    conds = [comp.expr(p) for p in where_parts]
    if not include_continued_as_new:
        conds.append("f.status <> 'continued_as_new'")
    sql = "SELECT f.data FROM flows f " + " ".join(joins)
    if conds:
        sql += " WHERE " + " AND ".join(conds)
    sql += " ORDER BY " + ", ".join(order) + " LIMIT ? OFFSET ?"
    args = [*join_args, *comp.args, limit, offset]
    if dialect.mark != "?":
        sql = sql.replace("?", dialect.mark)
    return _Page(sql, args)


def _order_column(item: OrderItem, n: int) -> str:
    if item.field in _SYSTEM_COLUMNS:
        return _SYSTEM_COLUMNS[item.field]
    return f"o{n}.{_VALUE_COLUMN[item.type]}"


def _fits_join(p: Expr, item: OrderItem) -> bool:
    return (
        isinstance(p, Compare)
        and p.field == item.field
        and not p.system
        and p.op in ("=", "<", "<=", ">", ">=", "in", "between", "starts_with")
    )


class SearchRepo:
    """The search rows of runs and the search query itself, on one connection."""

    def __init__(self, conn: _Conn, dialect: SearchDialect) -> None:
        self.c = conn
        self.d = dialect

    def _sql(self, sql: str) -> str:
        return sql if self.d.mark == "?" else sql.replace("?", self.d.mark)

    def put(self, run_id: str, key: str, type_: str, rows: Sequence[IndexRow]) -> None:
        """Replace the rows of one run's index key (no rows: the value is gone)."""
        self.c.execute(
            self._sql("DELETE FROM search_values WHERE run_id=? AND key=?"), (run_id, key)
        )
        for r in rows:
            self.c.execute(
                self._sql(
                    "INSERT INTO search_values (run_id, key, ord, type, kw, txt, i, num)"
                    " VALUES (?,?,?,?,?,?,?,?)"
                ),
                (run_id, key, r.ord, type_, r.kw, r.txt, r.i, r.num),
            )

    def _bulk(self, table: str, columns: str, values: list[tuple[object, ...]]) -> None:
        cur: Any = self.c.cursor()
        if hasattr(cur, "copy"):  # PostgreSQL: COPY is several times faster than INSERTs
            with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for v in values:
                    copy.write_row(v)
            return
        marks = ",".join("?" * (columns.count(",") + 1))
        cur.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", values)

    def put_many(self, rows: Sequence[tuple[str, str, str, IndexRow]]) -> None:
        """Insert rows of runs that have none yet (the bulk path: seeding, benchmarks)."""
        self._bulk(
            "search_values",
            "run_id, key, ord, type, kw, txt, i, num",
            [(run, key, r.ord, t, r.kw, r.txt, r.i, r.num) for run, key, t, r in rows],
        )

    def seed_flows(self, flows: Sequence[FlowRecord]) -> None:
        """Insert runs in bulk, without history or state (benchmarks, imports)."""
        self._bulk(
            "flows",
            "run_id, flow_id, flow_type, status, request_id, retain_until, data, started_at,"
            " closed_at",
            [
                (
                    f.run_id,
                    f.flow_id,
                    f.flow_type,
                    f.status,
                    f.request_id,
                    f.retain_until,
                    record_encoder.encode(f),
                    f.started_at,
                    f.closed_at,
                )
                for f in flows
            ],
        )

    def delete_run(self, run_id: str) -> None:
        """Forget every row of a run."""
        self.c.execute(self._sql("DELETE FROM search_values WHERE run_id=?"), (run_id,))

    def of_runs(self, run_ids: Sequence[str]) -> list[SearchRow]:
        """Every row of the given runs, by run, key and ``ord``."""
        if not run_ids:
            return []
        marks = ",".join("?" * len(run_ids))
        cur = self.c.execute(
            self._sql(
                "SELECT run_id, key, type, ord, kw, txt, i, num FROM search_values"
                f" WHERE run_id IN ({marks}) ORDER BY run_id, key, ord"
            ),
            tuple(run_ids),
        )
        return [
            SearchRow(r[0], r[1], r[2], IndexRow(r[3], kw=r[4], txt=r[5], i=r[6], num=r[7]))
            for r in cur.fetchall()
        ]

    def search(
        self, q: Query, *, include_continued_as_new: bool, limit: int, offset: int
    ) -> list[FlowRecord]:
        """The runs matching ``q``, in its order (then newest first), one page."""
        page = compile_search(
            self.d, q, include_continued_as_new=include_continued_as_new, limit=limit, offset=offset
        )
        rows = self.c.execute(page.sql, page.args).fetchall()
        return [flow_decoder.decode(bytes(r[0])) for r in rows]
