"""RPCs: ``@rpc`` methods of a Flow, their results, and how a Client finds them."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from dex._protocol import LoadSpec, RpcSpec
from dex._state import AttributeMap, Channel, ChannelLoad, ChannelMap, InstanceLoad, LockKey
from dex.errors import FlowDefinitionError

if TYPE_CHECKING:
    from dex._decisions import StepMovement
    from dex._flow import Flow
    from dex._step import Step

__all__ = ["RPCResult", "BoundRpc", "rpc", "rpc_info"]

O = TypeVar("O")  # noqa: E741
F = TypeVar("F", bound=Callable[..., Any])

_ATTR = "__dex_rpc__"


@dataclass(frozen=True, slots=True)
class RPCResult(Generic[O]):
    """An RPC's output plus Steps to schedule and Step types to cancel.

    Attributes:
        output: the value returned to the caller (encoded with the RPC's output type).
        next_steps: movements scheduled with ``from_step_execution_id="__rpc/<name>"``.
        canceling_steps: Step classes whose live executions are cancelled.

    """

    output: O | None = None
    next_steps: tuple[StepMovement[Any], ...] = ()
    canceling_steps: tuple[type[Step[Any]] | Step[Any], ...] = ()

    def with_canceling_steps(self, *steps: type[Step[Any]] | Step[Any]) -> RPCResult[O]:
        """Return a copy that also cancels the live executions of these Step types."""
        return replace(self, canceling_steps=self.canceling_steps + steps)


@dataclass(frozen=True, kw_only=True, slots=True)
class RpcDef:
    """What ``@rpc`` recorded on the function."""

    name: str | None
    timeout_s: float
    lock_attributes: tuple[LockKey, ...]
    is_transactional: bool
    load_attribute_maps: tuple[AttributeMap[Any], ...]
    load_attribute_map_instances: tuple[InstanceLoad, ...]
    load_channels: tuple[Channel[Any] | ChannelLoad, ...]
    load_channel_maps: tuple[ChannelMap[Any], ...]
    load_channel_map_instances: tuple[InstanceLoad, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class BoundRpc:
    """An ``@rpc`` method of one Flow instance, as a Client sees it."""

    flow: Flow[Any]
    name: str
    input_type: object | None  # None: the RPC takes no input
    output_type: object | None  # None: returns nothing
    spec: RpcSpec
    method: Callable[..., Any]


_DEFAULT_TIMEOUT_S = 60.0


@overload
def rpc(handler: F) -> F: ...
@overload
def rpc(
    handler: None = None,
    *,
    name: str | None = None,
    timeout: timedelta | float | None = None,
    lock_attributes: Sequence[LockKey] = (),
    is_transactional: bool = False,
    load_attribute_maps: Sequence[AttributeMap[Any]] = (),
    load_attribute_map_instances: Sequence[InstanceLoad] = (),
    load_channels: Sequence[Channel[Any] | ChannelLoad] = (),
    load_channel_maps: Sequence[ChannelMap[Any]] = (),
    load_channel_map_instances: Sequence[InstanceLoad] = (),
) -> Callable[[F], F]: ...
def rpc(
    handler: Any = None,
    *,
    name: str | None = None,
    timeout: timedelta | float | None = None,
    lock_attributes: Sequence[LockKey] = (),
    is_transactional: bool = False,
    load_attribute_maps: Sequence[AttributeMap[Any]] = (),
    load_attribute_map_instances: Sequence[InstanceLoad] = (),
    load_channels: Sequence[Channel[Any] | ChannelLoad] = (),
    load_channel_maps: Sequence[ChannelMap[Any]] = (),
    load_channel_map_instances: Sequence[InstanceLoad] = (),
) -> Any:
    """Mark a Flow method as an RPC: ``(self, context[, input: T]) -> RPCResult[O] | O | None``.

    Use ``@rpc`` or ``@rpc(...)``; the handler may be sync or ``async def``. It sees every
    Attribute and Channel size plus the loads it declares; it may write Attributes, publish
    and delete Channel messages, schedule and cancel Steps, and record events. It cannot
    heartbeat or write Streams. Call it with ``client.invoke_rpc(flow.method, flow_id, input)``.

    Args:
        handler: the method, when used as bare ``@rpc`` (or ``rpc(handler=fn)``).
        name: RPC name (default: the method name).
        timeout: per-invocation timeout, a ``timedelta`` or seconds (None, the default:
            60 s).
        lock_attributes: lock keys; any lock makes the RPC transactional, and a held key
            fails the call at once with ``RpcLockConflictError``.
        is_transactional: snapshot, handler and commit are atomic (needs a running Flow).
        load_attribute_maps: AttributeMaps loaded whole.
        load_attribute_map_instances: single instances (``amap.load(key)``).
        load_channels: Channels whose pending messages are loaded.
        load_channel_maps: ChannelMaps whose pending messages are loaded.
        load_channel_map_instances: single ChannelMap instances (``cmap.load(key)``).

    """
    if timeout is None:
        t = _DEFAULT_TIMEOUT_S
    elif isinstance(timeout, timedelta):
        t = timeout.total_seconds()
    else:
        t = float(timeout)
    definition = RpcDef(
        name=name,
        timeout_s=t,
        lock_attributes=tuple(lock_attributes),
        is_transactional=is_transactional,
        load_attribute_maps=tuple(load_attribute_maps),
        load_attribute_map_instances=tuple(load_attribute_map_instances),
        load_channels=tuple(load_channels),
        load_channel_maps=tuple(load_channel_maps),
        load_channel_map_instances=tuple(load_channel_map_instances),
    )

    def mark(f: F) -> F:
        if not callable(f):
            raise FlowDefinitionError(f"@rpc needs a function, got {f!r}")
        setattr(f, _ATTR, definition)
        return f

    return mark(handler) if handler is not None else mark


def rpc_def(obj: object) -> RpcDef | None:
    """Return the ``@rpc`` definition of a function or bound method, else None."""
    fn = getattr(obj, "__func__", obj)
    d = getattr(fn, _ATTR, None)
    return d if isinstance(d, RpcDef) else None


def rpc_signature(flow_cls: type, attr: str, fn: Callable[..., Any]) -> tuple[bool, object, object]:
    """``(has_input, input_type, output_type)`` of an RPC function.

    Raises:
        FlowDefinitionError: wrong parameters, or annotations that cannot be resolved.

    """
    where = f"RPC {flow_cls.__name__}.{attr}"
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    extra = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(params) not in (2, 3) or extra:
        raise FlowDefinitionError(f"{where} must have the signature (self, context[, input])")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise FlowDefinitionError(
            f"{where}: cannot resolve its annotations ({exc}); define the types at module level"
        ) from exc
    has_input = len(params) == 3
    input_type: object = hints.get(params[2].name, Any) if has_input else None
    output_type: object = hints.get("return", Any)
    return has_input, input_type, _unwrap_result(output_type)


def _unwrap_result(tp: object) -> object:
    """``RPCResult[O]`` → ``O``; ``RPCResult[O] | None`` → ``O | None``; bare RPCResult → Any."""
    if tp is RPCResult:
        return Any
    if typing.get_origin(tp) is RPCResult:
        return typing.get_args(tp)[0]
    args = typing.get_args(tp)
    if args and type(None) in args and typing.get_origin(tp) in (typing.Union, type(int | None)):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and (inner[0] is RPCResult or typing.get_origin(inner[0]) is RPCResult):
            return _unwrap_result(inner[0]) | None  # type: ignore[operator]
    return tp


def rpc_spec(name: str, d: RpcDef, has_input: bool) -> RpcSpec:
    """Return the wire form of an RPC definition."""
    return RpcSpec(
        name=name,
        is_transactional=d.is_transactional or bool(d.lock_attributes),
        locks=[k.physical for k in d.lock_attributes],
        loads=LoadSpec(
            attribute_maps=[m.name for m in d.load_attribute_maps],
            attribute_map_instances=[i.physical for i in d.load_attribute_map_instances],
            channels=[c.name for c in d.load_channels],
            channel_maps=[m.name for m in d.load_channel_maps],
            channel_map_instances=[i.physical for i in d.load_channel_map_instances],
        ),
        timeout_s=d.timeout_s,
        has_input=has_input,
    )


def rpc_info(obj: object) -> BoundRpc:
    """Return the ``BoundRpc`` of ``flow.method`` (an ``@rpc`` method accessed on a Flow instance).

    Raises:
        FlowDefinitionError: ``obj`` is not an ``@rpc`` method of a Flow instance.

    """
    from dex._flow import Flow

    d = rpc_def(obj)
    flow = getattr(obj, "__self__", None)
    if d is None or not isinstance(flow, Flow):
        raise FlowDefinitionError(f"{obj!r} is not an @rpc method accessed on a Flow instance")
    fn: Callable[..., Any] = obj.__func__  # type: ignore[attr-defined]
    key = (type(flow), fn)
    # Clients call this on every invoke_rpc; resolving the annotations is most of its cost
    # and depends only on the class and the function.
    known = _BOUND.get(key)
    if known is None:
        has_input, input_type, output_type = rpc_signature(type(flow), fn.__name__, fn)
        name = d.name or fn.__name__
        known = (name, input_type if has_input else None, output_type, rpc_spec(name, d, has_input))
        if len(_BOUND) < _BOUND_MAX:
            _BOUND[key] = known
    name, input_type, output_type, spec = known
    return BoundRpc(
        flow=flow,
        name=name,
        input_type=input_type,
        output_type=output_type,
        spec=spec,
        method=obj,  # type: ignore[arg-type]
    )


# (Flow class, function) -> what rpc_info derives from them; bounded for classes made at runtime
_BOUND: dict[tuple[type, Callable[..., Any]], tuple[str, object, object, RpcSpec]] = {}
_BOUND_MAX = 4096
