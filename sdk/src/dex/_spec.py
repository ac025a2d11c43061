"""Conversion of definitions (options, Waits, decisions, Flows) to their wire specs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from msgspec import Raw

from dex._codec import ANY_CODEC
from dex._decisions import DecisionKind, StepDecision
from dex._options import RetryPolicy, StepOptions, WaitForFailurePolicy, seconds
from dex._protocol import (
    ConditionSpec,
    DecisionSpec,
    FlowSpec,
    LoadSpec,
    Movement,
    RetryPolicySpec,
    StepOptionsSpec,
    WaitSpec,
)
from dex._waits import ChannelCondition, Wait
from dex.errors import FlowDefinitionError, InvalidStepResultError

if TYPE_CHECKING:
    from collections.abc import Callable

    from dex._decisions import StepDecision, StepMovement
    from dex._flow import Flow
    from dex._registry import FlowEntry
    from dex._state import LockKey
    from dex._waits import SubFlowCondition

__all__ = ["decision_spec", "flow_spec", "movement_wire", "options_spec", "wait_spec"]

_DEFAULT_RETRY = RetryPolicySpec()
_DEFAULTS = StepOptionsSpec()


def flow_spec(flow: Flow[Any]) -> FlowSpec:
    """Return the ``FlowSpec`` of a Flow (validated as a Registry would, async handlers allowed).

    Raises:
        FlowDefinitionError: the Flow is invalid.

    """
    from dex._registry import compile_flow

    spec = compile_flow(flow, None, allow_async=True).spec
    assert spec is not None
    return spec


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def retry_spec(p: RetryPolicy | None) -> RetryPolicySpec:
    """Wire form of a RetryPolicy; None, and zero/None values, take the defaults."""
    d = _DEFAULT_RETRY
    if p is None:
        return d
    return RetryPolicySpec(
        initial_interval_s=seconds(p.initial_interval) or d.initial_interval_s,
        backoff_coefficient=p.backoff_coefficient or d.backoff_coefficient,
        maximum_interval_s=seconds(p.maximum_interval) or d.maximum_interval_s,
        maximum_attempts=p.maximum_attempts or None,
        total_duration_s=seconds(p.total_duration) or d.total_duration_s,
    )


def _check_locks(locks: tuple[LockKey, ...], entry: FlowEntry, where: str) -> list[str]:
    if not locks:
        return []
    out = []
    for k in locks:
        if entry.declared.get(getattr(k, "name", None) or "") != getattr(k, "kind", None):
            raise FlowDefinitionError(
                f"{where}: lock {k!r} does not name a declared Attribute or AttributeMap"
            )
        out.append(k.physical)
    return out


def _names(
    items: tuple[Any, ...], kinds: tuple[str, ...], entry: FlowEntry, what: str
) -> list[str]:
    if not items:
        return []
    out = []
    for item in items:
        name = getattr(item, "name", None)
        if not isinstance(name, str) or entry.declared.get(name) not in kinds:
            raise FlowDefinitionError(f"{what}: {item!r} is not a declared {' or '.join(kinds)}")
        out.append(getattr(item, "physical", name) if hasattr(item, "key") else name)
    return out


def load_spec(
    entry: FlowEntry,
    where: str,
    maps: tuple[Any, ...],
    map_instances: tuple[Any, ...],
    channels: tuple[Any, ...],
    channel_maps: tuple[Any, ...],
    channel_map_instances: tuple[Any, ...],
) -> LoadSpec:
    """Return a validated ``LoadSpec``."""
    if not (maps or map_instances or channels or channel_maps or channel_map_instances):
        return LoadSpec()
    return LoadSpec(
        attribute_maps=_names(maps, ("attribute_map",), entry, f"{where} load_attribute_maps"),
        attribute_map_instances=_names(
            map_instances, ("attribute_map",), entry, f"{where} load_attribute_map_instances"
        ),
        channels=_names(channels, ("channel",), entry, f"{where} load_channels"),
        channel_maps=_names(channel_maps, ("channel_map",), entry, f"{where} load_channel_maps"),
        channel_map_instances=_names(
            channel_map_instances, ("channel_map",), entry, f"{where} load_channel_map_instances"
        ),
    )


def _load_spec_once(
    entry: FlowEntry,
    where: str,
    fields: tuple[tuple[Any, ...], ...],
    seen: dict[tuple[int, ...], LoadSpec],
) -> LoadSpec:
    # keyed by the tuples' identity: they live as long as the options being converted
    key = tuple(map(id, fields))
    spec = seen.get(key)
    if spec is None:
        spec = seen[key] = load_spec(entry, where, *fields)
    return spec


def lock_list(locks: tuple[LockKey, ...], entry: FlowEntry, where: str) -> list[str]:
    """Return validated physical lock names."""
    return _check_locks(locks, entry, where)


def options_spec(
    o: StepOptions,
    entry: FlowEntry,
    where: str,
    _loads: dict[tuple[int, ...], LoadSpec] | None = None,
) -> StepOptionsSpec:
    """Wire form of StepOptions, validated against the Flow.

    Raises:
        FlowDefinitionError: a lock, load or failure route names something undeclared.

    """
    # the same load tuples (both methods', the failure options') are checked once
    loads = {} if _loads is None else _loads
    if not isinstance(o, StepOptions):
        raise FlowDefinitionError(f"{where}: options must be StepOptions, got {o!r}")
    failure_step = None
    failure_options = None
    if o.execute_failure_step is not None:
        target = entry.resolve(o.execute_failure_step)
        if target is None:
            raise FlowDefinitionError(
                f"{where}: failure route {o.execute_failure_step!r} is not a Step of Flow "
                f"{entry.flow_type!r}"
            )
        failure_step = target.step_type
        if o.execute_failure_options is not None:
            failure_options = options_spec(o.execute_failure_options, entry, where, loads)
    return StepOptionsSpec(
        wait_for_timeout_s=_or(seconds(o.wait_for_method_timeout), _DEFAULTS.wait_for_timeout_s),
        execute_timeout_s=_or(seconds(o.execute_method_timeout), _DEFAULTS.execute_timeout_s),
        heartbeat_timeout_s=seconds(o.heartbeat_timeout),
        schedule_to_start_timeout_s=(
            seconds(o.schedule_to_start_timeout)
            if o.schedule_to_start_timeout is not None
            else entry.schedule_to_start_s
        ),
        wait_for_retry=retry_spec(o.wait_for_retry),
        execute_retry=retry_spec(o.execute_retry),
        wait_for_failure_proceed=o.wait_for_failure == WaitForFailurePolicy.PROCEED,
        execute_failure_step=failure_step,
        execute_failure_options=failure_options,
        wait_for_durability=o.wait_for_durability.value,
        execute_durability=o.execute_durability.value,
        wait_for_locks=_check_locks(o.wait_for_lock_attributes, entry, f"{where} wait_for"),
        execute_locks=_check_locks(o.execute_lock_attributes, entry, f"{where} execute"),
        wait_for_loads=_load_spec_once(
            entry,
            f"{where} wait_for",
            (
                o.wait_for_load_attribute_maps,
                o.wait_for_load_attribute_map_instances,
                o.wait_for_load_channels,
                o.wait_for_load_channel_maps,
                o.wait_for_load_channel_map_instances,
            ),
            loads,
        ),
        execute_loads=_load_spec_once(
            entry,
            f"{where} execute",
            (
                o.execute_load_attribute_maps,
                o.execute_load_attribute_map_instances,
                o.execute_load_channels,
                o.execute_load_channel_maps,
                o.execute_load_channel_map_instances,
            ),
            loads,
        ),
        wait_for_inline=o.wait_for_inline,
        execute_inline=o.execute_inline,
    )


def wait_spec(
    wait: object,
    entry: FlowEntry,
    step_type: str | None = None,
    subflow: Callable[[SubFlowCondition], ConditionSpec] | None = None,
) -> WaitSpec:
    """Wire form of a ``wait_for`` result (``subflow`` builds SubFlow conditions).

    Raises:
        InvalidStepResultError: not a Wait, or a condition names an undeclared Channel.

    """
    if not isinstance(wait, Wait):
        raise InvalidStepResultError(
            entry.flow_type,
            step_type,
            "wait_for",
            f"wait_for must return a Wait, got {type(wait).__qualname__}: {wait!r:.100}",
        )
    grouped = [c for group in wait.combinations for c in group.conditions]
    for c in (*wait.conditions, *grouped):
        if isinstance(c, ChannelCondition) and entry.declared.get(c.name) != c.kind:
            raise InvalidStepResultError(
                entry.flow_type,
                step_type,
                "wait_for",
                f"Wait condition on {c.kind} {c.name!r}, which Flow {entry.flow_type!r} "
                "does not declare",
            )
    return wait.to_spec(subflow)


def movement_wire(
    m: StepMovement[Any],
    entry: FlowEntry,
    step_type: str | None = None,
    method: Literal["execute", "rpc"] = "execute",
) -> Movement:
    """Wire form of one movement (input encoded with the target Step's input type).

    Raises:
        InvalidStepResultError: the target is not a Step of this Flow, or bad options.
        ValueMappingError: the input does not match the target's input type.

    """
    target = entry.resolve(m.step)
    if target is None:
        raise InvalidStepResultError(
            entry.flow_type,
            step_type,
            method,
            f"{m.step!r} is not a Step of Flow {entry.flow_type!r} (or its class is ambiguous)",
        )
    data = target.input_codec.encode(m.input)
    options = None
    if m.options is not None:
        try:
            options = options_spec(m.options, entry, f"movement to {target.step_type}")
        except FlowDefinitionError as exc:
            raise InvalidStepResultError(entry.flow_type, step_type, method, str(exc)) from exc
    return Movement(
        step_type=target.step_type,
        input=None if data == b"null" else Raw(data),
        options=options,
    )


def step_types(
    steps: tuple[Any, ...],
    entry: FlowEntry,
    what: str,
    step_type: str | None = None,
    method: Literal["execute", "rpc"] = "execute",
) -> list[str]:
    """Step types of Step classes/instances named in a decision."""
    out = []
    for s in steps:
        target = entry.resolve(s)
        if target is None:
            raise InvalidStepResultError(
                entry.flow_type,
                step_type,
                method,
                f"{what}: {s!r} is not a Step of Flow {entry.flow_type!r}",
            )
        out.append(target.step_type)
    return out


def _conditional_complete_spec(
    d: StepDecision, entry: FlowEntry, step_type: str | None
) -> DecisionSpec:
    """Wire form of ``force_complete_if_channels_empty``; the channels must be declared."""
    from dex._codec import ANY_CODEC
    from dex._state import Channel, ChannelMap

    channels: list[str] = []
    maps: list[str] = []
    for c in d.empty_channels:
        kind = "channel" if isinstance(c, Channel) else "channel_map"
        name = getattr(c, "name", None)
        if not isinstance(c, Channel | ChannelMap) or entry.declared.get(name or "") != kind:
            raise InvalidStepResultError(
                entry.flow_type,
                step_type,
                "execute",
                f"force_complete_if_channels_empty names {c!r:.80}, not a Channel or "
                f"ChannelMap Flow {entry.flow_type!r} declares",
            )
        (channels if kind == "channel" else maps).append(c.name)
    assert d.fallback is not None
    return DecisionSpec(
        kind="force_complete_if_channels_empty",
        movements=[movement_wire(d.fallback, entry, step_type)],
        output=None if d.output is None else Raw(ANY_CODEC.encode(d.output)),
        empty_channels=channels,
        empty_channel_maps=maps,
        cancel_steps=step_types(d.canceling_steps, entry, "with_canceling_steps", step_type),
        cancel_sibling_steps=step_types(
            d.canceling_sibling_steps, entry, "with_canceling_sibling_steps", step_type
        ),
    )


def decision_spec(decision: object, entry: FlowEntry, step_type: str | None = None) -> DecisionSpec:
    """Wire form of an ``execute`` result.

    Raises:
        InvalidStepResultError: not a StepDecision, or it names a Step the Flow lacks.
        ValueMappingError: an input or output cannot be encoded.

    """
    if not isinstance(decision, StepDecision):
        raise InvalidStepResultError(
            entry.flow_type,
            step_type,
            "execute",
            f"execute must return a StepDecision, got {type(decision).__qualname__}: "
            f"{decision!r:.100}",
        )
    d: StepDecision = decision
    if d.kind is DecisionKind.FORCE_COMPLETE_IF_CHANNELS_EMPTY:
        return _conditional_complete_spec(d, entry, step_type)
    if d.kind is DecisionKind.NEXT and not d.movements:
        raise InvalidStepResultError(
            entry.flow_type,
            step_type,
            "execute",
            "a go_to decision needs at least one StepMovement; use dead_end() to end a branch",
        )
    output = None
    if d.output is not None:
        output = Raw(ANY_CODEC.encode(d.output))
    return DecisionSpec(
        kind="go_to" if d.kind is DecisionKind.NEXT else d.kind.value,  # type: ignore[arg-type]
        movements=[movement_wire(m, entry, step_type) for m in d.movements],
        output=output,
        reason=d.reason or None,
        cancel_steps=step_types(d.canceling_steps, entry, "with_canceling_steps", step_type),
        cancel_sibling_steps=step_types(
            d.canceling_sibling_steps, entry, "with_canceling_sibling_steps", step_type
        ),
    )
