"""Registry: the validated set of Flows a Client or Worker serves."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dex._codec import CodecRegistry, codec_for
from dex._codec import WireCodec as Codec
from dex._flow import Flow, PersistenceSchema, StepList
from dex._options import check_schedule_to_start
from dex._protocol import FlowSpec, RpcSpec, StateDecl, StepOptionsSpec, StepSpec
from dex._rpc import RpcDef, rpc_def, rpc_signature, rpc_spec
from dex._spec import load_spec, lock_list, options_spec
from dex._state import Stream
from dex._state._common import instance_name
from dex._step import Step, handler_kind, has_wait_for, step_input_type
from dex.errors import FlowDefinitionError

__all__ = ["FlowEntry", "Registry", "RpcEntry", "StepEntry", "compile_flow"]


@dataclass(eq=False, kw_only=True)
class StepEntry:
    step: Step[Any]
    step_type: str
    input_type: object
    input_codec: Codec
    has_wait_for: bool
    wait_for_kind: str | None
    execute_kind: str
    spec: StepSpec


@dataclass(eq=False, kw_only=True)
class RpcEntry:
    name: str
    method: Callable[..., Any]
    definition: RpcDef
    has_input: bool
    input_type: object
    output_type: object
    input_codec: Codec | None
    output_codec: Codec
    kind: str
    spec: RpcSpec


@dataclass(eq=False, kw_only=True)
class FlowEntry:
    flow: Flow[Any]
    flow_type: str
    codec: Callable[[object], Codec]
    declared: dict[str, str] = field(default_factory=dict)
    steps: dict[str, StepEntry] = field(default_factory=dict)
    by_class: dict[type, StepEntry | None] = field(default_factory=dict)
    by_id: dict[int, StepEntry] = field(default_factory=dict)
    start: StepEntry | None = None
    rpcs: dict[str, RpcEntry] = field(default_factory=dict)
    spec: FlowSpec | None = None  # set once compiled
    has_async: bool = False
    schedule_to_start_s: float | None = None  # the Flow's default for its Steps' options

    def resolve(self, step: object) -> StepEntry | None:
        """Return the entry of a Step class or instance of this Flow, else None."""
        if isinstance(step, type):
            return self.by_class.get(step)
        found = self.by_id.get(id(step))
        if found is None and isinstance(step, Step):
            return self.steps.get(step.get_step_type())
        return found


def _declare(entry: FlowEntry, schema: PersistenceSchema, flow_type: str) -> list[StateDecl]:
    if not isinstance(schema, PersistenceSchema):
        raise FlowDefinitionError(
            f"Flow {flow_type}: get_persistence_schema() must return a PersistenceSchema"
        )
    decls = []
    for d in schema.declarations:
        entry.declared[d.name] = d.kind
        try:
            entry.codec(d.value_type)
        except FlowDefinitionError as exc:
            raise FlowDefinitionError(f"Flow {flow_type}, state {d.name!r}: {exc}") from exc
        cap = d.stream_capacity_bytes if isinstance(d, Stream) else None
        index = getattr(d, "index", None)
        decl = StateDecl(name=d.name, kind=d.kind, stream_capacity_bytes=cap)  # type: ignore[arg-type]
        if index is not None:
            if d.kind == "attribute_map" and not index.index_key:
                raise FlowDefinitionError(
                    f"Flow {flow_type}, AttributeMap {d.name!r}: an indexed map needs an"
                    " explicit index_key"
                )
            decl.index_type = index.type.value
            decl.index_key = index.index_key or d.name
        decls.append(decl)
    return decls


def _check_kind(kind: str, where: str, allow_async: bool) -> None:
    if kind == "async_generator":
        raise FlowDefinitionError(f"{where}: async generator handlers are not supported")
    if kind == "async" and not allow_async:
        raise FlowDefinitionError(
            f"{where} is async: build the Registry with allow_async_handlers=True"
        )


def _add_step(entry: FlowEntry, step: Step[Any], allow_async: bool) -> StepEntry:
    step_type = step.get_step_type()
    where = f"Flow {entry.flow_type}, Step {step_type}"
    if not isinstance(step_type, str) or not step_type or step_type.startswith("__"):
        raise FlowDefinitionError(f"{where}: invalid Step type {step_type!r}")
    if step_type in entry.steps:
        raise FlowDefinitionError(f"Flow {entry.flow_type}: Step type {step_type!r} appears twice")
    if type(step).execute is Step.execute:
        raise FlowDefinitionError(f"{where}: execute() is not overridden")
    execute_kind = handler_kind(type(step).execute)
    _check_kind(execute_kind, f"{where}.execute", allow_async)
    wait_for_kind = None
    if has_wait_for(step):
        wait_for_kind = handler_kind(type(step).wait_for)
        _check_kind(wait_for_kind, f"{where}.wait_for", allow_async)
    input_type = step_input_type(step)
    try:
        input_codec = entry.codec(input_type)
    except FlowDefinitionError as exc:
        raise FlowDefinitionError(f"{where} input: {exc}") from exc
    se = StepEntry(
        step=step,
        step_type=step_type,
        input_type=input_type,
        input_codec=input_codec,
        has_wait_for=wait_for_kind is not None,
        wait_for_kind=wait_for_kind,
        execute_kind=execute_kind,
        spec=StepSpec(step_type=step_type),
    )
    entry.has_async |= "async" in (execute_kind, wait_for_kind)
    entry.steps[step_type] = se
    entry.by_id[id(step)] = se
    cls = type(step)
    entry.by_class[cls] = None if cls in entry.by_class else se  # None: ambiguous class
    return se


def _add_rpcs(entry: FlowEntry, allow_async: bool) -> list[RpcSpec]:
    flow = entry.flow
    seen_attrs: set[str] = set()
    specs = []
    for klass in type(flow).__mro__:
        for attr, value in vars(klass).items():
            if attr in seen_attrs:
                continue
            seen_attrs.add(attr)
            d = rpc_def(value)
            if d is None:
                continue
            where = f"RPC {entry.flow_type}.{attr}"
            kind = handler_kind(value)
            _check_kind(kind, where, allow_async)
            has_input, input_type, output_type = rpc_signature(type(flow), attr, value)
            name = d.name or attr
            if name in entry.rpcs:
                raise FlowDefinitionError(f"Flow {entry.flow_type}: RPC name {name!r} used twice")
            try:
                input_codec = entry.codec(input_type) if has_input else None
                output_codec = entry.codec(output_type)
            except FlowDefinitionError as exc:
                raise FlowDefinitionError(f"{where}: {exc}") from exc
            spec = rpc_spec(name, d, has_input)
            lock_list(d.lock_attributes, entry, where)
            load_spec(
                entry,
                where,
                d.load_attribute_maps,
                d.load_attribute_map_instances,
                d.load_channels,
                d.load_channel_maps,
                d.load_channel_map_instances,
            )
            if d.timeout_s <= 0:
                raise FlowDefinitionError(f"{where}: timeout must be positive")
            entry.rpcs[name] = RpcEntry(
                name=name,
                method=getattr(flow, attr),
                definition=d,
                has_input=has_input,
                input_type=input_type,
                output_type=output_type,
                input_codec=input_codec,
                output_codec=output_codec,
                kind=kind,
                spec=spec,
            )
            entry.has_async |= kind == "async"
            specs.append(spec)
    return specs


def compile_flow(flow: Flow[Any], codecs: CodecRegistry | None, *, allow_async: bool) -> FlowEntry:
    """Validate one Flow and build its entry (with its ``FlowSpec``).

    Raises:
        FlowDefinitionError: with a message naming the Flow and the problem.

    """
    if not isinstance(flow, Flow):
        raise FlowDefinitionError(f"not a Flow instance: {flow!r}")
    flow_type = flow.get_flow_type()
    if not isinstance(flow_type, str) or not flow_type or "/" in flow_type:
        raise FlowDefinitionError(f"invalid Flow type {flow_type!r} of {flow!r}")
    entry = FlowEntry(
        flow=flow, flow_type=flow_type, codec=codecs.get if codecs is not None else codec_for
    )
    try:
        entry.schedule_to_start_s = check_schedule_to_start(
            f"Flow {flow_type}", flow.get_schedule_to_start_timeout()
        )
    except (ValueError, TypeError) as exc:
        raise FlowDefinitionError(str(exc)) from exc
    state = _declare(entry, flow.get_persistence_schema(), flow_type)
    steps = flow.get_steps()
    if not isinstance(steps, StepList):
        raise FlowDefinitionError(f"Flow {flow_type}: get_steps() must return a StepList")
    for definition in steps:
        se = _add_step(entry, definition.step, allow_async)
        if definition.is_start_step:
            if entry.start is not None:
                raise FlowDefinitionError(f"Flow {flow_type}: more than one start Step")
            entry.start = se
    for se in entry.steps.values():
        options = se.step.get_step_options()
        where = f"Flow {flow_type}, Step {se.step_type} options"
        opts = (
            options_spec(options, entry, where)
            if options is not None
            else StepOptionsSpec(schedule_to_start_timeout_s=entry.schedule_to_start_s)
        )
        se.spec = StepSpec(step_type=se.step_type, has_wait_for=se.has_wait_for, options=opts)
    rpcs = _add_rpcs(entry, allow_async)
    entry.spec = FlowSpec(
        flow_type=flow_type,
        start_step=entry.start.step_type if entry.start else None,
        steps=[se.spec for se in entry.steps.values()],
        rpcs=rpcs,
        state=state,
        has_timeout_handler=type(flow).handle_timeout is not Flow.handle_timeout,
    )
    return entry


class Registry:
    """The Flows a Worker serves and a Client calls, validated once at construction.

    Args:
        flows: Flow instances; Flow types must be unique. Client calls take these instances.
        codec_registry: custom codecs consulted before the built-in ones.
        allow_async_handlers: allow ``async def`` Step methods and RPCs (they need an
            ``AsyncWorker``). Default False.

    Raises:
        FlowDefinitionError: any Flow, Step, RPC, schema, lock, load or type is invalid
            (the message says which and why).

    A Registry is immutable and safe to share between threads, Clients and Workers.

    """

    def __init__(
        self,
        flows: Iterable[Flow[Any]],
        codec_registry: CodecRegistry | None = None,
        *,
        allow_async_handlers: bool = False,
    ) -> None:
        self._codecs = codec_registry
        self._codec_registry = codec_registry if codec_registry is not None else CodecRegistry()
        self._allow_async = allow_async_handlers
        self._entries: dict[str, FlowEntry] = {}
        for flow in flows:
            entry = compile_flow(flow, codec_registry, allow_async=allow_async_handlers)
            if entry.flow_type in self._entries:
                raise FlowDefinitionError(f"Flow type {entry.flow_type!r} is registered twice")
            self._entries[entry.flow_type] = entry
        self._specs = [e.spec for e in self._entries.values() if e.spec is not None]

    @property
    def flows(self) -> tuple[Flow[Any], ...]:
        """The registered Flow instances, in registration order."""
        return tuple(e.flow for e in self._entries.values())

    @property
    def codec_registry(self) -> CodecRegistry:
        """The custom codecs this Registry consults first (an empty one when none was given)."""
        return self._codec_registry

    @staticmethod
    def physical_name(name: str, instance: str) -> str:
        """Return the stored name of one AttributeMap or ChannelMap instance.

        That is the map's ``name``, ``/``, then the URL-quoted ``instance`` key: the name
        the server, history and state reads show for ``amap.load(instance)`` and the like.
        """
        return instance_name(name, instance)

    @property
    def has_async_handlers(self) -> bool:
        """Whether any Step method or RPC is ``async def`` (needs an AsyncWorker)."""
        return any(e.has_async for e in self._entries.values())

    @property
    def allow_async_handlers(self) -> bool:
        """The ``allow_async_handlers`` flag this Registry was built with."""
        return self._allow_async

    def get_flow(self, flow_type: str) -> Flow[Any]:
        """Return the registered Flow instance of ``flow_type``.

        Raises:
            KeyError: no such Flow type is registered.

        """
        return self._entries[flow_type].flow

    def flow_specs(self) -> list[FlowSpec]:
        """Return the ``FlowSpec`` of every registered Flow (what a Worker registers)."""
        return list(self._specs)

    def codec_for(self, tp: object) -> Codec:
        """Return the codec this Registry uses for a type (custom first, then built-in)."""
        return self._codecs.get(tp) if self._codecs is not None else codec_for(tp)

    def start_input_type(self, flow: Flow[Any]) -> object:
        """Return the start input type of a registered Flow (its start Step's input; else None).

        Raises:
            KeyError: the Flow's type is not registered.

        """
        start = self._entries[flow.get_flow_type()].start
        return start.input_type if start is not None else type(None)

    def flow_entry(self, flow_type: str) -> FlowEntry:
        """Return internal: the compiled entry of a Flow type (KeyError when unknown)."""
        return self._entries[flow_type]
