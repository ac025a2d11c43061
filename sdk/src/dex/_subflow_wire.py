"""Wire form of SubFlow conditions, built on the Worker that runs the parent's ``wait_for``.

The child's spec and start input come from the Worker's Registry when it registers the
child Flow (that instance, its codecs); a child Flow the Worker does not serve is compiled
on its own with the Registry's custom codecs (once per instance). Options the server
cannot run for a child are named in ``requires``, so the server fails the attempt with
``FEATURE_NOT_AVAILABLE``.
"""

from __future__ import annotations

from typing import Any, cast

from msgspec import Raw

from dex._client._defs import encode_start_input, flow_spec
from dex._client._options import FlowTimeoutPolicy
from dex._flow import Flow
from dex._options import seconds
from dex._protocol import ConditionSpec, InitialAttribute, SubFlowStartSpec
from dex._registry import Registry
from dex._state._common import instance_name
from dex._subflows import SubFlowOptions
from dex._waits import SubFlowCondition
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
        ("SubFlow timeouts (SubFlowOptions.timeout)", o.timeout is not None),
        (
            "SubFlow timeouts (SubFlowOptions.timeout_policy)",
            o.timeout_policy is not FlowTimeoutPolicy.DEFAULT,
        ),
        (
            "SubFlow timeouts (SubFlowOptions.timeout_handler_options)",
            o.timeout_handler_options is not None,
        ),
        ("SubFlow retries (SubFlowOptions.retry_policy)", o.retry_policy is not None),
        (
            "SubFlow config overrides (SubFlowOptions.config_override)",
            o.config_override is not None,
        ),
    ]
    return [name for name, asked in wanted if asked]


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
            a type this Registry holds.
        ValueMappingError: the input or an initial value does not match its type.

    """
    if c.flow is None:
        raise InvalidStepResultError(flow_type, step_type, "wait_for", "SubFlow.run without a Flow")
    try:
        own = _registry_of(registry, c.flow)
        spec = flow_spec(own, c.flow)
        encoded = encode_start_input(own, c.flow, c.input)
    except FlowDefinitionError as exc:
        raise InvalidStepResultError(
            flow_type, step_type, "wait_for", f"SubFlow {c.flow.get_flow_type()!r}: {exc}"
        ) from None
    o = c.options or SubFlowOptions()
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
        ),
    )
