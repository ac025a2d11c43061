"""A server process tunes its garbage collector before it listens; an embedded one does not.

Each check runs in a child interpreter of its own, so that this test process's collector
stays as pytest set it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from dex_server.app import GC_YOUNG_THRESHOLD

pytestmark = pytest.mark.store_independent

_CHILD = textwrap.dedent(
    """
    import asyncio, gc, json, os, sys
    from pathlib import Path
    from dex_server.app import ServerConfig, serve
    from dex_server.embedded import EmbeddedServer

    folder = Path(sys.argv[1])

    async def main() -> None:
        report = {"start": [gc.get_threshold(), gc.get_freeze_count()]}
        embedded = ServerConfig(database_path=folder / "embedded.sqlite3", port=0, fsync=False)
        async with EmbeddedServer(config=embedded):
            report["embedded"] = [gc.get_threshold(), gc.get_freeze_count()]
        ready = asyncio.Event()
        config = ServerConfig(database_path=folder / "served.sqlite3", port=0, fsync=False)
        server = asyncio.create_task(serve(config, ready=ready))
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({server, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if server.done():
            server.result()  # start-up failed: its error, in the child's output
        report["served"] = [gc.get_threshold(), gc.get_freeze_count()]
        print(json.dumps(report), flush=True)
        os._exit(0)  # the report is all this child is for

    asyncio.run(main())
    """
)


def _report(tmp_path: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def test_serve_raises_the_young_threshold_and_freezes_start_up(tmp_path: Path) -> None:
    report = _report(tmp_path)
    (start_threshold, start_frozen) = report["start"]
    (embedded_threshold, embedded_frozen) = report["embedded"]
    (served_threshold, served_frozen) = report["served"]
    assert start_frozen == 0 and start_threshold[0] != GC_YOUNG_THRESHOLD
    # the embedding application's collector is its own
    assert (embedded_threshold, embedded_frozen) == (start_threshold, start_frozen)
    # a server process: a larger young generation, the older ones as they were
    assert served_threshold == [GC_YOUNG_THRESHOLD, *start_threshold[1:]]
    # the imported modules and the application are frozen (tens of thousands of objects)
    assert served_frozen > 10_000
