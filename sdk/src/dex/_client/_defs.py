"""What the Client needs from definitions: specs, codecs, physical names, Stream owners."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from msgspec import Raw

from dex._codec import WireCodec as Codec
from dex._codec import codec_for
from dex._flow import Flow
from dex._protocol import MAX_FLOW_ID_BYTES, ErrorCode, FlowSpec
from dex._registry import FlowEntry, Registry
from dex._rpc import rpc_info
from dex._spec import flow_spec as _flow_spec
from dex._state._common import instance_name
from dex.errors import FlowDefinitionError, error_from_code

__all__ = [
    "RpcCall",
    "StreamTarget",
    "check_flow_id",
    "encode_initial_attributes",
    "encode_start_input",
    "flow_segment",
    "flow_spec",
    "map_instance_name",
    "registered_flow",
    "quote_segment",
    "rpc_call_info",
    "stream_target",
]


def quote_segment(value: str) -> str:
    """Quote one URL path segment (Flow IDs may hold any character).

    Every reserved character is percent-encoded, ``.`` too: an HTTP client would otherwise
    resolve a ``.`` or ``..`` segment away and address another path.
    """
    return quote(value, safe="").replace(".", "%2E")


def check_flow_id(flow_id: str) -> str:
    """Return ``flow_id`` if a Flow can have it; raise the error the server would give.

    Raises:
        BadRequestError: ``flow_id`` is empty (without this check a request naming it in
            the path would hit another route and fail with an unrelated HTTP status).
        LimitExceededError: ``flow_id`` is longer than ``MAX_FLOW_ID_BYTES`` (1,024) UTF-8
            bytes.

    """
    if not flow_id:
        raise error_from_code(ErrorCode.BAD_REQUEST, "flow_id must not be empty")
    size = len(flow_id.encode("utf-8", "surrogatepass"))
    if size > MAX_FLOW_ID_BYTES:
        raise error_from_code(
            ErrorCode.LIMIT_EXCEEDED,
            f"flow_id is {size} bytes, over the limit max_flow_id_bytes={MAX_FLOW_ID_BYTES}",
            flow_id=flow_id,
        )
    return flow_id


def flow_segment(flow_id: str) -> str:
    """Quote a Flow ID as a URL path segment, refusing IDs no Flow can have.

    Raises:
        BadRequestError: ``flow_id`` is empty.
        LimitExceededError: ``flow_id`` is longer than 1,024 UTF-8 bytes.

    """
    return quote_segment(check_flow_id(flow_id))


def _codec(registry: Registry | None, tp: object) -> Codec:
    return registry.codec_for(tp) if registry is not None else codec_for(tp)


def registered_flow(registry: Registry, flow: Flow[Any]) -> FlowEntry:
    """Return the compiled entry of ``flow``, which must be the instance ``registry`` holds.

    Raises:
        FlowDefinitionError: the Flow's type is not registered, or ``flow`` is another
            instance of it than the registered one.

    """
    flow_type = flow.get_flow_type()
    try:
        entry = registry.flow_entry(flow_type)
    except KeyError:
        raise FlowDefinitionError(f"Flow is not registered: {flow_type}") from None
    if entry.flow is not flow:
        raise FlowDefinitionError(
            f"Flow instance is not registered: {flow_type} (pass the instance the Registry holds)"
        )
    return entry


def flow_spec(registry: Registry, flow: Flow[Any]) -> FlowSpec:
    """Return the wire spec of a registered Flow instance.

    Raises:
        FlowDefinitionError: ``flow`` is not the registered instance of its type.

    """
    return registered_flow(registry, flow).spec or _flow_spec(flow)


def encode_start_input(registry: Registry, flow: Flow[Any], value: Any) -> Raw | None:
    """Encode the start input with the start Step's codec (None without a start Step).

    Raises:
        ValueMappingError: the value does not match the start Step's input type.
        FlowDefinitionError: the Flow has no start Step but an input was given.

    """
    input_type = registry.start_input_type(flow)
    if input_type is type(None):
        if value is not None:
            raise FlowDefinitionError(
                f"Flow {flow.get_flow_type()!r} has no start Step; start it with input=None"
            )
        return None
    return Raw(_codec(registry, input_type).encode(value))


def encode_initial_attributes(registry: Registry, items: Iterable[Any]) -> list[tuple[str, Raw]]:
    """``(physical name, encoded value)`` of each ``StartFlowOptions`` initial value."""
    out: list[tuple[str, Raw]] = []
    for item in items:
        handle = item.attribute
        name = handle.name if item.key is None else instance_name(handle.name, item.key)
        out.append((name, Raw(_codec(registry, handle.value_type).encode(item.value))))
    return out


def map_instance_name(item: Any) -> str:
    """Physical name of one map instance: ``amap.lock(k)``, ``amap.load(k)``, or ``(map, k)``.

    Raises:
        TypeError: ``item`` is none of these.

    """
    physical = getattr(item, "physical", None)
    if isinstance(physical, str):
        return physical
    if isinstance(item, tuple) and len(item) == 2:
        return instance_name(item[0].name, item[1])
    raise TypeError(
        f"expected a map instance (amap.lock(key), amap.load(key) or (map, key)), got {item!r}"
    )


@dataclass(frozen=True, slots=True)
class RpcCall:
    name: str
    timeout_s: float
    input_codec: Codec | None
    output_codec: Codec | None

    def encode_input(self, value: Any) -> Raw | None:
        if self.input_codec is None:
            if value is not None:
                raise FlowDefinitionError(f"RPC {self.name!r} takes no input")
            return None
        if value is None:
            # None travels as JSON null for any input type: the Worker's decoder decides
            # whether the RPC accepts it (the handler's error comes back to the caller).
            return Raw(b"null")
        return Raw(self.input_codec.encode(value))

    def decode_output(self, data: Raw | None) -> Any:
        if self.output_codec is None or data is None:
            return None
        return self.output_codec.decode(bytes(data))


def rpc_call_info(registry: Registry, bound_rpc: Any) -> RpcCall:
    """Name, timeout and codecs of ``flow.method`` for ``invoke_rpc``.

    Raises:
        FlowDefinitionError: ``bound_rpc`` is not an ``@rpc`` method of the Flow instance
            ``registry`` holds.

    """
    info = rpc_info(bound_rpc)
    flow_type = info.flow.get_flow_type()
    try:
        registered = registry.flow_entry(flow_type).flow
    except KeyError:
        registered = None
    if registered is not info.flow:
        raise FlowDefinitionError(
            f"RPC method is not registered: {flow_type}.{info.name} (call it on the Flow "
            "instance the Registry holds)"
        )
    return RpcCall(
        name=info.name,
        timeout_s=info.spec.timeout_s,
        input_codec=None if info.input_type is None else _codec(registry, info.input_type),
        output_codec=None if info.output_type is None else _codec(registry, info.output_type),
    )


@dataclass(frozen=True, slots=True)
class StreamTarget:
    flow_type: str
    name: str
    codec: Codec

    def path(self, flow_id: str) -> str:
        return (
            f"/v1/streams/{quote_segment(self.flow_type)}/{quote_segment(self.name)}/"
            f"{flow_segment(flow_id)}"
        )

    def encode(self, value: Any) -> Raw:
        return Raw(self.codec.encode(value))

    def decode(self, data: Raw) -> Any:
        return self.codec.decode(bytes(data))


def stream_target(registry: Registry, stream: Any) -> StreamTarget:
    """Find the Flow type that declares ``stream`` in ``registry``.

    Raises:
        FlowDefinitionError: no registered Flow, or more than one, declares the Stream.

    """
    owners: list[str] = []
    for flow in registry.flows:
        for decl in flow.get_persistence_schema().declarations:
            if decl is stream:
                owners.append(flow.get_flow_type())
    if len(owners) != 1:
        where = "no registered Flow" if not owners else f"several Flows ({', '.join(owners)})"
        raise FlowDefinitionError(
            f"Stream {getattr(stream, 'name', stream)!r} is declared by {where}; "
            "the Client needs exactly one owner to address it"
        )
    return StreamTarget(
        flow_type=owners[0], name=stream.name, codec=_codec(registry, stream.value_type)
    )
