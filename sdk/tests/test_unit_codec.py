from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, datetime
from typing import Any

import msgspec
import pydantic
import pytest
from dex import CodecRegistry, FlowDefinitionError, ValueMappingError, _codec, codec_for


@dataclasses.dataclass
class Point:
    y: int
    x: int


class Item(msgspec.Struct):
    name: str
    tags: list[str] = []


class Model(pydantic.BaseModel):
    b: int
    a: str


class Color(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    S = 1


class Opaque:
    pass


def test_canonical_json_sorted_compact() -> None:
    assert codec_for(dict[str, int]).encode({"b": 1, "a": 2}) == b'{"a":2,"b":1}'
    assert codec_for(Point).encode(Point(y=1, x=2)) == b'{"x":2,"y":1}'
    assert codec_for(Any).encode({"z": [1, {"b": 2, "a": 1}]}) == b'{"z":[1,{"a":1,"b":2}]}'


@pytest.mark.parametrize(
    ("tp", "value"),
    [
        (str, "héllo"),
        (int, 3),
        (float, 2.5),
        (bool, True),
        (None, None),
        (type(None), None),
        (Point, Point(1, 2)),
        (Item, Item("a", ["x"])),
        (Model, Model(b=1, a="x")),
        (Color, Color.RED),
        (Size, Size.S),
        (datetime, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (list[Point], [Point(1, 2)]),
        (dict[str, list[int]], {"a": [1]}),
        (tuple[int, str], (1, "a")),
        (int | None, None),
        (Point | None, Point(3, 4)),
        (list[Model], [Model(b=2, a="y")]),
    ],
)
def test_round_trip(tp: object, value: object) -> None:
    codec = codec_for(tp)
    assert codec.decode(codec.encode(value)) == value


def test_pydantic_uses_json_mode() -> None:
    assert codec_for(Model).encode(Model(b=1, a="x")) == b'{"a":"x","b":1}'


def test_enum_and_datetime_wire_shape() -> None:
    assert codec_for(Color).encode(Color.RED) == b'"red"'
    when = datetime(2026, 1, 2, tzinfo=UTC)
    assert codec_for(datetime).encode(when) == b'"2026-01-02T00:00:00Z"'


def test_int_codec_float_accepts_int() -> None:
    assert codec_for(float).encode(3) == b"3"
    with pytest.raises(ValueMappingError):
        codec_for(int).encode(True)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_rejected(bad: float) -> None:
    with pytest.raises(ValueMappingError):
        codec_for(float).encode(bad)
    with pytest.raises(ValueMappingError, match=r"\$\.a\[0\]"):
        codec_for(dict[str, list[float]]).encode({"a": [bad]})
    with pytest.raises(ValueMappingError):
        codec_for(Any).encode([bad])


def test_non_finite_found_beside_nulls_and_null_text() -> None:
    # NaN encodes as null, so the walk that names it runs only when the output holds a null
    hinted = codec_for(dict[str, Any])
    assert hinted.encode({"text": "null", "none": None, "x": 1.5}) == (
        b'{"none":null,"text":"null","x":1.5}'
    )
    with pytest.raises(ValueMappingError, match=r"\$\.b\[1\]"):
        hinted.encode({"a": None, "b": [1.0, float("-inf")]})


def test_nulls_beside_finite_floats_are_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    walks: list[object] = []
    walk = _codec._non_finite

    def counted(obj: object) -> bool:
        walks.append(obj)
        return walk(obj)

    monkeypatch.setattr(_codec, "_non_finite", counted)
    hinted = codec_for(dict[str, Any])
    assert hinted.encode({"none": None, "x": 1.5, "big": 1e308}) == (
        b'{"big":1e308,"none":null,"x":1.5}'
    )
    assert walks == []  # a null beside finite floats alone: no walk
    # an integer whose bytes look like a non-finite float to the filter: walked, and fine
    lookalike = int.from_bytes(b"\x00\xcb\x7f\xf0\x00\x00\x00\x01", "big")
    assert hinted.encode({"none": None, "n": lookalike}) == (
        b'{"n":' + str(lookalike).encode() + b',"none":null}'
    )
    assert walks[0] == {"n": lookalike, "none": None}
    with pytest.raises(ValueMappingError, match=r"\$\.p\.y"):
        hinted.encode({"none": None, "p": Point(x=1, y=float("nan"))})  # type: ignore[arg-type]


def test_mismatch_on_encode_names_type() -> None:
    with pytest.raises(ValueMappingError, match="expected int"):
        codec_for(int).encode("x")
    with pytest.raises(ValueMappingError, match=r"\$\[0\]\.x"):
        codec_for(list[Point]).encode([{"x": "no", "y": 1}])
    with pytest.raises(ValueMappingError):
        codec_for(Model).encode({"b": "not-int", "a": "x"})


def test_mismatch_on_decode_has_path() -> None:
    with pytest.raises(ValueMappingError, match=r"\$\.y"):
        codec_for(Point).decode(b'{"x":1,"y":"s"}')
    with pytest.raises(ValueMappingError):
        codec_for(int).decode(b"not json")
    with pytest.raises(ValueMappingError):
        codec_for(Model).decode(b'{"a":1}')


def test_unsupported_type_is_definition_error() -> None:
    with pytest.raises(FlowDefinitionError, match="Opaque"):
        codec_for(Opaque)
    with pytest.raises(FlowDefinitionError, match="Opaque"):
        codec_for(list[Opaque] | None)


def test_codecs_are_cached() -> None:
    assert codec_for(list[int]) is codec_for(list[int])
    assert codec_for(Point) is codec_for(Point)


class UpperCodec:
    def encode(self, value: object) -> bytes:
        return msgspec.json.encode(str(value).upper())

    def decode(self, data: bytes) -> Any:
        return msgspec.json.decode(data).lower()


def test_codec_registry_overrides_builtin() -> None:
    reg = CodecRegistry().register(Opaque, UpperCodec())
    assert reg.get(Opaque).encode("ab") == b'"AB"'
    assert reg.get(int) is codec_for(int)
    with pytest.raises(FlowDefinitionError):
        CodecRegistry().register(int, object())  # type: ignore[arg-type]
