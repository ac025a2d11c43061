"""The end-to-end stack: a real server subprocess, Worker children and an AsyncClient.

``e2e_stack(directory)`` starts ``python -m dex_server`` on a fresh database in
``directory``, one Worker child (``tests.support.WorkerProcess``) serving every e2e Flow,
and an ``AsyncClient``. Probes (``wait_for_phase``, ``history_types``) poll with deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from dex import AsyncClient, ClientOptions, Registry
from dex._protocol import ActiveStepWire, HistoryEventWire
from dex_server.testing import RunningServer, running_server

from tests.e2e_flows.registries import all_flows
from tests.support import GATE_DIR_ENV, WorkerProcess, async_wait_until
from tests.support.process import ENV_CREDENTIAL, ENV_SERVER_ADDRESS, SDK_DIR

ALL_FLOWS = "tests.e2e_flows.registries:all_flows"
SYNC_FLOWS = "tests.e2e_flows.registries:sync_flows"

_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The in-process twin of the Worker children's registry (built once)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = all_flows()
    return _REGISTRY


def unique_id(prefix: str) -> str:
    """A Flow id no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def free_port() -> int:
    """A TCP port that was free a moment ago (to restart a server on the same address)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Stack:
    """One server, its Worker children, and a Client; ``directory`` is the gate dir."""

    server: RunningServer
    client: AsyncClient
    directory: Path
    token: str | None = None
    workers: list[WorkerProcess] = field(default_factory=list)

    async def start_worker(
        self, factory: str = ALL_FLOWS, *, max_concurrent_tasks: int = 16
    ) -> WorkerProcess:
        """Start one more Worker child and wait until it registered."""
        worker = WorkerProcess(
            factory,
            server_address=self.server.address,
            gate_dir=self.directory,
            credential=self.token,
            max_concurrent_tasks=max_concurrent_tasks,
        )
        self.workers.append(worker)
        await asyncio.to_thread(worker.start)
        return worker

    def client_for(self, credential: str | None) -> AsyncClient:
        """A second Client to the same server with another credential."""
        return AsyncClient(
            registry(),
            options=ClientOptions(server_address=self.server.address, credential=credential),
        )


@contextlib.asynccontextmanager
async def e2e_stack(
    directory: Path,
    *,
    workers: int = 1,
    token: str | None = None,
    **server_overrides: object,
) -> AsyncIterator[Stack]:
    """Run a server, ``workers`` Worker children and a Client for one ``async with``."""
    directory.mkdir(parents=True, exist_ok=True)
    async with running_server(directory / "server", token=token, **server_overrides) as srv:
        client = AsyncClient(
            registry(), options=ClientOptions(server_address=srv.address, credential=token)
        )
        stack = Stack(server=srv, client=client, directory=directory, token=token)
        try:
            for _ in range(workers):
                await stack.start_worker()
            yield stack
        finally:
            await client.close()
            for worker in stack.workers:
                worker.close()


# --------------------------------------------------------------------------- probes


async def active_steps(client: AsyncClient, flow_id: str) -> list[ActiveStepWire]:
    """The Flow's active Step executions right now."""
    state = await client.get_flow_state(flow_id)
    return list(state.active_steps)


async def wait_for_phase(
    client: AsyncClient,
    flow_id: str,
    step_type: str,
    phase: str = "waiting",
    *,
    count: int = 1,
    timeout: float = 10.0,
) -> list[ActiveStepWire]:
    """Poll until ``count`` executions of ``step_type`` are in ``phase``; return them."""

    async def probe() -> list[ActiveStepWire] | None:
        steps = [
            s
            for s in await active_steps(client, flow_id)
            if s.step_type == step_type and s.phase == phase
        ]
        return steps if len(steps) >= count else None

    return await async_wait_until(
        f"{count} {step_type} of {flow_id} are {phase}", probe, timeout=timeout
    )


async def history(client: AsyncClient, flow_id: str) -> list[HistoryEventWire]:
    """Every history event of the Flow's latest run (all pages)."""
    events: list[HistoryEventWire] = []
    token: str | None = None
    while True:
        page = await client.get_history(flow_id, page_size=100, page_token=token)
        events.extend(page.events)
        token = page.next_page_token
        if not token:
            return events


def payload(event: HistoryEventWire) -> dict[str, Any]:
    """The decoded JSON payload of a history event."""
    value: dict[str, Any] = msgspec.json.decode(event.payload)
    return value


def step_events(events: Iterable[HistoryEventWire], event_type: str) -> list[str]:
    """The step execution ids of the events of ``event_type``, in history order."""
    return [payload(e)["context"]["stepExecutionId"] for e in events if e.type == event_type]


async def wait_for_event(
    client: AsyncClient,
    flow_id: str,
    predicate: Callable[[HistoryEventWire], bool],
    description: str,
    timeout: float = 10.0,
) -> HistoryEventWire:
    """Poll the Flow's history until an event matches ``predicate``."""

    async def probe() -> HistoryEventWire | None:
        return next((e for e in await history(client, flow_id) if predicate(e)), None)

    return await async_wait_until(description, probe, timeout=timeout)


def completed(step_execution_id: str) -> Callable[[HistoryEventWire], bool]:
    """Predicate: the StepExecuteCompleted event of ``step_execution_id``."""

    def matches(event: HistoryEventWire) -> bool:
        return (
            event.type == "StepExecuteCompleted"
            and payload(event)["context"]["stepExecutionId"] == step_execution_id
        )

    return matches


# --------------------------------------------------------------------------- sync Worker


class SyncWorkerChild:
    """The sync ``dex.Worker`` in a child process (``tests.e2e_flows.sync_worker_child``)."""

    def __init__(self, factory: str, *, server_address: str, gate_dir: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SDK_DIR), env.get("PYTHONPATH", "")) if p
        )
        env[ENV_SERVER_ADDRESS] = server_address
        env[GATE_DIR_ENV] = str(gate_dir)
        env.pop(ENV_CREDENTIAL, None)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e_flows.sync_worker_child", factory],
            cwd=SDK_DIR,
            env=env,
            start_new_session=True,
        )

    def is_alive(self) -> bool:
        """Whether the child still runs."""
        return self._proc.poll() is None

    def close(self) -> None:
        """SIGKILL the child's process group and reap it."""
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, 9)
        self._proc.wait()
