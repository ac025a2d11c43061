"""The Flow search query language: tokenizer, recursive-descent parser and type check.

A query is a visibility-style filter over indexed Attributes and system fields, with an
optional ``ORDER BY``::

    OrderStatus = 'completed' AND (Amount > 100 OR Priority IN (1, 2))
    NOT Tags = 'vip' AND Name STARTS_WITH 'acme' ORDER BY Amount DESC, StartTime

Grammar (keywords are case-insensitive, field names are not)::

    query     := [expr] [ORDER BY item ("," item)*]
    expr      := term (OR term)*
    term      := factor (AND factor)*
    factor    := NOT factor | "(" expr ")" | predicate
    predicate := field op value | field [NOT] IN "(" value ("," value)* ")"
               | field [NOT] BETWEEN value AND value | field STARTS_WITH string
               | field IS [NOT] NULL
    op        := "=" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    value     := 'string' | "string" | number | TRUE | FALSE
    field     := name | `quoted name`
    item      := field [ASC | DESC]

:func:`parse_query` returns a typed AST (:class:`Query`) checked against the index
types a server knows; every error is a :class:`QueryError` naming the offending token
and its position (0-based character offset). Nothing here touches a store: the store's
search module compiles the AST to parameterised SQL.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "MAX_IN_VALUES",
    "MAX_PREDICATES",
    "MAX_QUERY_BYTES",
    "SYSTEM_FIELDS",
    "And",
    "Compare",
    "Expr",
    "FieldType",
    "Not",
    "Or",
    "OrderItem",
    "Query",
    "QueryError",
    "listing_conditions",
    "parse_query",
    "quoted",
    "with_conditions",
]

MAX_QUERY_BYTES = 8192
"""Longest query text accepted (UTF-8 bytes)."""
MAX_PREDICATES = 64
"""Most predicates one query may hold."""
MAX_IN_VALUES = 256
"""Most values one ``IN`` list may hold."""
MAX_KEYWORD_BYTES = 1024
"""Longest KEYWORD value that is indexed (longer ones are stored unsearchable)."""


class FieldType(enum.Enum):
    """The type of a searchable field; the index types plus the system fields' types."""

    KEYWORD = "keyword"
    TEXT = "full_text"
    KEYWORD_ARRAY = "keyword_array"
    INT = "int"
    DOUBLE = "double"
    BOOL = "bool"
    DATETIME = "datetime"


SYSTEM_FIELDS: Mapping[str, FieldType] = {
    "FlowId": FieldType.KEYWORD,
    "RunId": FieldType.KEYWORD,
    "FlowType": FieldType.KEYWORD,
    "ExecutionStatus": FieldType.KEYWORD,
    "StartTime": FieldType.DATETIME,
    "CloseTime": FieldType.DATETIME,
    "DexParentFlowID": FieldType.KEYWORD,
    "ActiveStepTypes": FieldType.KEYWORD_ARRAY,
}
"""Fields every Flow has; an index key may not reuse these names."""

_STATUSES = frozenset(
    {"running", "completed", "failed", "canceled", "terminated", "continued_as_new"}
)


class QueryError(ValueError):
    """A query that does not parse or does not type-check (``BAD_REQUEST`` at the edge).

    Attributes:
        position: 0-based character offset of the offending token in the query.
        token: the offending token's text (``""`` at the end of the query).

    """

    def __init__(self, message: str, position: int, token: str) -> None:
        where = f"at position {position}" + (f" near {token!r}" if token else " (end of query)")
        super().__init__(f"search query: {message} {where}")
        self.position = position
        self.token = token


# ------------------------------------------------------------------------------------ AST


@dataclass(frozen=True)
class Compare:
    """One predicate: ``field op values``.

    ``op`` is one of ``= != < <= > >= in not_in between not_between starts_with
    is_null is_not_null``; ``values`` holds typed operands (str, int, float, bool, or an
    epoch-seconds float for DATETIME), two for BETWEEN, none for the NULL checks.
    """

    field: str
    type: FieldType
    system: bool
    op: str
    values: tuple[str | int | float | bool, ...]


@dataclass(frozen=True)
class And:
    """All of ``parts`` hold."""

    parts: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    """Any of ``parts`` holds."""

    parts: tuple[Expr, ...]


@dataclass(frozen=True)
class Not:
    """``part`` does not hold."""

    part: Expr


Expr = Compare | And | Or | Not


@dataclass(frozen=True)
class OrderItem:
    """One ``ORDER BY`` key."""

    field: str
    type: FieldType
    system: bool
    descending: bool


@dataclass(frozen=True)
class Query:
    """A parsed, type-checked query: a filter (None: every Flow) and its ordering."""

    where: Expr | None
    order: tuple[OrderItem, ...]


# ------------------------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class _Tok:
    kind: str  # name, qname, string, number, op, punct, end
    text: str
    pos: int
    value: str = ""


_KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IN", "BETWEEN", "STARTS_WITH", "IS", "NULL", "ORDER", "BY"}
    | {"ASC", "DESC", "TRUE", "FALSE"}
)
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_OPS = ("<=", ">=", "!=", "<>", "=", "<", ">")


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "'\"`":
            start, i, buf = i, i + 1, []
            while True:
                if i >= n:
                    raise QueryError("unterminated quoted text", start, text[start : start + 20])
                if text[i] == ch:
                    if i + 1 < n and text[i + 1] == ch:  # a doubled quote is one quote
                        buf.append(ch)
                        i += 2
                        continue
                    i += 1
                    break
                if text[i] == "\\" and i + 1 < n and text[i + 1] in "'\"`\\":
                    buf.append(text[i + 1])
                    i += 2
                    continue
                buf.append(text[i])
                i += 1
            kind = "qname" if ch == "`" else "string"
            toks.append(_Tok(kind, text[start:i], start, "".join(buf)))
        elif ch in "(),":
            toks.append(_Tok("punct", ch, i))
            i += 1
        elif (m := _NUMBER.match(text, i)) and (ch != "-" or _number_may_start(toks)):
            toks.append(_Tok("number", m.group(), i, m.group()))
            i = m.end()
        elif (m := _NAME.match(text, i)) is not None:
            toks.append(_Tok("name", m.group(), i, m.group()))
            i = m.end()
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise QueryError("unexpected character", i, ch)
            toks.append(_Tok("op", op, i))
            i += len(op)
    toks.append(_Tok("end", "", n))
    return toks


def _number_may_start(toks: list[_Tok]) -> bool:
    # "-5" after an operator, "(" or "," is a number; elsewhere "-" cannot appear
    return not toks or toks[-1].kind in ("op", "punct") or _is_kw(toks[-1], "AND", "BETWEEN")


def _is_kw(tok: _Tok, *words: str) -> bool:
    return tok.kind == "name" and tok.text.upper() in words


# ---------------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str, fields: Mapping[str, FieldType]) -> None:
        self.toks = _tokenize(text)
        self.i = 0
        self.fields = fields
        self.predicates = 0

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def fail(self, message: str, tok: _Tok | None = None) -> QueryError:
        t = tok or self.tok
        return QueryError(message, t.pos, t.text)

    def take_kw(self, *words: str) -> bool:
        if _is_kw(self.tok, *words):
            self.i += 1
            return True
        return False

    def expect_punct(self, ch: str) -> None:
        if self.tok.kind != "punct" or self.tok.text != ch:
            raise self.fail(f"expected {ch!r}")
        self.i += 1

    def query(self) -> Query:
        where: Expr | None = None
        if self.tok.kind != "end" and not _is_kw(self.tok, "ORDER"):
            where = self.expr()
        order: list[OrderItem] = []
        if self.take_kw("ORDER"):
            if not self.take_kw("BY"):
                raise self.fail("expected BY after ORDER")
            while True:
                order.append(self.order_item())
                if self.tok.kind == "punct" and self.tok.text == ",":
                    self.i += 1
                    continue
                break
        if self.tok.kind != "end":
            raise self.fail("expected AND, OR, ORDER BY or the end of the query")
        return Query(where, tuple(order))

    def expr(self) -> Expr:
        parts = [self.term()]
        while self.take_kw("OR"):
            parts.append(self.term())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def term(self) -> Expr:
        parts = [self.factor()]
        while self.take_kw("AND"):
            parts.append(self.factor())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def factor(self) -> Expr:
        if self.take_kw("NOT"):
            return Not(self.factor())
        if self.tok.kind == "punct" and self.tok.text == "(":
            self.i += 1
            inner = self.expr()
            self.expect_punct(")")
            return inner
        return self.predicate()

    def field(self) -> tuple[_Tok, FieldType, bool]:
        tok = self.tok
        if tok.kind == "qname" or (tok.kind == "name" and tok.text.upper() not in _KEYWORDS):
            name = tok.value
        else:
            raise self.fail("expected a field name")
        self.i += 1
        if name in SYSTEM_FIELDS:
            return tok, SYSTEM_FIELDS[name], True
        ftype = self.fields.get(name)
        if ftype is None:
            raise self.fail(
                f"unknown field {name!r} (not a system field or a registered index)", tok
            )
        return tok, ftype, False

    def predicate(self) -> Compare:
        self.predicates += 1
        if self.predicates > MAX_PREDICATES:
            raise self.fail(f"more than {MAX_PREDICATES} predicates (limit max_predicates)")
        ftok, ftype, system = self.field()
        name = ftok.value
        op_tok = self.tok
        negated = False
        if _is_kw(op_tok, "NOT"):
            self.i += 1
            negated = True
            if not _is_kw(self.tok, "IN", "BETWEEN"):
                raise self.fail("expected IN or BETWEEN after NOT")
        if self.take_kw("IN"):
            self.expect_punct("(")
            values = [self.value(ftype, name, "in")]
            while self.tok.kind == "punct" and self.tok.text == ",":
                self.i += 1
                if len(values) >= MAX_IN_VALUES:
                    raise self.fail(f"more than {MAX_IN_VALUES} IN values (limit max_in_values)")
                values.append(self.value(ftype, name, "in"))
            self.expect_punct(")")
            op = "not_in" if negated else "in"
            self.allowed(ftype, op, op_tok, name)
            return Compare(name, ftype, system, op, tuple(values))
        if self.take_kw("BETWEEN"):
            op = "not_between" if negated else "between"
            self.allowed(ftype, op, op_tok, name)
            low = self.value(ftype, name, op)
            if not self.take_kw("AND"):
                raise self.fail("expected AND in BETWEEN ... AND ...")
            high = self.value(ftype, name, op)
            return Compare(name, ftype, system, op, (low, high))
        if self.take_kw("STARTS_WITH"):
            self.allowed(ftype, "starts_with", op_tok, name)
            if self.tok.kind != "string":
                raise self.fail("STARTS_WITH takes a quoted string")
            prefix = self.tok.value
            self.i += 1
            return Compare(name, ftype, system, "starts_with", (prefix,))
        if self.take_kw("IS"):
            op = "is_not_null" if self.take_kw("NOT") else "is_null"
            if not self.take_kw("NULL"):
                raise self.fail("expected NULL after IS")
            return Compare(name, ftype, system, op, ())
        if op_tok.kind != "op":
            raise self.fail(f"expected an operator after field {name!r}")
        self.i += 1
        op = "!=" if op_tok.text == "<>" else op_tok.text
        self.allowed(ftype, op, op_tok, name)
        return Compare(name, ftype, system, op, (self.value(ftype, name, op),))

    def allowed(self, ftype: FieldType, op: str, tok: _Tok, name: str) -> None:
        ok = _OPS_BY_TYPE[ftype]
        if op not in ok:
            raise self.fail(
                f"operator {op.replace('_', ' ').upper()} does not apply to {name!r}"
                f" ({ftype.value}; it takes {', '.join(o.replace('_', ' ').upper() for o in ok)})",
                tok,
            )

    def value(self, ftype: FieldType, name: str, op: str) -> str | int | float | bool:
        tok = self.tok
        self.i += 1
        if tok.kind == "end":
            raise self.fail(f"expected a value for {name!r}", tok)
        what = f"{name!r} is {ftype.value} and"
        if ftype in (FieldType.KEYWORD, FieldType.KEYWORD_ARRAY, FieldType.TEXT):
            if tok.kind != "string":
                raise self.fail(f"{what} takes a quoted string", tok)
            return self.status(tok) if name == "ExecutionStatus" else tok.value
        if ftype is FieldType.BOOL:
            if not _is_kw(tok, "TRUE", "FALSE"):
                raise self.fail(f"{what} takes TRUE or FALSE", tok)
            return tok.text.upper() == "TRUE"
        if ftype is FieldType.DATETIME:
            if tok.kind != "string":
                raise self.fail(f"{what} takes a quoted ISO 8601 time", tok)
            try:
                t = datetime.fromisoformat(tok.value)
            except ValueError:
                raise self.fail(f"{what} takes an ISO 8601 time", tok) from None
            return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()
        if tok.kind != "number":
            raise self.fail(f"{what} takes a number", tok)
        if ftype is FieldType.INT:
            if not re.fullmatch(r"-?\d+", tok.text):
                raise self.fail(f"{what} takes an integer", tok)
            v = int(tok.text)
            if not -(2**63) <= v < 2**63:
                raise self.fail(f"{what} takes a 64-bit integer", tok)
            return v
        f = float(tok.text)
        if not math.isfinite(f):
            raise self.fail(f"{what} takes a finite number", tok)
        return f

    def status(self, tok: _Tok) -> str:
        status = tok.value.lower()
        if status not in _STATUSES:
            raise self.fail(f"unknown ExecutionStatus ({', '.join(sorted(_STATUSES))})", tok)
        return status

    def order_item(self) -> OrderItem:
        ftok, ftype, system = self.field()
        if ftype in (FieldType.TEXT, FieldType.KEYWORD_ARRAY):
            raise self.fail(f"cannot ORDER BY {ftok.value!r} ({ftype.value})", ftok)
        descending = False
        if self.take_kw("DESC"):
            descending = True
        else:
            self.take_kw("ASC")
        return OrderItem(ftok.value, ftype, system, descending)


_RANGE = ("=", "!=", "<", "<=", ">", ">=", "in", "not_in", "between", "not_between")
_OPS_BY_TYPE: Mapping[FieldType, tuple[str, ...]] = {
    FieldType.KEYWORD: (*_RANGE, "starts_with"),
    FieldType.KEYWORD_ARRAY: ("=", "!=", "in", "not_in"),
    FieldType.TEXT: ("=", "!="),
    FieldType.INT: _RANGE,
    FieldType.DOUBLE: _RANGE,
    FieldType.BOOL: ("=", "!="),
    FieldType.DATETIME: _RANGE,
}


def parse_query(text: str, fields: Mapping[str, FieldType]) -> Query:
    """Parse and type-check a search query.

    Args:
        text: the query; ``""`` (or only whitespace) matches every Flow.
        fields: the registered index keys and their types (system fields are added).

    Raises:
        QueryError: the query is too long, does not parse, names an unknown field, or uses
            an operator or a value its field's type does not take. The message names the
            position and the token.

    """
    size = len(text.encode())
    if size > MAX_QUERY_BYTES:
        raise QueryError(
            f"the query is {size} bytes, over the limit max_query_bytes={MAX_QUERY_BYTES}",
            0,
            text[:20],
        )
    if "\x00" in text:
        raise QueryError("the query holds a NUL character", text.index("\x00"), "\x00")
    return _Parser(text, fields).query()


def quoted(text: str) -> str:
    """``text`` as a single-quoted query string (quotes doubled, backslashes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def with_conditions(query: str, conditions: Sequence[str]) -> str:
    """``query`` narrowed by ``conditions`` (each a predicate in the query language).

    The listing filters of the CLI and Dex Web (status, Flow type, ID prefix, start
    time) become conditions ANDed in front of the user's filter, which is parenthesised so
    its ``OR`` keeps its meaning; a trailing ``ORDER BY`` stays last. Without conditions
    the query comes back unchanged, so parse errors keep their positions. A query that
    does not tokenize is wrapped whole: its parse then fails with the parser's message.
    Build condition values with :func:`quoted`.
    """
    if not conditions:
        return query
    body, order = query, ""
    try:
        toks = _tokenize(query)
    except QueryError:
        toks = []
    for a, b in zip(toks, toks[1:], strict=False):
        if _is_kw(a, "ORDER") and _is_kw(b, "BY"):
            body, order = query[: a.pos].rstrip(), query[a.pos :]
            break
    parts = [*conditions, *([f"({body})"] if body.strip() else [])]
    return " AND ".join(parts) + (" " + order if order else "")


def listing_conditions(
    *,
    status: str | None = None,
    flow_type: str | None = None,
    flow_id_prefix: str = "",
    started_after: float | None = None,
    started_before: float | None = None,
) -> list[str]:
    """The query conditions of the listing filters (``None`` / ``""``: no condition).

    ``started_after`` is inclusive and ``started_before`` exclusive (Unix times), as in the
    plain listing.
    """
    conds: list[str] = []
    if status:
        conds.append(f"ExecutionStatus = {quoted(status)}")
    if flow_type:
        conds.append(f"FlowType = {quoted(flow_type)}")
    if flow_id_prefix:
        conds.append(f"FlowId STARTS_WITH {quoted(flow_id_prefix)}")
    if started_after is not None:
        conds.append(f"StartTime >= {quoted(_iso(started_after))}")
    if started_before is not None:
        conds.append(f"StartTime < {quoted(_iso(started_before))}")
    return conds


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()
