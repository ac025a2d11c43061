"""What both stores do with a group of jobs: its items, and the job-by-job rerun."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from dex_server.store._contract import Tx

Item = tuple[Callable[[Tx], Any], asyncio.Future[Any]]
"""A queued job and the future its caller awaits."""

Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]
"""A job's future, its result, and the exception it raised (``None``: it succeeded)."""


def each_in_savepoint(
    execute: Callable[[str], object],
    tx: Tx,
    batch: list[Item],
    passthrough: tuple[type[BaseException], ...] = (),
) -> list[Outcome]:
    """Run ``batch``'s jobs in the open transaction, each in a savepoint of its own.

    For a group in which a job raised: a job that raises now rolls back only its own
    writes and gets its exception as its outcome. An exception of a ``passthrough`` type
    (the connection is gone, a conflict that restarts the whole group) propagates.
    """
    outcomes: list[Outcome] = []
    for job, fut in batch:
        execute("SAVEPOINT job")
        try:
            result = job(tx)
        except passthrough:
            raise
        except Exception as exc:
            execute("ROLLBACK TO SAVEPOINT job")
            execute("RELEASE SAVEPOINT job")
            outcomes.append((fut, None, exc))
        else:
            execute("RELEASE SAVEPOINT job")
            outcomes.append((fut, result, None))
    return outcomes
