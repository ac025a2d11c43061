"""Codecs: typed Python values to canonical JSON bytes and back.

Canonical JSON means sorted object keys, compact separators and no NaN/Infinity, so equal
values always produce equal bytes (the server compares and deduplicates them as opaque
bytes). msgspec handles primitives, ``None``, dataclasses, msgspec Structs, enums,
datetimes and containers; types that mention a pydantic ``BaseModel`` go through a pydantic
``TypeAdapter`` instead.
"""

from __future__ import annotations

import math
import sys
import threading
import typing
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import msgspec
import msgspec.inspect as mi

from dex.errors import FlowDefinitionError, ValueMappingError

__all__ = ["Codec", "CodecRegistry", "TypeCodec", "codec_for", "type_name"]

_ENCODER = msgspec.json.Encoder(order="sorted")
_NULL = b"null"


@runtime_checkable
class Codec(Protocol):
    """Converts values of one declared type to canonical JSON bytes and back.

    A custom codec must be deterministic: equal values must give equal bytes.
    ``encode`` and ``decode`` raise ``ValueMappingError`` on a value that does not match.
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
            if self._may_hold_float:
                builtins = msgspec.to_builtins(value, order="sorted")
                _check_finite(builtins, "$")
                data = _ENCODER.encode(builtins)
            else:
                data = _ENCODER.encode(value)
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


class CodecRegistry:
    """Custom codecs for chosen types, consulted before the built-in ones.

    Use it when a type is not supported by default (or needs another JSON shape). Pass it to
    ``Registry(flows, codec_registry=...)``; the Registry's Client and Worker use it for every
    value of that exact type annotation.

    Example::

        codecs = CodecRegistry()
        codecs.register(Money, MoneyCodec())
    """

    def __init__(self) -> None:
        self._codecs: dict[object, Codec] = {}

    def register(self, tp: object, codec: Codec) -> CodecRegistry:
        """Use ``codec`` for values declared as exactly ``tp``; returns ``self``."""
        if not isinstance(codec, Codec):
            raise FlowDefinitionError(f"{codec!r} has no encode/decode methods")
        self._codecs[tp] = codec
        return self

    def get(self, tp: object) -> Codec:
        """Return the codec for ``tp``: a registered one, else ``codec_for(tp)``."""
        try:
            found = self._codecs.get(tp)
        except TypeError:
            found = None
        return found if found is not None else codec_for(tp)


CodecLookup = Callable[[object], Codec]
