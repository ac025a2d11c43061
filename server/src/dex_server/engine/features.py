"""Named parts of the Dex model a request may ask for, and which this server runs.

A client sends the names of the optional features a request depends on (a Flow timeout on
a start, a search query on a listing). The server refuses a request that needs a feature
it does not run, with ``FEATURE_NOT_AVAILABLE``, instead of running it without: a Flow
started without the timeout it asked for would never time out.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FLOW_CONFIG", "FLOW_TIMEOUTS", "SEARCH", "SERVER_FEATURES", "SUBFLOWS", "missing"]

SEARCH = "Flow search (search_flows)"
"""A listing filtered by a search query."""

SUBFLOWS = "SubFlows"
"""Waits on child Flows (``SubFlow.run``)."""

FLOW_CONFIG = "Flow configuration (StartFlowOptions.config_override)"
"""A start that sets FlowConfig fields (kept with the run, shown by describe)."""

FLOW_TIMEOUTS = frozenset(
    {
        "Flow timeouts (StartFlowOptions.timeout)",
        "Flow timeouts (StartFlowOptions.timeout_policy)",
        "Flow timeouts (StartFlowOptions.timeout_handler_options)",
    }
)
"""A start with a soft timeout, its policy and its handler's options."""

SERVER_FEATURES: frozenset[str] = frozenset({SEARCH, SUBFLOWS, FLOW_CONFIG, *FLOW_TIMEOUTS})
"""The optional features this server runs."""


def missing(requested: Iterable[str]) -> list[str]:
    """Return the features of ``requested`` that this server does not run, in order."""
    return [f for f in dict.fromkeys(requested) if f not in SERVER_FEATURES]
