"""Inline executes: a Step's ``execute`` sent with the result that satisfies its Wait.

For a Step whose options say ``execute_inline``, a Worker that ran the Step's ``wait_for``
follows what it sends for the same run afterwards. When one of its results completes the
Wait (``n`` messages of one Channel that was empty in the ``wait_for``'s snapshot), it
rebuilds the task the server would build for the ``execute`` from that snapshot and the
results in between, runs the method on it, and sends the outcome with the result
(``TaskResult.inline_execute``). The server takes it only if the task it builds has the
same digest, so a change the Worker did not see (another Worker's result, an RPC, a value
kept as a blob) sends the ``execute`` the usual way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from msgspec import Raw

from dex._invoke import NotInline
from dex._protocol import (
    ConditionResultsWire,
    InlineExecute,
    StateValues,
    Task,
    TaskResult,
    WaitSpec,
    task_digest,
)
from dex._registry import Registry

log = logging.getLogger("dex.worker")

# an inline execute that takes longer is not worth holding the result it rides with
_INLINE_EXECUTE_S = 1.0
# runs followed at once per connection (a Wait satisfied elsewhere leaves its entry behind)
_MAX_FOLLOWED = 1024
# results followed per run before giving up on it
_MAX_SINCE = 256


class _InlineIO:
    """The ``TaskIO`` of an inline execute: anything beyond its result falls back."""

    task_id = ""
    cancelled = False

    async def heartbeat(self, value: bytes | None, *, has_value: bool, durable: bool) -> None:
        raise NotInline("heartbeat")

    def stream_write(self, stream: str, value: bytes) -> None:
        raise NotInline("Stream write")

    def is_cancelled(self) -> bool:
        return False

    async def read_state(
        self,
        map_name: str,
        *,
        names: list[str] | None,
        start: str | None,
        end: str | None,
        limit: int | None,
    ) -> StateValues:
        raise NotInline("state read")


@dataclass
class _Pending:
    """A ``wait_for`` of an ``execute_inline`` Step, and what this Worker sent since."""

    base: Task
    channel: str = ""  # set once the wait_for's result (and so its Wait) was sent
    count: int = 0
    locals: dict[str, Raw] = field(default_factory=dict)
    since: list[TaskResult] = field(default_factory=list)


def _channel_count(wait: WaitSpec | None) -> tuple[str, int] | None:
    """``(channel, n)`` of a Wait for exactly ``n`` messages of one Channel, else None."""
    if wait is None or wait.mode != "all" or len(wait.conditions) != 1:
        return None
    c = wait.conditions[0]
    if c.kind != "channel" or c.channel is None or c.max_count != c.min_count:
        return None
    return c.channel, c.min_count


class InlineExecutes:
    """The Worker side of ``StepOptions.execute_inline`` for one connection."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._runs: dict[str, _Pending] = {}

    def _marked(self, task: Task) -> bool:
        try:
            entry = self._registry.flow_entry(task.flow_type)
        except KeyError:
            return False
        step = entry.steps.get(task.step_type or "")
        return step is not None and step.spec.options.execute_inline

    def on_task(self, task: Task) -> None:
        """Follow the run of a ``wait_for`` task of an ``execute_inline`` Step."""
        if task.kind == "wait_for" and task.attempt == 1 and self._marked(task):
            self._runs.pop(task.run_id, None)  # newest last, for the bound below
            self._runs[task.run_id] = _Pending(base=task)
            while len(self._runs) > _MAX_FOLLOWED:
                del self._runs[next(iter(self._runs))]
            return
        pending = self._runs.get(task.run_id)
        if pending is not None and task.step_execution_id == pending.base.step_execution_id:
            del self._runs[task.run_id]  # the server sent the method: nothing to do here

    def forget(self) -> None:
        """The connection is gone: what it sent is not known to be applied in order."""
        self._runs.clear()

    async def before_send(
        self,
        task: Task,
        result: TaskResult,
        invoke: Callable[[Task, _InlineIO], Awaitable[TaskResult]],
    ) -> None:
        """Attach the inline execute to ``result`` when it completes a followed Wait.

        Called right before ``result`` is queued, in the order results are sent.
        """
        pending = self._runs.get(task.run_id)
        if pending is None:
            return
        if result.error is not None:  # a failed attempt commits nothing
            if task.task_id == pending.base.task_id:
                del self._runs[task.run_id]  # its retry is another task
            return
        if task.kind == "rpc":  # an RPC's effects commit at another moment
            del self._runs[task.run_id]
            return
        if task.task_id == pending.base.task_id:
            found = _channel_count(result.wait)
            if found is None or pending.base.channel_sizes.get(found[0], 0):
                del self._runs[task.run_id]
                return
            pending.channel, pending.count = found
            pending.locals = {**pending.base.locals, **result.locals}
        if len(pending.since) >= _MAX_SINCE:
            del self._runs[task.run_id]  # a Wait satisfied elsewhere, most likely
            return
        pending.since.append(result)
        if not pending.channel:
            return
        values = [
            p.value for r in pending.since for p in r.publishes if p.channel == pending.channel
        ]
        if len(values) < pending.count:
            return
        del self._runs[task.run_id]
        execute = self._execute_task(pending, values[: pending.count])
        if execute is None:
            return
        try:
            async with asyncio.timeout(_INLINE_EXECUTE_S):
                outcome = await invoke(execute, _InlineIO())
        except (NotInline, TimeoutError) as exc:
            log.debug("%s execute not run inline (%r)", execute.step_type, exc)
            return
        if outcome.error is not None or outcome.inline_execute is not None:
            return
        assert execute.step_execution_id is not None
        result.inline_execute = InlineExecute(
            execution_id=execute.step_execution_id, digest=task_digest(execute), result=outcome
        )

    @staticmethod
    def _execute_task(pending: _Pending, taken: list[Raw]) -> Task | None:
        """The ``execute`` task the server builds once the Wait took ``taken``, or None."""
        base = pending.base
        if base.blob_refs or base.input_blob:
            return None
        attributes = dict(base.attributes)
        sizes = dict(base.channel_sizes)
        maps = set(base.loaded_maps)
        for r in pending.since:
            if r.channel_deletes:
                return None
            for name, value in r.attribute_writes.items():
                head, sep, _ = name.partition("/")
                if sep and head not in maps:
                    continue  # an instance of a map the snapshot does not hold
                if value is None or bytes(value) == b"null":
                    attributes.pop(name, None)
                else:
                    attributes[name] = value
            for p in r.publishes:
                sizes[p.channel] = sizes.get(p.channel, 0) + 1
        sizes[pending.channel] -= len(taken)
        return Task(
            task_id="",
            kind="execute",
            flow_type=base.flow_type,
            flow_id=base.flow_id,
            run_id=base.run_id,
            step_type=base.step_type,
            step_execution_id=base.step_execution_id,
            from_step_execution_id=base.from_step_execution_id,
            attempt=1,
            heartbeat_timeout_s=base.heartbeat_timeout_s,
            input=base.input,
            attributes=attributes,
            loaded_maps=list(base.loaded_maps),
            channel_sizes={k: v for k, v in sizes.items() if v > 0},
            condition_results=ConditionResultsWire(
                channel_values=[taken], channel_names=[pending.channel]
            ),
            locals=pending.locals,
        )
