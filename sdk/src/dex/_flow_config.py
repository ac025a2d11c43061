"""``FlowConfig``: per-Flow settings a start may override and ``update_flow_config`` merges."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dex._options import StepDurability
from dex._protocol import FlowConfigWire, WorkerTargetWire
from dex._worker_target import WorkerTarget, is_pull_target

__all__ = ["ActiveStepSearchMode", "FlowConfig", "unsupported_flow_config"]


class ActiveStepSearchMode(enum.Enum):
    """Which active Steps a Flow's search entries list (``DEFAULT``: the server's choice)."""

    DEFAULT = "default"
    ALL = "all"
    WITH_WAIT_FOR = "with_wait_for"
    DISABLED = "disabled"


@dataclass(frozen=True)
class FlowConfig:
    """Settings of one Flow; every field left None keeps the current (or default) value.

    Attributes:
        active_step_search_mode: which active Steps search shows.
        continue_as_new_threshold: history size that triggers continue-as-new.
        continue_as_new_page_size_bytes: page size of the state carried across it.
        step_durability: durability of the Steps whose options say ``DEFAULT``.
        worker_target: where the Flow's tasks go.
        attribute_store_names: attribute stores the Flow syncs its Attributes to.

    The server keeps every field with the run and shows it back (``FlowInfo.config``).
    ``step_durability`` decides the durability of Step methods without their own (a
    method's own option wins; a method with a recovery route is SYNC); the history shows
    it per Step event. The other fields are accepted and kept but change nothing in this
    engine: there is no search index of active Steps, no continue-as-new, no Attribute
    Store, and every Worker pulls. A listening ``worker_target`` raises
    ``FeatureNotAvailableError`` (at ``start_flow``; ``update_flow_config`` gets the
    server's ``BadRequestError``).

    """

    active_step_search_mode: ActiveStepSearchMode | None = None
    continue_as_new_threshold: int | None = None
    continue_as_new_page_size_bytes: int | None = None
    step_durability: StepDurability | None = None
    worker_target: WorkerTarget | None = None
    attribute_store_names: list[str] | None = None


FLOW_CONFIG_FEATURE = "Flow configuration (StartFlowOptions.config_override)"


def unsupported_flow_config(config: FlowConfig) -> str | None:
    """Name the feature a start with ``config`` needs of the server, or None.

    A listening ``worker_target`` needs listening Workers (no server runs them); any other
    ``config_override`` needs a server that keeps a Flow's config.
    """
    if not is_pull_target(config.worker_target):
        return "FlowConfig.worker_target other than pull Workers (listening Workers)"
    return FLOW_CONFIG_FEATURE


def config_to_wire(config: FlowConfig) -> FlowConfigWire:
    """The wire form of ``config`` (fields left None stay None)."""
    target = config.worker_target
    return FlowConfigWire(
        active_step_search_mode=None
        if config.active_step_search_mode is None
        else config.active_step_search_mode.value,
        continue_as_new_threshold=config.continue_as_new_threshold,
        continue_as_new_page_size_bytes=config.continue_as_new_page_size_bytes,
        step_durability=None if config.step_durability is None else config.step_durability.value,
        worker_target=None
        if target is None
        else WorkerTargetWire(address=target.address, headless=target.headless, pull=target.pull),
        attribute_store_names=None
        if config.attribute_store_names is None
        else list(config.attribute_store_names),
    )


def config_from_wire(wire: FlowConfigWire) -> FlowConfig:
    """The ``FlowConfig`` the server reports for a run."""
    target = wire.worker_target
    return FlowConfig(
        active_step_search_mode=None
        if wire.active_step_search_mode is None
        else ActiveStepSearchMode(wire.active_step_search_mode),
        continue_as_new_threshold=wire.continue_as_new_threshold,
        continue_as_new_page_size_bytes=wire.continue_as_new_page_size_bytes,
        step_durability=None
        if wire.step_durability is None
        else StepDurability(wire.step_durability),
        worker_target=None
        if target is None
        else WorkerTarget(address=target.address, headless=target.headless, pull=target.pull),
        attribute_store_names=None
        if wire.attribute_store_names is None
        else list(wire.attribute_store_names),
    )
