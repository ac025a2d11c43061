"""The ``Value`` codec API: scalar codecs, ``JsonCodec``, ``CodecRegistry(codecs).resolve``,
and how registered codecs meet the SDK's canonical JSON wire."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from dex import (
    BOOL,
    BYTES,
    DOUBLE,
    INT64,
    STRING,
    Codec,
    CodecRegistry,
    FlowDefinitionError,
    JsonCodec,
    Value,
    ValueMappingError,
    WireKind,
)


@dataclass
class Point:
    x: int
    y: int


class Celsius:
    def __init__(self, degrees: float) -> None:
        self.degrees = degrees

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Celsius) and other.degrees == self.degrees

    def __hash__(self) -> int:
        return hash(self.degrees)


class CelsiusCodec:
    """Written against the ``Codec`` protocol (Value kind DOUBLE)."""

    @property
    def type_name(self) -> str:
        return "Celsius"

    @property
    def wire_kind(self) -> WireKind:
        return WireKind.DOUBLE

    def encode(self, value: Celsius) -> Value:
        return Value(WireKind.DOUBLE, float(value.degrees))

    def decode(self, value: Value) -> Celsius:
        assert isinstance(value.data, float)
        return Celsius(value.data)


class BytesCodec:
    """A codec of the SDK's own shape: canonical JSON bytes in and out."""

    def encode(self, value: object) -> bytes:
        assert isinstance(value, Celsius)
        return str(value.degrees).encode()

    def decode(self, data: bytes) -> Any:
        return Celsius(float(data))


def test_wire_kinds_and_values() -> None:
    assert [k.value for k in WireKind] == ["string", "bool", "int64", "double", "bytes", "json"]
    value = Value(WireKind.INT64, 5)
    assert (value.kind, value.data) == (WireKind.INT64, 5)
    assert value == Value(kind=WireKind.INT64, data=5)
    assert hash(value) == hash(Value(WireKind.INT64, 5))
    with pytest.raises(AttributeError):
        value.data = 6  # type: ignore[misc]


def test_scalar_codecs() -> None:
    cases: list[tuple[Codec[Any], str | bool | int | float | bytes, WireKind, str]] = [
        (STRING, "a", WireKind.STRING, "str"),
        (BOOL, True, WireKind.BOOL, "bool"),
        (INT64, 5, WireKind.INT64, "int"),
        (DOUBLE, 1.5, WireKind.DOUBLE, "float"),
        (BYTES, b"\x00x", WireKind.BYTES, "bytes"),
    ]
    for codec, data, kind, name in cases:
        assert (codec.type_name, codec.wire_kind) == (name, kind)
        assert codec.encode(data) == Value(kind, data)
        assert codec.decode(Value(kind, data)) == data
        assert isinstance(codec, Codec)


@pytest.mark.parametrize(
    ("codec", "value", "error"),
    [
        (INT64, "x", TypeError),
        (INT64, True, TypeError),
        (INT64, 2**70, OverflowError),
        (DOUBLE, float("nan"), ValueError),
        (DOUBLE, 3, TypeError),
        (BOOL, 1, TypeError),
        (STRING, 5, TypeError),
        (BYTES, "x", TypeError),
    ],
)
def test_scalar_codecs_reject_other_values(
    codec: Codec[Any], value: object, error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        codec.encode(value)
    assert isinstance(raised.value, ValueMappingError)  # the SDK's error too


def test_scalar_decode_checks_the_kind() -> None:
    with pytest.raises(TypeError, match="cannot decode wire kind string"):
        INT64.decode(Value(WireKind.STRING, "7"))


def test_json_codec() -> None:
    codec: JsonCodec[Point] = JsonCodec(
        "point", lambda d: Point(**d), lambda p: {"y": p.y, "x": p.x}
    )
    assert (codec.type_name, codec.wire_kind, codec.expected_type) == (
        "point",
        WireKind.JSON,
        None,
    )
    encoded = codec.encode(Point(3, 4))
    assert encoded == Value(WireKind.JSON, '{"x":3,"y":4}')  # canonical: sorted, compact
    assert codec.decode(encoded) == Point(3, 4)
    assert codec.decode(Value(WireKind.JSON, '{"x": 1, "y": 2}')) == Point(1, 2)
    identity: JsonCodec[Any] = JsonCodec("any", lambda d: d)
    assert identity.encode({"b": 1, "a": [1, 2.5]}).data == '{"a":[1,2.5],"b":1}'
    with pytest.raises(ValueError):
        identity.encode(float("nan"))
    with pytest.raises(TypeError):
        identity.encode(object())
    typed: JsonCodec[int] = JsonCodec("p", lambda d: d, expected_type=int)
    with pytest.raises(TypeError, match="p requires int"):
        typed.encode("x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        codec.decode(Value(WireKind.STRING, "{}"))


def test_resolve() -> None:
    registry = CodecRegistry()
    assert registry.resolve(int) is INT64
    assert registry.resolve(str) is STRING
    assert registry.resolve(float) is DOUBLE
    assert registry.resolve(bool) is BOOL
    assert registry.resolve(bytes) is BYTES
    points = registry.resolve(list[Point])
    assert isinstance(points, JsonCodec)
    assert (points.type_name, points.wire_kind) == ("list", WireKind.JSON)
    assert points.encode([Point(1, 2)]) == Value(WireKind.JSON, '[{"x":1,"y":2}]')
    assert points.decode(Value(WireKind.JSON, '[{"x":5,"y":6}]')) == [Point(5, 6)]
    with pytest.raises(TypeError, match="no codec for Celsius") as raised:
        registry.resolve(Celsius)
    assert isinstance(raised.value, FlowDefinitionError)


def test_registered_codecs_win() -> None:
    celsius = CelsiusCodec()
    as_text: JsonCodec[int] = JsonCodec("int-as-text", int, str, int)
    registry = CodecRegistry({Celsius: celsius, int: as_text})
    assert registry.resolve(Celsius) is celsius
    assert registry.resolve(int) is as_text
    # the wire the SDK sends: canonical JSON of the Value's data
    wire = registry.get(Celsius)
    assert wire.encode(Celsius(21.5)) == b"21.5"
    assert wire.decode(b"21.5") == Celsius(21.5)
    assert wire.decode(b"21") == Celsius(21.0)  # a JSON integer is a valid double
    assert registry.get(int).encode(5) == b'"5"'  # int stored as JSON text
    assert registry.get(int).decode(b'"6"') == 6
    with pytest.raises(ValueMappingError):
        registry.get(int).encode("five")


def test_every_wire_kind_maps_to_canonical_json() -> None:
    class Box:
        def __init__(self, value: Value) -> None:
            self.value = value

    class BoxCodec:
        type_name = "Box"

        def __init__(self, kind: WireKind) -> None:
            self.wire_kind = kind

        def encode(self, value: Box) -> Value:
            return value.value

        def decode(self, value: Value) -> Box:
            return Box(value)

    cases = [
        (Value(WireKind.STRING, "é"), '"é"'.encode()),
        (Value(WireKind.BOOL, False), b"false"),
        (Value(WireKind.INT64, -3), b"-3"),
        (Value(WireKind.DOUBLE, 0.25), b"0.25"),
        (Value(WireKind.BYTES, b"\x00\xff"), b'"AP8="'),
        (Value(WireKind.JSON, '{"b": [1], "a": null}'), b'{"a":null,"b":[1]}'),
    ]
    for value, wire in cases:
        codec = CodecRegistry({Box: BoxCodec(value.kind)}).get(Box)
        assert codec.encode(Box(value)) == wire
        decoded = codec.decode(wire).value
        assert decoded.kind is value.kind
        if value.kind is not WireKind.JSON:
            assert decoded == value


def test_wrong_values_from_user_codecs_are_mapping_errors() -> None:
    class Liar:
        type_name = "Liar"
        wire_kind = WireKind.INT64

        def encode(self, value: object) -> Value:
            return Value(WireKind.INT64, "not an int")

        def decode(self, value: Value) -> object:
            raise ValueError("cannot")

    wire = CodecRegistry({Celsius: Liar()}).get(Celsius)
    with pytest.raises(ValueMappingError):
        wire.encode(Celsius(1))
    with pytest.raises(ValueMappingError, match="cannot"):
        wire.decode(b"1")
    with pytest.raises(ValueMappingError):
        wire.decode(b'"text"')  # not an INT64 on the wire


def test_codecs_of_the_sdk_shape_still_register() -> None:
    registry = CodecRegistry().register(Celsius, BytesCodec())
    assert registry.get(Celsius).encode(Celsius(3.0)) == b"3.0"
    resolved = registry.resolve(Celsius)
    assert resolved.wire_kind is WireKind.JSON
    assert resolved.decode(Value(WireKind.JSON, "4.5")) == Celsius(4.5)
    with pytest.raises(FlowDefinitionError, match="encode/decode"):
        CodecRegistry({Celsius: 5})  # type: ignore[dict-item]
