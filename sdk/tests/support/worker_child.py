"""Run an AsyncWorker for ``MODULE:FACTORY`` until SIGTERM/SIGINT (see ``WorkerProcess``).

Usage: ``python -m tests.support.worker_child MODULE:FACTORY`` from the ``sdk`` directory.
Configuration comes from the environment variables defined in ``tests.support.process``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import sys
from pathlib import Path

from dex import (
    AsyncWorker,
    BlobCacheConfig,
    PullWorkerOptions,
    Registry,
    WorkerOptions,
    open_blob_cache,
)

from tests.support.process import (
    ENV_APP_WORKER_ID,
    ENV_BLOB_CACHE_DIR,
    ENV_CREDENTIAL,
    ENV_DRAIN_TIMEOUT,
    ENV_MAX_TASKS,
    ENV_READY_FILE,
    ENV_SERVER_ADDRESS,
    ENV_STATS_FILE,
)


def _load_registry(spec: str) -> Registry:
    module_name, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    registry = factory() if callable(factory) and not isinstance(factory, Registry) else factory
    if not isinstance(registry, Registry):
        raise TypeError(f"{spec} returned {type(registry).__name__}, not a dex.Registry")
    return registry


def _options() -> WorkerOptions:
    env = os.environ
    pull = PullWorkerOptions(
        max_concurrent_tasks=int(env.get(ENV_MAX_TASKS, "0")),
        app_worker_id=env.get(ENV_APP_WORKER_ID, ""),
        stop_drain_timeout=float(env.get(ENV_DRAIN_TIMEOUT, "0")),
    )
    return WorkerOptions(
        server_address=env[ENV_SERVER_ADDRESS],
        pull=pull,
        credential=env.get(ENV_CREDENTIAL) or None,
    )


async def _main(spec: str) -> None:
    registry = _load_registry(spec)
    cache_dir = os.environ.get(ENV_BLOB_CACHE_DIR)
    cache = (
        open_blob_cache(BlobCacheConfig(directory=cache_dir, max_bytes=256 * 1024 * 1024))
        if cache_dir
        else None
    )
    worker = AsyncWorker(registry, cache, _options())

    async def announce_ready() -> None:
        await worker.wait_pull_registered(timeout=None)
        ready = os.environ.get(ENV_READY_FILE)
        if ready:
            Path(ready).write_text(str(os.getpid()))

    announcer = asyncio.create_task(announce_ready())
    try:
        await worker.run()
    finally:
        announcer.cancel()
        stats_file = os.environ.get(ENV_STATS_FILE)
        if stats_file:
            tmp = Path(stats_file + ".tmp")
            tmp.write_text(json.dumps(worker.stats.as_dict()))
            os.replace(tmp, stats_file)


def main() -> None:
    """Entry point: parse argv and run the Worker until a stop signal."""
    if len(sys.argv) != 2:
        print("usage: python -m tests.support.worker_child MODULE:FACTORY", file=sys.stderr)
        raise SystemExit(2)
    logging.basicConfig(level=os.environ.get("DEX_WORKER_LOG_LEVEL", "WARNING"))
    asyncio.run(_main(sys.argv[1]))


if __name__ == "__main__":
    main()
