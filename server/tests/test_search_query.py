"""The search query language (pure): tokenizer, parser, type check, and SQL compilation."""

from __future__ import annotations

import re

import pytest
from dex._protocol import FlowSpec, StateDecl
from dex_server.engine.query import (
    MAX_IN_VALUES,
    MAX_PREDICATES,
    MAX_QUERY_BYTES,
    And,
    Compare,
    FieldType,
    Not,
    Or,
    OrderItem,
    Query,
    QueryError,
    parse_query,
)
from dex_server.engine.schema import InvalidSpecError, check_spec, index_fields
from dex_server.engine.search import (
    IndexRow,
    MatchOp,
    attribute_matches,
    check_match,
    hydrate,
    index_rows,
)
from dex_server.store._search import POSTGRES, SQLITE, compile_search

FIELDS = {
    "Status": FieldType.KEYWORD,
    "Note": FieldType.TEXT,
    "Tags": FieldType.KEYWORD_ARRAY,
    "Amount": FieldType.INT,
    "Price": FieldType.DOUBLE,
    "Vip": FieldType.BOOL,
    "Due": FieldType.DATETIME,
}


def cmp(field: str, op: str, *values: object) -> Compare:
    ftype = FIELDS.get(field) or {"FlowType": FieldType.KEYWORD}[field]
    return Compare(field, ftype, field == "FlowType", op, tuple(values))  # type: ignore[arg-type]


def test_precedence_not_and_or_and_parentheses() -> None:
    q = parse_query("Status = 'a' OR NOT Amount > 1 AND (Vip = true OR Price <= 2.5)", FIELDS)
    assert q == Query(
        Or(
            (
                cmp("Status", "=", "a"),
                And(
                    (
                        Not(cmp("Amount", ">", 1)),
                        Or((cmp("Vip", "=", True), cmp("Price", "<=", 2.5))),
                    )
                ),
            )
        ),
        (),
    )


def test_every_predicate_form_and_order_by() -> None:
    q = parse_query(
        "Status IN ('a', \"b\") and Amount not between -5 AND 5 And Status starts_with 'x'"
        " AND `Note` = 'it''s' AND Tags IS NOT NULL AND Due IS NULL AND Status <> 'z'"
        " AND FlowType NOT IN ('T') ORDER BY Amount DESC, Due asc, Status",
        FIELDS,
    )
    assert q.where == And(
        (
            cmp("Status", "in", "a", "b"),
            cmp("Amount", "not_between", -5, 5),
            cmp("Status", "starts_with", "x"),
            cmp("Note", "=", "it's"),
            cmp("Tags", "is_not_null"),
            cmp("Due", "is_null"),
            cmp("Status", "!=", "z"),
            cmp("FlowType", "not_in", "T"),
        )
    )
    assert q.order == (
        OrderItem("Amount", FieldType.INT, False, True),
        OrderItem("Due", FieldType.DATETIME, False, False),
        OrderItem("Status", FieldType.KEYWORD, False, False),
    )


def test_values_are_typed() -> None:
    where = parse_query("Due >= '2030-01-01T00:00:00+01:00' AND Price = 3", FIELDS).where
    assert where == And((cmp("Due", ">=", 1893452400.0), cmp("Price", "=", 3.0)))
    status = parse_query("ExecutionStatus = 'Running'", FIELDS).where
    assert isinstance(status, Compare) and status.values == ("running",)
    assert parse_query("  ", FIELDS) == Query(None, ())
    assert parse_query("ORDER BY StartTime DESC", FIELDS).order[0].system


@pytest.mark.parametrize(
    ("query", "position", "token", "message"),
    [
        ("Status = ", 9, "", "expected a value"),
        ("Status == 'x'", 8, "=", "quoted string"),
        ("Nope = 'x'", 0, "Nope", "unknown field 'Nope'"),
        ("Amount = 'x'", 9, "'x'", "takes a number"),
        ("Amount = 2.5", 9, "2.5", "integer"),
        ("Amount = 99999999999999999999", 9, "99999999999999999999", "64-bit"),
        ("Vip < true", 4, "<", "does not apply to 'Vip'"),
        ("Vip = 1", 6, "1", "TRUE or FALSE"),
        ("Tags > 'a'", 5, ">", "does not apply"),
        ("Note STARTS_WITH 'a'", 5, "STARTS_WITH", "does not apply"),
        ("Status STARTS_WITH 3", 19, "3", "quoted string"),
        ("(Status = 'a'", 13, "", "expected ')'"),
        ("Status = 'a')", 12, ")", "expected AND, OR, ORDER BY"),
        ("Status = 'a' ORDER Status", 19, "Status", "expected BY"),
        ("ORDER BY Note", 9, "Note", "cannot ORDER BY"),
        ("Due = 'soon'", 6, "'soon'", "ISO 8601"),
        ("Status = 'x", 9, "'x", "unterminated"),
        ("Status ~ 'x'", 7, "~", "unexpected character"),
        ("Status NOT = 'x'", 11, "=", "expected IN or BETWEEN"),
        ("Amount BETWEEN 1 OR 2", 17, "OR", "expected AND"),
        ("Status IS 'x'", 10, "'x'", "expected NULL"),
        ("AND = 1", 0, "AND", "expected a field name"),
        ("ExecutionStatus = 'asleep'", 18, "'asleep'", "unknown ExecutionStatus"),
        ("Price = 1e999", 8, "1e999", "finite"),
    ],
)
def test_errors_point_at_the_token(query: str, position: int, token: str, message: str) -> None:
    with pytest.raises(QueryError, match=re.escape(message)) as raised:
        parse_query(query, FIELDS)
    assert (raised.value.position, raised.value.token) == (position, token)
    where = f"at position {position}" + (f" near {token!r}" if token else " (end of query)")
    assert where in str(raised.value)


def test_limits_are_named() -> None:
    with pytest.raises(QueryError, match="max_query_bytes"):
        parse_query("Status = '" + "x" * MAX_QUERY_BYTES + "'", FIELDS)
    with pytest.raises(QueryError, match="max_predicates"):
        parse_query(" OR ".join(["Amount = 1"] * (MAX_PREDICATES + 1)), FIELDS)
    with pytest.raises(QueryError, match="max_in_values"):
        parse_query("Amount IN (" + ",".join(["1"] * (MAX_IN_VALUES + 1)) + ")", FIELDS)
    with pytest.raises(QueryError, match="NUL"):
        parse_query("Status = '\x00'", FIELDS)


def test_sql_carries_values_as_parameters_only() -> None:
    evil = "x' OR 1=1; DROP TABLE flows; --"
    q = parse_query(f"Status = '{evil.replace(chr(39), chr(39) * 2)}' ORDER BY Amount", FIELDS)
    for dialect in (SQLITE, POSTGRES):
        page = compile_search(dialect, q, include_continued_as_new=False, limit=5, offset=0)
        assert "DROP" not in page.sql and evil in page.args
        assert page.sql.count(dialect.mark) == len(page.args)


def test_a_range_on_the_ordered_key_moves_into_its_join() -> None:
    q = parse_query("Amount >= 1 AND Amount < 9 AND Vip = true ORDER BY Amount DESC", FIELDS)
    page = compile_search(SQLITE, q, include_continued_as_new=True, limit=5, offset=0)
    assert " JOIN search_values o0 ON" in page.sql and "LEFT JOIN" not in page.sql
    assert "ORDER BY o0.i DESC, o0.run_id DESC" in page.sql
    assert "continued_as_new" not in page.sql
    assert page.args == ["Amount", 1, 9, "Vip", 1, 5, 0]


def test_active_step_patterns_match_only_their_type() -> None:
    assert SQLITE.step_pattern("A*b[") == "A[*]b[[]-[0-9]*"
    assert POSTGRES.step_pattern("A.b") == "^A\\.b-[0-9]+$"


@pytest.mark.parametrize(
    ("ftype", "value", "rows"),
    [
        (FieldType.KEYWORD, b'"a"', [IndexRow(0, kw="a")]),
        (FieldType.KEYWORD, b"3", []),
        (FieldType.KEYWORD, b'"' + b"x" * 2000 + b'"', []),
        (FieldType.TEXT, b'"Some text"', [IndexRow(0, txt="Some text")]),
        (FieldType.KEYWORD_ARRAY, b'["a","b","a",1]', [IndexRow(0, kw="a"), IndexRow(1, kw="b")]),
        (FieldType.INT, b"7", [IndexRow(0, i=7)]),
        (FieldType.INT, b"true", []),
        (FieldType.INT, b"1.5", []),
        (FieldType.DOUBLE, b"2", [IndexRow(0, num=2.0)]),
        (FieldType.BOOL, b"false", [IndexRow(0, i=0)]),
        (FieldType.DATETIME, b'"1970-01-01T00:01:00"', [IndexRow(0, num=60.0)]),
        (FieldType.DATETIME, b'"later"', []),
        (FieldType.DATETIME, b"60", [IndexRow(0, num=60.0)]),
        (FieldType.INT, None, []),
        (FieldType.INT, b"{not json", []),
    ],
)
def test_index_rows_of_values(ftype: FieldType, value: bytes | None, rows: list[IndexRow]) -> None:
    assert index_rows(ftype, value) == rows


def test_hydrate_gives_values_back() -> None:
    assert hydrate(FieldType.KEYWORD_ARRAY, [IndexRow(0, kw="a"), IndexRow(1, kw="b")]) == [
        "a",
        "b",
    ]
    assert hydrate(FieldType.BOOL, [IndexRow(0, i=1)]) is True
    assert hydrate(FieldType.DATETIME, [IndexRow(0, num=60.0)]) == "1970-01-01T00:01:00+00:00"
    assert hydrate(FieldType.INT, []) is None


def test_attribute_matches() -> None:
    assert attribute_matches(MatchOp.EQUAL, 1, 1.0)
    assert not attribute_matches(MatchOp.EQUAL, 1, True)
    assert attribute_matches(MatchOp.NOT_EQUAL, "a", None)
    assert attribute_matches(MatchOp.GREATER, 1, 2)
    assert not attribute_matches(MatchOp.GREATER, 1, "2")
    assert attribute_matches(MatchOp.LESS_OR_EQUAL, 2, 2)
    assert check_match(MatchOp.GREATER, "a") is not None
    assert check_match(MatchOp.GREATER, True) is not None
    assert check_match(MatchOp.EQUAL, [1]) is not None
    assert check_match(MatchOp.EQUAL, None) is None


@pytest.mark.parametrize(
    ("decl", "message"),
    [
        (StateDecl(name="c", kind="channel", index_type="keyword"), "cannot have a search index"),
        (StateDecl(name="a", kind="attribute", index_type="geo"), "unknown index type"),
        (StateDecl(name="m", kind="attribute_map", index_type="int"), "explicit index_key"),
        (StateDecl(name="a", kind="attribute", index_type="int", index_key="FlowType"), "system"),
        (StateDecl(name="a", kind="attribute", index_key="K"), "no index"),
        (StateDecl(name="a", kind="attribute", index_type="int", index_key="a`b"), "backquote"),
    ],
)
def test_bad_index_declarations_are_refused(decl: StateDecl, message: str) -> None:
    with pytest.raises(InvalidSpecError, match=message):
        check_spec(FlowSpec(flow_type="T", state=[decl]))


def test_one_key_for_two_attributes_is_refused() -> None:
    spec = FlowSpec(
        flow_type="T",
        state=[
            StateDecl(name="a", kind="attribute", index_type="int", index_key="K"),
            StateDecl(name="b", kind="attribute", index_type="int", index_key="K"),
        ],
    )
    with pytest.raises(InvalidSpecError, match="used by both"):
        check_spec(spec)
    ok = FlowSpec(
        flow_type="T",
        state=[
            StateDecl(name="a", kind="attribute", index_type="full_text"),
            StateDecl(name="m", kind="attribute_map", index_type="text", index_key="M"),
        ],
    )
    check_spec(ok)
    assert index_fields(ok) == {"a": ("a", FieldType.TEXT), "m": ("M", FieldType.TEXT)}
