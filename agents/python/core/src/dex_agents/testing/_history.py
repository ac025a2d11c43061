"""Read a session's Step history through ``dexcli flow history``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXECUTE_COMPLETED_EVENT = "StepExecuteCompleted"
"""History event type of a Step ``execute`` that completed (``StepHistoryEntry.event_type``)."""

_STEP_EVENTS = frozenset(
    {"StepWaitForCompleted", "StepWaitForFailed", "StepExecuteCompleted", "StepExecuteFailed"}
)


@dataclass(frozen=True)
class StepHistoryEntry:
    """One Step method event of a Flow's history.

    Attributes:
        event_type: ``StepExecuteCompleted`` (:data:`EXECUTE_COMPLETED_EVENT`),
            ``StepExecuteFailed``, ``StepWaitForCompleted`` or ``StepWaitForFailed``.
        step_type: the Step type, for example ``"CallTool"``.
        step_execution_id: ``"<StepType>-<n>"``, shared by every attempt.
        final_attempt: the attempt that produced this event (1-based).

    """

    event_type: str
    step_type: str
    step_execution_id: str
    final_attempt: int


def find_dexcli() -> Path:
    """Locate ``dexcli``: env ``DEXCLI``, else the ``dexcli`` next to ``sys.executable``.

    Raises:
        FileNotFoundError: neither exists.

    """
    configured = os.environ.get("DEXCLI")
    path = Path(configured) if configured else Path(sys.executable).parent / "dexcli"
    if not path.exists():
        raise FileNotFoundError(f"dexcli not found at {path}; set DEXCLI to the dexcli executable")
    return path


def parse_step_history(document: dict[str, Any]) -> list[StepHistoryEntry]:
    """Project the Step events out of ``dexcli flow history --output json`` output."""
    entries: list[StepHistoryEntry] = []
    for event in document.get("events", []):
        event_type = event.get("type")
        if event_type not in _STEP_EVENTS:
            continue
        context = (event.get("payload") or {}).get("context") or {}
        entries.append(
            StepHistoryEntry(
                event_type=str(event_type),
                step_type=str(context.get("stepType", "")),
                step_execution_id=str(context.get("stepExecutionId", "")),
                final_attempt=int(context.get("finalAttempt", 1)),
            )
        )
    return entries


async def read_step_history(
    server_address: str, flow_id: str, *, timeout: float = 30.0
) -> list[StepHistoryEntry]:
    """List a Flow's Step method events, oldest first, by running ``dexcli flow history``.

    Runs ``dexcli --output json flow history FLOW_ID --all`` against ``server_address``
    (``dexcli`` located by :func:`find_dexcli`), so the test reads history the way an
    operator does. Works for retained closed Flows too.

    Args:
        server_address: ``"host:port"`` of the server.
        flow_id: the Flow (session) ID.
        timeout: seconds before the command is killed (default 30).

    Returns:
        One entry per Step method event, in history order.

    Raises:
        RuntimeError: ``dexcli`` failed; the message carries its stderr.

    """
    dexcli = find_dexcli()
    env = {**os.environ, "DEX_SERVER_ADDRESS": server_address}
    process = await asyncio.create_subprocess_exec(
        str(dexcli),
        "--server",
        server_address,
        "--output",
        "json",
        "flow",
        "history",
        flow_id,
        "--all",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError(f"dexcli flow history {flow_id} timed out after {timeout}s") from None
    if process.returncode != 0:
        raise RuntimeError(
            f"dexcli flow history {flow_id} exited {process.returncode}: "
            f"{stderr.decode(errors='replace').strip()}"
        )
    return parse_step_history(json.loads(stdout))
