"""Integration-test support for agent runners: a private engine, Worker children, fakes.

``dex_agents.testing`` ships in the ``dex-agents`` wheel, so an adapter's own tests can
run sessions against a real server:

* :class:`AgentTestStack` starts a private ``dexcli dev --engine zd`` server on a temporary
  store and Worker child processes (each in its own process group, so a test can SIGKILL
  one at an exact moment), and gives an ``AgentSessionClient`` per Flow.
* :func:`run_agent_worker` is the Worker child's main.
* :class:`FileGate` pauses a Worker child at a named point; :class:`InvocationLog` counts
  real model and tool calls across processes; :func:`wait_until` and
  :func:`wait_for_agent_snapshot` poll with a deadline instead of sleeping.
* :func:`read_step_history` lists a session's Step events through ``dexcli flow history``.
* :class:`ScriptedRunner` with a :class:`ScriptedModel` is a complete runner with a fake
  model and Python tool functions, for tests and demos.
"""

from __future__ import annotations

from dex_agents.testing._gates import FileGate
from dex_agents.testing._history import (
    EXECUTE_COMPLETED_EVENT,
    StepHistoryEntry,
    find_dexcli,
    parse_step_history,
    read_step_history,
)
from dex_agents.testing._log import InvocationLog, InvocationRecord
from dex_agents.testing._runner import (
    MODEL_CALL_KIND,
    ScriptedModelError,
    ScriptedRunner,
    ScriptedTool,
    ScriptedToolContext,
    current_tool_call,
    tool_call_kind,
)
from dex_agents.testing._script import (
    DERIVE_USAGE,
    ModelCall,
    ScriptedContinue,
    ScriptedFailure,
    ScriptedModel,
    ScriptedResponse,
    ScriptedStep,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    ScriptedToolResult,
    ScriptedUsage,
)
from dex_agents.testing._stack import AgentTestStack, WorkerHandle
from dex_agents.testing._wait import (
    SnapshotSource,
    settled_approval,
    wait_for_agent_snapshot,
    wait_until,
)
from dex_agents.testing._worker import run_agent_worker

__all__ = [
    "DERIVE_USAGE",
    "EXECUTE_COMPLETED_EVENT",
    "MODEL_CALL_KIND",
    "AgentTestStack",
    "FileGate",
    "InvocationLog",
    "InvocationRecord",
    "ModelCall",
    "ScriptedContinue",
    "ScriptedFailure",
    "ScriptedModel",
    "ScriptedModelError",
    "ScriptedResponse",
    "ScriptedRunner",
    "ScriptedStep",
    "ScriptedText",
    "ScriptedTool",
    "ScriptedToolCall",
    "ScriptedToolCalls",
    "ScriptedToolContext",
    "ScriptedToolResult",
    "ScriptedUsage",
    "SnapshotSource",
    "StepHistoryEntry",
    "WorkerHandle",
    "current_tool_call",
    "find_dexcli",
    "parse_step_history",
    "read_step_history",
    "run_agent_worker",
    "tool_call_kind",
    "settled_approval",
    "wait_for_agent_snapshot",
    "wait_until",
]
