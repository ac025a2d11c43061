"""Registries the Worker children load (``tests.e2e_flows.registries:<factory>``).

The tests build the same registries for their Clients; Flow instances are module-level
singletons, so a Client and the Worker registry agree on every instance.
"""

from __future__ import annotations

from dex import Registry

from tests.e2e_flows import (
    crash_flows,
    defect_flows,
    error_flows,
    inline_execute_flows,
    inline_wait_flows,
    lifecycle_flows,
    read_flows,
    reconnect_flows,
    rpc_flows,
    search_flows,
    state_flows,
    step_flows,
    stream_flows,
    subflow_flows,
    time_flows,
)


def all_flows() -> Registry:
    """Every end-to-end Flow, sync and async handlers (needs an AsyncWorker)."""
    return Registry(
        [
            *step_flows.FLOWS,
            *state_flows.FLOWS,
            *time_flows.SYNC_FLOWS,
            *time_flows.ASYNC_FLOWS,
            *rpc_flows.FLOWS,
            *crash_flows.FLOWS,
            *error_flows.FLOWS,
            *lifecycle_flows.FLOWS,
            *read_flows.FLOWS,
            *defect_flows.FLOWS,
            *reconnect_flows.FLOWS,
            *subflow_flows.FLOWS,
            *search_flows.FLOWS,
            *stream_flows.FLOWS,
            *inline_wait_flows.FLOWS,
            *inline_execute_flows.FLOWS,
        ],
        allow_async_handlers=True,
    )


def sync_flows() -> Registry:
    """Only Flows whose handlers are all synchronous (for the sync ``Worker``)."""
    return Registry([*step_flows.FLOWS, *state_flows.FLOWS, *time_flows.SYNC_FLOWS])
