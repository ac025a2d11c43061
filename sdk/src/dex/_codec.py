"""Codecs: typed Python values to canonical JSON bytes and back.

Canonical JSON means sorted object keys, compact separators and no NaN/Infinity, so equal
values always produce equal bytes (the server compares and deduplicates them as opaque
bytes). msgspec handles primitives, ``None``, dataclasses, msgspec Structs, enums,
datetimes and containers; types that mention a pydantic ``BaseModel`` go through a pydantic
``TypeAdapter`` instead.
"""

from __future__ import annotations

import enum
import math
import re
import sys
import threading
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import msgspec
import msgspec.inspect as mi

from dex.errors import FlowDefinitionError, ValueMappingError

__all__ = [
    "BOOL",
    "BYTES",
    "DOUBLE",
    "INT64",
    "STRING",
    "Codec",
    "CodecRegistry",
    "JsonCodec",
    "TypeCodec",
    "Value",
    "WireCodec",
    "WireKind",
    "codec_for",
    "type_name",
]

_ENCODER = msgspec.json.Encoder(order="sorted")
_NULL = b"null"
# MessagePack keeps a float's bits: a NaN or an infinity is a float64 (0xcb) or float32
# (0xca) whose exponent bits are all set. Bytes inside other values can look the same (the
# exact walk then decides); a non-finite float always matches.
_PACKER = msgspec.msgpack.Encoder()
_PACKED_NON_FINITE = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]|\xca[\x7f\xff][\x80-\xff]")


@runtime_checkable
class WireCodec(Protocol):
    """The SDK's own codec shape: a value of one declared type to canonical JSON bytes.

    ``codec_for`` returns these, and ``CodecRegistry.get`` adapts every registered
    ``Codec`` to one. A custom codec of this shape (``encode -> bytes``,
    ``decode(bytes)``) may also be registered directly. It must be deterministic: equal
    values must give equal bytes. ``encode`` and ``decode`` raise ``ValueMappingError`` on
    a value that does not match.
    """

    def encode(self, value: object) -> bytes:
        """Encode ``value`` to canonical JSON bytes."""
        ...

    def decode(self, data: bytes) -> Any:
        """Decode JSON bytes into a value of the declared type."""
        ...


def type_name(tp: object) -> str:
    """Return a short readable name of a type annotation, for error messages."""
    if tp is None or tp is type(None):
        return "None"
    if isinstance(tp, type) and typing.get_origin(tp) is None:
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


def _non_finite(obj: object) -> bool:
    """Whether ``obj`` (builtins) holds a NaN or an infinity (no paths built: the usual case)."""
    if isinstance(obj, float):
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        items: Iterable[object] = obj.values()
    elif isinstance(obj, list | tuple):
        items = obj
    else:
        return False
    for item in items:
        if _non_finite(item):
            return True
    return False


def _may_be_non_finite(value: object) -> bool:
    """Whether ``value`` may hold a NaN or an infinity; a cheap filter before the walk."""
    try:
        packed = _PACKER.encode(value)
    except (TypeError, ValueError, OverflowError):
        return True  # the walk decides
    return _PACKED_NON_FINITE.search(packed) is not None


def _check_finite(obj: object, path: str) -> None:
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueMappingError("encode", f"{obj!r} is not valid in JSON - at `{path}`")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, f"{path}.{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            _check_finite(v, f"{path}[{i}]")


class _Shape:
    """What a walk over msgspec's type info found."""

    def __init__(self) -> None:
        self.may_hold_float = False
        self.pydantic = False
        self.unsupported: list[str] = []
        self.seen: set[int] = set()


def _is_pydantic_model(cls: type) -> bool:
    pyd = sys.modules.get("pydantic")
    return pyd is not None and isinstance(cls, type) and issubclass(cls, pyd.BaseModel)


def _walk(node: object, shape: _Shape) -> None:  # noqa: C901 - one branch per node kind
    if isinstance(node, mi.FloatType | mi.AnyType | mi.DecimalType):
        shape.may_hold_float = True
    elif isinstance(node, mi.CustomType):
        if _is_pydantic_model(node.cls):
            shape.pydantic = True
            shape.may_hold_float = True
        else:
            shape.unsupported.append(type_name(node.cls))
    elif isinstance(node, mi.StructType | mi.DataclassType | mi.TypedDictType):
        if id(node.cls) in shape.seen:
            return
        shape.seen.add(id(node.cls))
        for f in node.fields:
            _walk(f.type, shape)
    elif isinstance(node, mi.NamedTupleType):
        for f in node.fields:
            _walk(f.type, shape)
    elif isinstance(node, mi.Metadata):
        _walk(node.type, shape)
    elif isinstance(node, mi.UnionType):
        for t in node.types:
            _walk(t, shape)
    elif isinstance(node, mi.DictType):
        _walk(node.key_type, shape)
        _walk(node.value_type, shape)
    elif isinstance(node, mi.TupleType):
        for t in node.item_types:
            _walk(t, shape)
    elif isinstance(node, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        _walk(node.item_type, shape)


class TypeCodec:
    """The built-in codec of one type annotation (see ``codec_for``)."""

    def __init__(self, tp: object) -> None:
        self.type = tp
        self._name = type_name(tp)
        try:
            info = mi.type_info(tp)
        except Exception as exc:
            raise FlowDefinitionError(f"type {self._name} has no codec: {exc}") from exc
        shape = _Shape()
        _walk(info, shape)
        if shape.unsupported and not shape.pydantic:
            raise FlowDefinitionError(
                f"type {self._name} has no codec: {', '.join(shape.unsupported)} is not a "
                "primitive, dataclass, msgspec Struct, pydantic model, enum or datetime"
            )
        self._may_hold_float = shape.may_hold_float
        self._adapter: Any = None
        if shape.pydantic:
            import pydantic

            try:
                self._adapter = pydantic.TypeAdapter(typing.cast(Any, tp))
            except Exception as exc:
                raise FlowDefinitionError(f"type {self._name} has no codec: {exc}") from exc
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(tp)
        self._fast: tuple[type, ...] | None = _FAST.get(tp)

    def encode(self, value: object) -> bytes:
        """Encode ``value`` as canonical JSON; ``ValueMappingError`` if it does not match."""
        fast = self._fast
        if fast is not None:
            if isinstance(value, fast) and not (isinstance(value, bool) and bool not in fast):
                if isinstance(value, float) and not math.isfinite(value):
                    raise ValueMappingError("encode", f"{value!r} is not valid in JSON")
                return _ENCODER.encode(value)
            raise ValueMappingError(
                "encode", f"expected {self._name}, got {type(value).__qualname__}: {value!r:.80}"
            )
        if self._adapter is not None:
            return self._encode_pydantic(value)
        try:
            data = _ENCODER.encode(value)
            # msgspec writes NaN and infinities as null: only output holding a null can
            # hide one, and only then is the value walked to find and name it. (``find``:
            # ``in`` first tries the operand as a byte value and formats a TypeError.)
            if self._may_hold_float and data.find(b"null") >= 0 and _may_be_non_finite(value):
                builtins = msgspec.to_builtins(value, order="sorted")
                if _non_finite(builtins):
                    _check_finite(builtins, "$")
            self._decoder.decode(data)  # validates against the declared type
        except ValueMappingError:
            raise
        except (msgspec.ValidationError, TypeError, ValueError) as exc:
            raise ValueMappingError("encode", f"value does not match {self._name}: {exc}") from exc
        return data

    def _encode_pydantic(self, value: object) -> bytes:
        import pydantic

        try:
            validated = self._adapter.validate_python(value)
            builtins = self._adapter.dump_python(validated, mode="json")
        except (pydantic.ValidationError, TypeError, ValueError) as exc:
            raise ValueMappingError("encode", f"value does not match {self._name}: {exc}") from exc
        if _non_finite(builtins):
            _check_finite(builtins, "$")
        return _ENCODER.encode(msgspec.to_builtins(builtins, order="sorted"))

    def decode(self, data: bytes) -> Any:
        """Decode JSON bytes to the declared type; ``ValueMappingError`` if they do not match."""
        if self._adapter is not None:
            import pydantic

            try:
                return self._adapter.validate_python(msgspec.json.decode(data))
            except (pydantic.ValidationError, msgspec.DecodeError) as exc:
                raise ValueMappingError(
                    "decode", f"value does not match {self._name}: {exc}"
                ) from exc
        try:
            return self._decoder.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ValueMappingError("decode", f"value does not match {self._name}: {exc}") from exc

    def __repr__(self) -> str:
        return f"TypeCodec({self._name})"


_FAST: dict[object, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (float, int),
    bool: (bool,),
    type(None): (type(None),),
    None: (type(None),),
}

_CACHE: dict[object, TypeCodec] = {}
_LOCK = threading.Lock()


def codec_for(tp: object) -> TypeCodec:
    """Return the (cached) built-in codec of a type annotation.

    Supported: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any``/``object``,
    dataclasses, msgspec Structs, pydantic models, enums (incl. ``StrEnum``), ``datetime``,
    ``date``, ``time``, ``timedelta``, ``UUID``, ``Decimal`` and ``list``/``dict``/``tuple``/
    ``set``/``Optional``/``Union``/``Literal`` of those. Thread-safe.

    Raises:
        FlowDefinitionError: the type (or a type inside it) has no codec.

    """
    if tp is None:
        tp = type(None)
    try:
        return _CACHE[tp]
    except KeyError:
        pass
    except TypeError:  # unhashable annotation: build without caching
        return TypeCodec(tp)
    codec = TypeCodec(tp)
    with _LOCK:
        return _CACHE.setdefault(tp, codec)


ANY_CODEC: TypeCodec = codec_for(Any)
"""Codec for values of no declared type (decision outputs, locals, heartbeat values)."""


# --------------------------------------------------------------------------- Value codecs
# The public codec API: a ``Codec`` turns a value into a ``Value`` (a wire kind plus plain
# data) and back. On the wire every ``Value`` is canonical JSON: scalars as JSON scalars,
# bytes as a base64 string, JSON values as themselves.


class WireKind(enum.Enum):
    """The wire shape of a ``Value``: a scalar kind or a JSON document."""

    STRING = "string"
    BOOL = "bool"
    INT64 = "int64"
    DOUBLE = "double"
    BYTES = "bytes"
    JSON = "json"


@dataclass(frozen=True)
class Value:
    """One encoded value: its ``kind`` and its ``data``.

    ``data`` is a ``str`` for STRING, ``bool`` for BOOL, ``int`` for INT64, ``float`` for
    DOUBLE, ``bytes`` for BYTES, and the JSON text (a ``str``) for JSON.
    """

    kind: WireKind
    data: str | bool | int | float | bytes


ValueT = TypeVar("ValueT")


@runtime_checkable
class Codec(Protocol[ValueT]):
    """Encodes values of one type to ``Value`` and back; register one in ``CodecRegistry``.

    Implement it for a type the built-in codecs do not cover, or to choose its wire
    shape. ``type_name`` names the type in errors; ``wire_kind`` is the kind ``encode``
    produces and ``decode`` receives. Encoding must be deterministic (equal values, equal
    ``Value``s). Raise ``TypeError`` or ``ValueError`` on a value that does not fit: the
    SDK reports it as ``ValueMappingError``. Codecs are called from several threads.
    """

    @property
    def type_name(self) -> str:
        """A readable name of the type, for errors."""
        ...

    @property
    def wire_kind(self) -> WireKind:
        """The kind of the ``Value``s this codec produces and accepts."""
        ...

    def encode(self, value: ValueT) -> Value:
        """Encode ``value``."""
        ...

    def decode(self, value: Value) -> ValueT:
        """Decode ``value`` (of kind ``wire_kind``)."""
        ...


class _CodecTypeError(ValueMappingError, TypeError):
    """A value of the wrong type for a codec."""


class _CodecValueError(ValueMappingError, ValueError):
    """A value a codec cannot represent."""


class _CodecOverflowError(ValueMappingError, OverflowError):
    """An integer outside the int64 range."""


class _NoCodecError(FlowDefinitionError, TypeError):
    """No codec for a type hint."""


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_int64(value: Any) -> None:
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise _CodecOverflowError("encode", f"integer {value} exceeds int64")


def _check_double(value: Any) -> None:
    if not math.isfinite(value):
        raise _CodecValueError(
            "encode", f"{value!r} is not a finite float (NaN/Infinity are not JSON)"
        )


@dataclass(frozen=True)
class _PrimitiveCodec(Generic[ValueT]):
    """The codec of one scalar type (``STRING``, ``BOOL``, ``INT64``, ``DOUBLE``, ``BYTES``)."""

    type_name: str
    wire_kind: WireKind
    expected_type: type
    validator: Callable[[Any], None] | None = None

    def _checked(self, value: object) -> Any:
        exact = type(value) is self.expected_type
        if not exact and not (
            isinstance(value, self.expected_type) and not isinstance(value, bool)
        ):
            raise _CodecTypeError(
                "encode",
                f"{self.type_name} requires {self.type_name}, got {type(value).__qualname__}",
            )
        if self.validator is not None:
            self.validator(value)
        return value

    def encode(self, value: ValueT) -> Value:
        """Return ``Value(wire_kind, value)``; ``TypeError`` for another type."""
        return Value(self.wire_kind, self._checked(value))

    def decode(self, value: Value) -> ValueT:
        """Return the data of ``value``; ``TypeError`` for another kind."""
        if value.kind is not self.wire_kind:
            raise _CodecTypeError(
                "decode", f"{self.type_name} cannot decode wire kind {value.kind.value}"
            )
        data: Any = self._checked(value.data)
        return typing.cast(ValueT, data)


STRING: Codec[str] = _PrimitiveCodec("str", WireKind.STRING, str)
"""Codec of ``str`` (wire kind STRING)."""
BOOL: Codec[bool] = _PrimitiveCodec("bool", WireKind.BOOL, bool)
"""Codec of ``bool`` (wire kind BOOL)."""
INT64: Codec[int] = _PrimitiveCodec("int", WireKind.INT64, int, _check_int64)
"""Codec of ``int`` in the int64 range (wire kind INT64); ``OverflowError`` outside it."""
DOUBLE: Codec[float] = _PrimitiveCodec("float", WireKind.DOUBLE, float, _check_double)
"""Codec of finite ``float`` (wire kind DOUBLE); ``ValueError`` for NaN/Infinity."""
BYTES: Codec[bytes] = _PrimitiveCodec("bytes", WireKind.BYTES, bytes)
"""Codec of ``bytes`` (wire kind BYTES; base64 on the wire)."""

_SCALARS: dict[object, Codec[Any]] = {
    str: STRING,
    bool: BOOL,
    int: INT64,
    float: DOUBLE,
    bytes: BYTES,
}


def _identity(value: Any) -> Any:
    return value


def _canonical_json(obj: object, what: str) -> str:
    try:
        builtins = msgspec.to_builtins(obj, order="sorted")
    except TypeError as exc:
        raise _CodecTypeError("encode", f"{what}: {exc}") from exc
    try:
        _check_finite(builtins, "$")
    except ValueMappingError as exc:
        raise _CodecValueError("encode", f"{what}: {exc}") from exc
    return _ENCODER.encode(builtins).decode("utf-8")


def _json_text(value: Value, what: str) -> str:
    if value.kind is not WireKind.JSON:
        raise _CodecTypeError("decode", f"{what} cannot decode wire kind {value.kind.value}")
    data = value.data
    if isinstance(data, bytes):
        return data.decode("utf-8")
    if not isinstance(data, str):
        raise _CodecTypeError(
            "decode", f"{what}: JSON data must be str, got {type(data).__qualname__}"
        )
    return data


@dataclass(frozen=True)
class JsonCodec(Generic[ValueT]):
    """A codec that stores values as canonical JSON, through two plain functions.

    Use it for a type that maps naturally to JSON: ``encoder`` turns a value into
    JSON-compatible data (dicts, lists, strings, numbers, booleans, None; dataclasses
    and msgspec Structs are converted too), ``decoder`` builds the value back.

    Args:
        type_name: a readable name of the type, for errors.
        decoder: JSON data → value.
        encoder: value → JSON data (default: the value itself).
        expected_type: when given, ``encode`` first checks ``isinstance(value, ...)``
            (against the origin of a generic alias) and raises ``TypeError`` otherwise.

    Example::

        MONEY = JsonCodec("Money", lambda d: Money(d["cents"]), lambda m: {"cents": m.cents})
        registry = Registry([flow], CodecRegistry({Money: MONEY}))

    """

    type_name: str
    decoder: Callable[[Any], ValueT]
    encoder: Callable[[ValueT], Any] = _identity
    expected_type: object | None = None
    wire_kind: WireKind = field(default=WireKind.JSON, init=False)

    def encode(self, value: ValueT) -> Value:
        """Return ``Value(JSON, canonical JSON text of encoder(value))``."""
        self._check_type(value)
        return Value(WireKind.JSON, _canonical_json(self.encoder(value), self.type_name))

    def decode(self, value: Value) -> ValueT:
        """Parse the JSON text of ``value`` and return ``decoder(data)``."""
        text = _json_text(value, self.type_name)
        try:
            data = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            raise _CodecValueError("decode", f"{self.type_name}: invalid JSON: {exc}") from exc
        return self.decoder(data)

    def _check_type(self, value: object) -> None:
        expected = self.expected_type
        if expected is None:
            return
        cls = typing.get_origin(expected) or expected
        if isinstance(cls, type) and not isinstance(value, cls):
            raise _CodecTypeError(
                "encode",
                f"{self.type_name} requires {type_name(expected)}, got {type(value).__qualname__}",
            )


class _TypeJsonCodec(JsonCodec[Any]):
    """``CodecRegistry.resolve``'s codec of a non-scalar type: the built-in ``TypeCodec``."""

    def __init__(self, tp: object, wire: WireCodec) -> None:
        origin = typing.get_origin(tp) or tp
        name = getattr(origin, "__name__", None) or type_name(tp)
        super().__init__(name, _identity, expected_type=tp)
        object.__setattr__(self, "_wire", wire)

    _wire: WireCodec

    def encode(self, value: Any) -> Value:
        return Value(WireKind.JSON, self._wire.encode(value).decode("utf-8"))

    def decode(self, value: Value) -> Any:
        return self._wire.decode(_json_text(value, self.type_name).encode("utf-8"))


def _value_to_json(value: Value, codec: object) -> bytes:
    """Canonical JSON bytes of a ``Value`` a codec produced."""
    name = getattr(codec, "type_name", type(codec).__qualname__)
    if not isinstance(value, Value):
        raise ValueMappingError(
            f"codec {name}.encode must return a Value, got {type(value).__qualname__}"
        )
    kind, data = value.kind, value.data
    if kind is WireKind.JSON:
        text = _json_text(value, name)
        try:
            parsed = msgspec.json.decode(text)
        except msgspec.DecodeError as exc:
            raise ValueMappingError("encode", f"codec {name} produced invalid JSON: {exc}") from exc
        return _canonical_json(parsed, name).encode("utf-8")
    scalar = {
        WireKind.STRING: STRING,
        WireKind.BOOL: BOOL,
        WireKind.INT64: INT64,
        WireKind.DOUBLE: DOUBLE,
        WireKind.BYTES: BYTES,
    }[kind]
    if kind is WireKind.DOUBLE and type(data) is int:
        data = float(data)
    typing.cast(_PrimitiveCodec[Any], scalar)._checked(data)
    return _ENCODER.encode(data)


_JSON_TYPES: dict[WireKind, object] = {
    WireKind.STRING: str,
    WireKind.BOOL: bool,
    WireKind.INT64: int,
    WireKind.DOUBLE: float,
    WireKind.BYTES: bytes,
}


def _json_to_value(data: bytes, kind: WireKind, name: str) -> Value:
    """The ``Value`` of kind ``kind`` that canonical JSON bytes carry."""
    if kind is WireKind.JSON:
        return Value(WireKind.JSON, bytes(data).decode("utf-8"))
    try:
        decoded = msgspec.json.decode(data, type=_JSON_TYPES[kind])
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueMappingError("decode", f"value does not match {name}: {exc}") from exc
    return Value(kind, decoded)


class _ValueCodecWire:
    """A registered ``Codec`` seen as a ``WireCodec`` (what the SDK calls internally)."""

    def __init__(self, codec: Codec[Any]) -> None:
        self.codec = codec
        self._name = str(getattr(codec, "type_name", type(codec).__qualname__))
        self._kind = codec.wire_kind

    def encode(self, value: object) -> bytes:
        try:
            encoded = self.codec.encode(value)
        except ValueMappingError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueMappingError(
                "encode", f"codec {self._name} cannot encode {value!r:.80}: {exc}"
            ) from exc
        return _value_to_json(encoded, self.codec)

    def decode(self, data: bytes) -> Any:
        value = _json_to_value(data, self._kind, self._name)
        try:
            return self.codec.decode(value)
        except ValueMappingError:
            raise
        except (TypeError, ValueError, OverflowError, KeyError) as exc:
            raise ValueMappingError(
                "decode", f"codec {self._name} cannot decode {value!r:.80}: {exc}"
            ) from exc

    def __repr__(self) -> str:
        return f"WireCodec({self.codec!r})"


def _is_value_codec(codec: object) -> bool:
    return hasattr(codec, "wire_kind") and callable(getattr(codec, "encode", None))


class CodecRegistry:
    """Custom codecs for chosen types, consulted before the built-in ones.

    Use it when a type is not supported by default (or needs another wire shape). Pass it
    to ``Registry(flows, codec_registry)``; the Registry's Client and Worker then use it
    for every value whose annotation is exactly that type.

    Args:
        codecs: type hint → ``Codec`` (or a ``WireCodec`` working on JSON bytes).

    Raises:
        FlowDefinitionError: a codec has no ``encode``/``decode`` methods.

    Example::

        codecs = CodecRegistry({Money: MONEY})
        codecs.resolve(int)  # INT64

    Thread-safe for lookups; register codecs before building the Registry.
    """

    def __init__(self, codecs: Mapping[object, Codec[Any] | WireCodec] | None = None) -> None:
        self._codecs: dict[object, Codec[Any] | WireCodec] = {}
        self._wire: dict[object, WireCodec] = {}
        for tp, codec in (codecs or {}).items():
            self.register(tp, codec)

    def register(self, tp: object, codec: Codec[Any] | WireCodec) -> CodecRegistry:
        """Use ``codec`` for values declared as exactly ``tp``; returns ``self``."""
        if not (
            callable(getattr(codec, "encode", None)) and callable(getattr(codec, "decode", None))
        ):
            raise FlowDefinitionError(f"{codec!r} has no encode/decode methods")
        self._codecs[tp] = codec
        wire: Any = (
            _ValueCodecWire(typing.cast(Codec[Any], codec)) if _is_value_codec(codec) else codec
        )
        self._wire[tp] = wire
        return self

    def resolve(self, type_hint: object) -> Codec[Any]:
        """Return the ``Codec`` used for ``type_hint``.

        A registered codec first; then ``STRING``, ``BOOL``, ``INT64``, ``DOUBLE``,
        ``BYTES`` for the scalar types; a ``JsonCodec`` of the built-in JSON mapping for
        every other supported type (dataclasses, Structs, pydantic models, containers...).

        Raises:
            FlowDefinitionError: no codec for ``type_hint`` (also a ``TypeError``).

        """
        found = self._lookup(self._codecs, type_hint)
        if found is not None:
            if _is_value_codec(found):
                return typing.cast(Codec[Any], found)
            return _TypeJsonCodec(type_hint, typing.cast(WireCodec, found))
        scalar = self._lookup(_SCALARS, type_hint)
        if scalar is not None:
            return scalar
        try:
            wire = codec_for(type_hint)
        except FlowDefinitionError as exc:
            raise _NoCodecError(
                f"no codec for {type_name(type_hint)}; register one in CodecRegistry ({exc})"
            ) from exc
        return _TypeJsonCodec(type_hint, wire)

    def get(self, tp: object) -> WireCodec:
        """Return the JSON-bytes codec the SDK uses for ``tp``.

        A registered codec (adapted to JSON bytes), else ``codec_for(tp)``.
        """
        found = self._lookup(self._wire, tp)
        return found if found is not None else codec_for(tp)

    @staticmethod
    def _lookup(table: Mapping[object, _T], tp: object) -> _T | None:
        try:
            return table.get(tp)
        except TypeError:  # unhashable annotation
            return None


_T = TypeVar("_T")

CodecLookup = Callable[[object], WireCodec]
