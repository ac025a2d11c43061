"""The direct sender's early flush: frames held for the end of a loop pass can leave now.

A transactional RPC's commit makes the turn's next task ready while the client still waits
for its answer: the runtime flushes the dispatcher so that the task is written before the
HTTP answer, and a Step result's held Stream writes are appended after its ready tasks
left. These tests pin what the flush does: it writes what is held, in one batch, and the
end-of-pass write it replaces then writes nothing (in particular no empty batch).
"""

from __future__ import annotations

import asyncio
from typing import cast

import msgspec
from dex._protocol import ServerBatch
from dex_server._ws import DirectWebSocketProtocol
from dex_server.api._worker import _DirectSender
from dex_server.dispatch import Dispatcher, WorkerConn

from tests.test_dispatch_unit import _FlakyHost


class _Link:
    """Records each message written, as the WebSocket protocol's ``write_text`` would."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def write_text(self, data: bytes) -> bool:
        self.messages.append(data)
        return True


def _sender(link: _Link) -> _DirectSender:
    return _DirectSender(cast(DirectWebSocketProtocol, link), batches=True)


async def _one_pass() -> None:
    # call_soon callbacks queued before this point run before it resumes
    await asyncio.sleep(0)


async def test_a_flush_writes_the_held_frames_at_once_as_one_batch() -> None:
    link = _Link()
    sender = _sender(link)
    sender.push(b'{"type":"cancel_task","task_id":"a","reason":"x"}')
    sender.push(b'{"type":"cancel_task","task_id":"b","reason":"x"}')
    assert link.messages == []  # held for the end of the pass
    sender.flush()
    assert len(link.messages) == 1
    batch = msgspec.json.decode(link.messages[0], type=ServerBatch)
    assert len(batch.frames) == 2
    await _one_pass()
    assert len(link.messages) == 1  # the end-of-pass write found nothing left


async def test_frames_pushed_after_a_flush_leave_at_the_end_of_the_pass() -> None:
    link = _Link()
    sender = _sender(link)
    sender.push(b'{"type":"cancel_task","task_id":"a","reason":"x"}')
    sender.flush()
    sender.push(b'{"type":"cancel_task","task_id":"b","reason":"x"}')
    assert len(link.messages) == 1
    await _one_pass()
    assert link.messages[1] == b'{"type":"cancel_task","task_id":"b","reason":"x"}'
    sender.flush()  # nothing held: nothing written
    await _one_pass()
    assert len(link.messages) == 2


async def test_the_dispatcher_flushes_every_connection() -> None:
    dispatcher = Dispatcher(_FlakyHost(0))
    links = []
    for n in range(2):
        conn = WorkerConn(f"w{n}", {"T"}, max_tasks=4, reserved_rpc=1)
        link = _Link()
        sender = _sender(link)
        conn.deliver, conn.flush = sender.push, sender.flush
        dispatcher.conns[conn.id] = conn
        links.append(link)
        conn.deliver(b'{"type":"cancel_task","task_id":"a","reason":"x"}')
    plain = WorkerConn("queued", {"T"}, max_tasks=4, reserved_rpc=1)
    dispatcher.conns[plain.id] = plain  # a send loop's outbox: nothing to write early
    plain.deliver(b"{}")
    dispatcher.flush()
    assert [len(link.messages) for link in links] == [1, 1]
    assert plain.outbox.qsize() == 1
