"""Our public ``dex`` API accepts every call that the reference SDK's API accepts.

``data/dex_1_23_api.json`` records the public call surface of ``dex-python-sdk`` 1.23.0
(made by ``scripts/record_api_facts.py``): names, parameter names and kinds, defaults,
enum members, generic parameters and each public submodule's names. These tests check our
package against those facts, so code written for that SDK keeps importing and calling.
Ours may add names, members and trailing parameters with defaults, and may accept wider
types; it may not rename, reorder, drop or add a required parameter.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import datetime
import enum
import importlib
import inspect
import json
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

import dex
import pytest

FACTS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "dex_1_23_api.json").read_text(encoding="utf-8")
)
NAMES: dict[str, Any] = FACTS["names"]
POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")


def _default_matches(recorded: str, ours: Any) -> bool:
    """Whether our default stands for the same value as the recorded ``repr``."""
    if recorded.startswith("datetime.timedelta("):
        expected = eval(
            recorded, {"datetime": datetime}
        )  # a repr of a timedelta, from the data file
        if isinstance(ours, datetime.timedelta):
            return bool(ours == expected)
        return isinstance(ours, (int, float)) and ours == expected.total_seconds()
    try:
        literal = ast.literal_eval(recorded)
    except (ValueError, SyntaxError):
        return True  # an object default (an options instance, an enum member): presence suffices
    if isinstance(ours, enum.Enum):
        return bool(ours.value == literal)
    return bool(ours == literal)


class _Ours:
    """Our parameters of one callable, looked up the ways a caller can reach them."""

    def __init__(self, params: list[inspect.Parameter]) -> None:
        self.params = params
        self.positional = [p for p in params if p.kind.name in POSITIONAL]
        self.by_name = {p.name: p for p in params}
        self.var_pos = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
        self.var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _positional(rec: dict[str, Any], index: int, ours: _Ours) -> tuple[Any, list[str]]:
    name = rec["name"]
    if index >= len(ours.positional):
        return None, [] if ours.var_pos else [f"{name!r} cannot be passed at position {index}"]
    mine = ours.positional[index]
    if rec["kind"] == "POSITIONAL_OR_KEYWORD" and not name.startswith("_"):
        if mine.name != name:
            return mine, [f"position {index}: {mine.name!r}, not {name!r}"]
        if mine.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            return mine, [f"{name!r} cannot be passed by keyword"]
    return mine, []


def _keyword(rec: dict[str, Any], ours: _Ours) -> tuple[Any, list[str]]:
    name = rec["name"]
    mine = ours.by_name.get(name)
    if mine is None:
        return None, [] if ours.var_kw else [f"keyword {name!r} missing"]
    if mine.kind.name not in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY"):
        return mine, [f"{name!r} is not a keyword parameter"]
    return mine, []


def _default_problems(rec: dict[str, Any], mine: inspect.Parameter) -> list[str]:
    if "default" not in rec:
        return []
    if mine.default is inspect.Parameter.empty:
        return [f"{rec['name']!r} has no default (recorded {rec['default']})"]
    if not _default_matches(rec["default"], mine.default):
        return [f"{rec['name']!r} defaults to {mine.default!r}, not {rec['default']}"]
    return []


def signature_problems(recorded: list[dict[str, Any]], func: Any) -> list[str]:
    """Ways in which ``func`` would refuse or change a call the recorded signature accepts."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        return [f"no signature: {exc}"]
    ours = _Ours([p for p in sig.parameters.values() if p.name not in ("self", "cls")])
    problems: list[str] = []
    matched: set[str] = set()
    index = 0
    last_public = max(
        (i for i, r in enumerate(recorded) if not r["name"].startswith("_")), default=-1
    )
    for position, rec in enumerate(recorded):
        if position > last_public:
            break  # trailing private parameters are the SDK's own, not part of the API
        if rec["kind"] in POSITIONAL:
            mine, found = _positional(rec, index, ours)
            index += 1
        elif rec["kind"] == "KEYWORD_ONLY":
            mine, found = _keyword(rec, ours)
        else:
            var = ours.var_pos if rec["kind"] == "VAR_POSITIONAL" else ours.var_kw
            mine, found = None, [] if var else [f"variadic {rec['name']!r} missing"]
        problems += found
        if mine is not None:
            matched.add(mine.name)
            problems += _default_problems(rec, mine)
    for p in ours.params:
        extra = p.name not in matched and p.kind.name not in ("VAR_POSITIONAL", "VAR_KEYWORD")
        if extra and p.default is inspect.Parameter.empty:
            problems.append(f"extra required parameter {p.name!r}")
    return problems


def _ours(name: str) -> Any:
    return getattr(dex, name, None)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_name_is_exported_with_its_kind(name: str) -> None:
    assert hasattr(dex, name), f"dex.{name} is missing"
    assert name in dex.__all__, f"dex.{name} is not in dex.__all__"
    kind = NAMES[name]["kind"]
    obj = _ours(name)
    if kind == "enum":
        assert isinstance(obj, type) and issubclass(obj, enum.Enum)
    elif kind == "exception":
        assert isinstance(obj, type) and issubclass(obj, BaseException)
    elif kind == "class":
        assert isinstance(obj, type)
    elif kind == "function":
        assert callable(obj)


CALLABLES = sorted(
    n for n, f in NAMES.items() if f["kind"] == "function" and f["params"] is not None
)
CLASSES = sorted(n for n, f in NAMES.items() if f["kind"] in ("class", "exception"))
ENUMS = sorted(n for n, f in NAMES.items() if f["kind"] == "enum")


@pytest.mark.parametrize("name", CALLABLES)
def test_function_signature(name: str) -> None:
    assert signature_problems(NAMES[name]["params"], _ours(name)) == []


@pytest.mark.parametrize("name", CLASSES)
def test_constructor_signature(name: str) -> None:
    recorded = NAMES[name].get("init")
    built_by_sdk = recorded is None or all(
        p["name"].startswith("_") or p["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD")
        for p in recorded
    )
    if built_by_sdk:
        pytest.skip("built by the SDK, not by user code")
    assert signature_problems(recorded, _ours(name)) == []


def _member_cases() -> list[tuple[str, str]]:
    return sorted((cls, member) for cls in CLASSES for member in NAMES[cls]["members"])


@pytest.mark.parametrize(("cls", "member"), _member_cases())
def test_member_signature(cls: str, member: str) -> None:
    facts = NAMES[cls]["members"][member]
    ours_cls = _ours(cls)
    assert ours_cls is not None, f"dex.{cls} is missing"
    if facts["kind"] == "property":
        fields = {f.name for f in dataclasses.fields(ours_cls)} if is_dataclass(ours_cls) else set()
        assert hasattr(ours_cls, member) or member in fields, f"{cls}.{member} is missing"
        return
    assert hasattr(ours_cls, member), f"{cls}.{member} is missing"
    if "params" not in facts:
        return
    attr = inspect.getattr_static(ours_cls, member)
    func = attr.__func__ if isinstance(attr, (staticmethod, classmethod)) else attr
    assert callable(func), f"{cls}.{member} is not callable"
    assert inspect.iscoroutinefunction(func) == facts["async"], f"{cls}.{member}: async differs"
    params = facts["params"]
    if facts["kind"] == "method" and isinstance(attr, (staticmethod, classmethod)):
        pytest.fail(f"{cls}.{member} is a {type(attr).__name__}, recorded as a method")
    problems = signature_problems(params, func)
    if (cls, member) in OVERRIDDEN:
        # The SDK calls these positionally; our base takes them positional-only so that a
        # subclass may name them as it likes (``ctx``) and still type-check.
        problems = [p for p in problems if "cannot be passed by keyword" not in p]
    assert problems == []


OVERRIDDEN = {("Step", "execute"), ("Step", "wait_for")}


@pytest.mark.parametrize("name", ENUMS)
def test_enum_members(name: str) -> None:
    ours = _ours(name)
    assert ours is not None, f"dex.{name} is missing"
    for member, value in NAMES[name]["members"].items():
        assert member in ours.__members__, f"{name}.{member} is missing"
        assert repr(ours[member].value) == value, f"{name}.{member} = {ours[member].value!r}"


@pytest.mark.parametrize(
    "name", sorted(n for n in CLASSES if NAMES[n].get("generic_params", 0) > 0)
)
def test_generic_classes_are_subscriptable(name: str) -> None:
    ours = _ours(name)
    count = NAMES[name]["generic_params"]
    args = tuple([int] * count)
    assert ours[args if count > 1 else int] is not None


@pytest.mark.parametrize("name", sorted(n for n in CLASSES if NAMES[n]["kind"] == "exception"))
def test_exception_bases(name: str) -> None:
    ours = _ours(name)
    assert ours is not None, f"dex.{name} is missing"
    ours_bases = {b.__name__ for b in ours.__mro__}
    for base in NAMES[name]["bases"]:
        if base in vars(builtins) or base in NAMES:
            assert base in ours_bases, f"{name} does not derive from {base}"


@pytest.mark.parametrize("module", sorted(FACTS["submodules"]))
def test_submodule_exports_its_names(module: str) -> None:
    mod = importlib.import_module(f"dex.{module}")
    for name in FACTS["submodules"][module]:
        assert hasattr(mod, name), f"dex.{module}.{name} is missing"
        if hasattr(dex, name):
            assert getattr(mod, name) is getattr(dex, name), (
                f"dex.{module}.{name} is another object"
            )
