"""On-demand state reads by running tasks (the ``ReadState`` Worker frame)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from dex._protocol import ErrorCode, ReadState, StateValues

from dex_server.store import StoredValue, Tx

if TYPE_CHECKING:
    from dex_server.dispatch import WorkerConn
    from dex_server.service._runtime import Runtime

log = logging.getLogger("dex_server.reads")


async def read_state(runtime: Runtime, conn: WorkerConn, frame: ReadState) -> None:
    """Answer ``frame`` on ``conn`` with the committed instances it asks for.

    Scoped to the run of the task: a task this connection does not hold (unknown,
    finished, cancelled) gets ``FLOW_NOT_ACTIVE``; a map the Flow type does not declare
    as an AttributeMap, or a name outside the map, gets ``BAD_REQUEST``. Values come from
    the store's reader (committed state at read time), blob references stay references.
    """

    def refuse(code: str, message: str) -> None:
        conn.send(
            StateValues(
                task_id=frame.task_id, request_id=frame.request_id, error_code=code, error=message
            )
        )

    inflight = runtime.dispatcher.get(conn, frame.task_id)
    if inflight is None:
        refuse(ErrorCode.FLOW_NOT_ACTIVE, f"task {frame.task_id!r} is not running on this Worker")
        return
    env = inflight.env
    # any version of the Flow type: the run may be of an older one than the current
    if not runtime.specs.declares(env.flow_type, frame.map, "attribute_map"):
        refuse(
            ErrorCode.BAD_REQUEST,
            f"Flow type {env.flow_type!r} declares no AttributeMap {frame.map!r}",
        )
        return
    prefix = frame.map + "/"
    if frame.names is not None and any(not n.startswith(prefix) for n in frame.names):
        refuse(ErrorCode.BAD_REQUEST, f"a name outside AttributeMap {frame.map!r} was requested")
        return
    if frame.limit is not None and frame.limit < 1:
        refuse(ErrorCode.BAD_REQUEST, "limit must be at least 1")
        return
    run_id, names = env.run_id, frame.names

    def job(tx: Tx) -> list[tuple[str, StoredValue]]:
        if names is not None:
            found = tx.state.of_names(run_id, names)
            return sorted(found.items())
        return tx.state.of_range(run_id, frame.map, frame.start, frame.end, frame.limit)

    try:
        rows = await runtime.store.read(job)
    except Exception as exc:  # the store failed: the handler sees an error, not a hang
        log.exception("state read failed")
        refuse(ErrorCode.UNAVAILABLE, f"state read failed: {exc}")
        return
    answer = StateValues(task_id=frame.task_id, request_id=frame.request_id)
    for name, value in rows:
        if value.blob is not None:
            answer.blob_refs[name] = value.blob
        elif value.value is not None:
            answer.values[name] = value.value
        else:
            continue
        answer.names.append(name)
    conn.send(answer)
