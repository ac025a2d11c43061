"""``FlowConfig``: per-Flow settings a start may override and ``update_flow_config`` merges."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dex._options import StepDurability
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

    Of these, this release runs ``step_durability`` (every durability is at least as
    durable as ``SYNC``, see the engine docs) and a pull ``worker_target``; a start or
    ``update_flow_config`` that sets any other field raises ``FeatureNotAvailableError``.

    """

    active_step_search_mode: ActiveStepSearchMode | None = None
    continue_as_new_threshold: int | None = None
    continue_as_new_page_size_bytes: int | None = None
    step_durability: StepDurability | None = None
    worker_target: WorkerTarget | None = None
    attribute_store_names: list[str] | None = None


def unsupported_flow_config(config: FlowConfig) -> str | None:
    """Name the first setting of ``config`` this release cannot run, or None."""
    if config.active_step_search_mode not in (None, ActiveStepSearchMode.DEFAULT):
        return "FlowConfig.active_step_search_mode (search)"
    if config.continue_as_new_page_size_bytes is not None:
        return "FlowConfig.continue_as_new_page_size_bytes (continue-as-new)"
    if not is_pull_target(config.worker_target):
        return "FlowConfig.worker_target other than pull Workers (listening Workers)"
    if config.attribute_store_names is not None:
        return "FlowConfig.attribute_store_names (attribute stores)"
    return None
