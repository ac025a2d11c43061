"""Run the sync ``dex.Worker`` for ``MODULE:FACTORY`` until killed.

Usage: ``python -m tests.e2e_flows.sync_worker_child MODULE:FACTORY`` from the ``sdk``
directory, with ``DEX_SERVER_ADDRESS`` set (see ``tests.e2e_flows.harness``).
"""

from __future__ import annotations

import importlib
import os
import sys

from dex import PullWorkerOptions, Registry, Worker, WorkerOptions

from tests.support.process import ENV_SERVER_ADDRESS


def main() -> None:
    """Build the registry from argv and serve it with a sync Worker (blocks)."""
    module_name, _, attr = sys.argv[1].partition(":")
    registry = getattr(importlib.import_module(module_name), attr)()
    if not isinstance(registry, Registry):
        raise TypeError(f"{sys.argv[1]} did not return a dex.Registry")
    options = WorkerOptions(
        server_address=os.environ[ENV_SERVER_ADDRESS],
        pull=PullWorkerOptions(max_concurrent_tasks=4),
    )
    Worker(registry, None, options).start()


if __name__ == "__main__":
    main()
