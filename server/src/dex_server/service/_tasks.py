from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

import msgspec
from dex._protocol import ChannelMessageWire, LoadSpec, Task

from dex_server.service._common import SpecIndex
from dex_server.store import ExecRecord, FlowRecord, StoredValue, Tx
from dex_server.store._contract import Snapshot


class SharedSnapshot:
    """One read of a run's singletons and Channel sizes for every task a job makes ready.

    The tasks are built after all of the job's writes, so they would all read the same
    snapshot: :meth:`read` reads it once (``StateStore.snapshot_later``) and fills them all.
    """

    def __init__(self) -> None:
        self._fills: list[Callable[[Snapshot | None], None]] = []

    def add(self, fill: Callable[[Snapshot | None], None]) -> None:
        self._fills.append(fill)

    def read(self, tx: Tx, run_id: str, flow_type: str) -> None:
        fills, self._fills = self._fills, []
        if not fills:
            return

        def fill_all(snap: Snapshot | None) -> None:
            for fill in fills:
                fill(snap)

        tx.state.snapshot_later(run_id, fill_all, flow_type)


def _fill_state(
    tx: Tx,
    task: Task,
    run_id: str,
    loads: LoadSpec,
    unread: Callable[[], None] | None = None,
    shared: SharedSnapshot | None = None,
) -> None:
    """Load ``loads`` into ``task``.

    ``unread``: the singletons and Channel sizes may arrive after the job (see
    ``StateStore.snapshot_later``); ``unread()`` is called if they cannot. ``shared``
    (with ``unread``): they come from that snapshot once it is read.
    """
    extra: dict[str, StoredValue] = {}
    if loads.attribute_maps:
        extra.update(tx.state.of_maps(run_id, loads.attribute_maps))
    if loads.attribute_map_instances:
        extra.update(tx.state.of_names(run_id, loads.attribute_map_instances))

    def fill(snap: Snapshot | None) -> None:
        if snap is None:
            assert unread is not None
            unread()
            return
        values, task.channel_sizes = snap
        for name, v in [*values.items(), *extra.items()]:
            if v.blob is not None:
                task.blob_refs[name] = v.blob
            elif v.value is not None:
                task.attributes[name] = v.value

    if unread is None:
        fill(tx.state.snapshot(run_id, task.flow_type))
    elif shared is not None:
        shared.add(fill)
    else:
        tx.state.snapshot_later(run_id, fill, task.flow_type)
    task.loaded_maps = list(loads.attribute_maps)
    task.loaded_map_instances = list(loads.attribute_map_instances)
    chans = [*loads.channels, *loads.channel_map_instances]
    if chans or loads.channel_maps:
        pending: dict[str, list[ChannelMessageWire]] = {}
        for m in tx.channels.pending(run_id, chans, loads.channel_maps):
            pending.setdefault(m.channel, []).append(
                ChannelMessageWire(message_id=m.message_id, value=m.value)
            )
        task.pending_messages = pending
        task.loaded_channels = [*loads.channels, *loads.channel_maps, *loads.channel_map_instances]


def build_step_task(
    tx: Tx,
    flow: FlowRecord,
    e: ExecRecord,
    unread: Callable[[], None] | None = None,
    shared: SharedSnapshot | None = None,
) -> Task:
    """Snapshot the state a Step method needs into a Task (task_id/deadline set at dispatch).

    With ``unread`` part of the snapshot may be filled in once the job's transaction
    committed, before its future resolves; ``unread()`` if it cannot be. With ``shared``
    that part comes from ``shared.read()``, which the caller must call.
    """
    kind: Literal["wait_for", "execute"] = "wait_for" if e.phase == "wait_for" else "execute"
    opts = e.options
    task = Task(
        task_id="",
        kind=kind,
        flow_type=flow.flow_type,
        flow_id=flow.flow_id,
        run_id=flow.run_id,
        step_type=e.step_type,
        step_execution_id=e.execution_id,
        from_step_execution_id=e.from_execution_id,
        attempt=e.attempt,
        first_attempt_at=e.first_attempt_at,
        heartbeat_timeout_s=opts.heartbeat_timeout_s,
        input=e.input,
        input_blob=e.input_blob,
        locals=dict(e.locals),
        recovery_error=e.recovery_error,
        last_heartbeat_value=e.last_heartbeat_value,
    )
    if kind == "execute":
        task.condition_results = e.condition_results
        task.wait_for_failed = e.wait_for_failed
    _fill_state(
        tx,
        task,
        flow.run_id,
        opts.wait_for_loads if kind == "wait_for" else opts.execute_loads,
        unread,
        shared,
    )
    return task


def build_rpc_task(
    tx: Tx,
    flow: FlowRecord,
    idx: SpecIndex,
    rpc_name: str,
    input: bytes | None,
    extra: LoadSpec | None,
) -> Task:
    rpc = idx.rpcs[rpc_name]
    loads = rpc.loads
    if extra is not None:
        loads = LoadSpec(
            attribute_maps=[*loads.attribute_maps, *extra.attribute_maps],
            attribute_map_instances=[
                *loads.attribute_map_instances,
                *extra.attribute_map_instances,
            ],
            channels=[*loads.channels, *extra.channels],
            channel_maps=[*loads.channel_maps, *extra.channel_maps],
            channel_map_instances=[*loads.channel_map_instances, *extra.channel_map_instances],
        )
    task = Task(
        task_id="",
        kind="rpc",
        flow_type=flow.flow_type,
        flow_id=flow.flow_id,
        run_id=flow.run_id,
        rpc_name=rpc_name,
        first_attempt_at=time.time(),
        input=msgspec.Raw(input) if input is not None else None,
    )
    _fill_state(tx, task, flow.run_id, loads)
    return task
