"""Wire form of SubFlow conditions, built on the Worker that runs the parent's ``wait_for``.

The child's spec and start input come from the Worker's Registry when it registers the
child Flow (that instance, its codecs); a child Flow the Worker does not serve is compiled
on its own with the Registry's custom codecs (once per instance). A child's soft timeout
and its config override travel as a ``start_flow`` would send them (the server merges the
override into the parent's config). Options the server cannot run for a child (a retry
policy, a listening Worker target) are named in ``requires``, so the server fails the
attempt with ``FEATURE_NOT_AVAILABLE``.
"""

from __future__ import annotations

from typing import Any, cast

from msgspec import Raw

from dex._client._defs import encode_start_input, flow_spec
from dex._client._options import StartFlowOptions, flow_timeout_spec
from dex._flow import Flow
from dex._flow_config import config_to_wire
from dex._options import seconds
from dex._protocol import ConditionSpec, FlowTimeoutSpec, InitialAttribute, SubFlowStartSpec
from dex._registry import Registry
from dex._state._common import instance_name
from dex._subflows import SubFlowOptions
from dex._waits import SubFlowCondition
from dex._worker_target import is_pull_target
from dex.errors import FlowDefinitionError, InvalidStepResultError

__all__ = ["subflow_condition_spec"]

# child Flows this process compiled outside its Registry: id(flow) -> (flow, registry)
_COMPILED: dict[int, tuple[Flow[Any], Registry]] = {}


def _registry_of(registry: Registry, flow: Flow[Any]) -> Registry:
    try:
        registry.start_input_type(flow)
    except KeyError:
        pass
    else:
        return registry
    hit = _COMPILED.get(id(flow))
    if hit is None or hit[0] is not flow:
        own = Registry([flow], registry.codec_registry, allow_async_handlers=True)
        hit = _COMPILED[id(flow)] = (flow, own)
    return hit[1]


def _requires(o: SubFlowOptions) -> list[str]:
    wanted = [
        ("SubFlow retries (SubFlowOptions.retry_policy)", o.retry_policy is not None),
        (
            "SubFlowOptions.config_override.worker_target other than pull Workers"
            " (listening Workers)",
            o.config_override is not None and not is_pull_target(o.config_override.worker_target),
        ),
    ]
    return [name for name, asked in wanted if asked]


def _timeout(own: Registry, flow_type: str, o: SubFlowOptions) -> FlowTimeoutSpec | None:
    """The child's soft timeout, built as ``start_flow`` builds a Flow's."""
    if o.timeout is None:
        return None
    start = StartFlowOptions(
        timeout=o.timeout,
        timeout_policy=o.timeout_policy,
        timeout_handler_options=o.timeout_handler_options,
    )
    return flow_timeout_spec(own.flow_entry(flow_type), start)


def _initial(registry: Registry, o: SubFlowOptions) -> list[InitialAttribute]:
    out = []
    for handle, args in o._attribute_initializations:
        if len(args) == 1:
            name, value = handle.name, args[0]
        elif len(args) == 2:
            name, value = instance_name(handle.name, cast("str", args[0])), args[1]
        else:
            raise ValueError(
                f"SubFlowOptions.with_attribute({handle.name!r}, ...) takes a value, or a key"
                " and a value"
            )
        encoded = registry.codec_for(handle.value_type).encode(value)
        out.append(InitialAttribute(name=name, value=Raw(encoded)))
    return out


def subflow_condition_spec(
    c: SubFlowCondition, registry: Registry, flow_type: str, step_type: str | None
) -> ConditionSpec:
    """Return the wire condition that starts ``c``'s child Flow.

    Raises:
        InvalidStepResultError: the child Flow is missing, invalid, or another instance of
            a type this Registry holds; or its timeout (or handler options) is invalid.
        ValueMappingError: the input or an initial value does not match its type.

    """
    if c.flow is None:
        raise InvalidStepResultError(flow_type, step_type, "wait_for", "SubFlow.run without a Flow")
    o = c.options or SubFlowOptions()
    try:
        own = _registry_of(registry, c.flow)
        spec = flow_spec(own, c.flow)
        encoded = encode_start_input(own, c.flow, c.input)
        timeout = _timeout(own, spec.flow_type, o)
    except (FlowDefinitionError, ValueError) as exc:
        # the timeout is checked by StartFlowOptions: name the options the Step gave
        why = str(exc).replace("StartFlowOptions", "SubFlowOptions")
        raise InvalidStepResultError(
            flow_type, step_type, "wait_for", f"SubFlow {c.flow.get_flow_type()!r}: {why}"
        ) from None
    return ConditionSpec(
        kind="subflow",
        condition_id=c.condition_id,
        subflow=SubFlowStartSpec(
            flow_type=spec.flow_type,
            spec=spec,
            input=encoded,
            reuse_policy=o.reuse_policy.value,
            initial_attributes=_initial(registry, o),
            start_delay_s=seconds(o.start_delay),
            requires=_requires(o),
            config=None if o.config_override is None else config_to_wire(o.config_override),
            timeout=timeout,
        ),
    )
