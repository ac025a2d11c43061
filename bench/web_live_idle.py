"""What idle open Dex Web pages cost the server: requests per second and CPU.

    uv run python bench/web_live_idle.py [--seconds 30]

Starts a server (``python -m dex_server``, SQLite), starts one Flow that waits for a
message (no Worker: it just stays running), and measures the server process's CPU time
(``utime + stime`` of ``/proc/<pid>/stat``) over ``--seconds``, first with no page open
(the baseline), then with four pages open in Debian's chromium (Playwright): the Flow
list, the sessions list and the approvals inbox (each polls ``/ui/live/version``, answered
``304``) and the Flow's run details (one history Server-Sent Events feed, heartbeats
only). Nothing changes meanwhile, which is what an idle page sees. Requests are counted in
the browser. The last line is::

    web_live_idle seconds=... pages=4 requests=... requests_per_s=... server_cpu_pct=...
        baseline_cpu_pct=... per_page_cpu_pct=...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import dex
from dex_server.testing import running_server
from playwright.async_api import Request, async_playwright

CHROMIUM = os.environ.get("DEX_WEB_CHROMIUM", "/usr/bin/chromium")
WAKE = dex.Channel("wake", int)


class Park(dex.Step[None]):
    async def wait_for(self, ctx: dex.Context, input: None) -> dex.Wait:
        return dex.Wait.until(WAKE.for_one())

    async def execute(self, ctx: dex.Context, input: None) -> dex.StepDecision:
        return dex.StepDecision.graceful_complete(None)


class Parked(dex.Flow[None]):
    def get_steps(self) -> dex.StepList[None]:
        return dex.StepList.start_step(Park())

    def get_persistence_schema(self) -> dex.PersistenceSchema:
        return dex.PersistenceSchema.of(WAKE)


PARKED = Parked()


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(pid: int, seconds: float) -> float:
    """CPU percent of one core the process used over ``seconds``."""
    before, t0 = cpu_s(pid), time.monotonic()
    await asyncio.sleep(seconds)
    return 100.0 * (cpu_s(pid) - before) / (time.monotonic() - t0)


async def main(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_server(Path(tmp) / "srv", fsync=False) as srv:
            client = dex.AsyncClient(
                dex.Registry([PARKED], allow_async_handlers=True),
                options=dex.ClientOptions(server_address=srv.address),
            )
            await client.start_flow(PARKED, "idle-1")
            await client.close()
            await asyncio.sleep(1.0)  # the server settles after the start
            baseline = await measure(srv.pid, seconds)
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
                )
                context = await browser.new_context()
                requests = 0

                def count(request: Request) -> None:
                    nonlocal requests
                    requests += 1

                paths = ["/ui/flows", "/ui/sessions", "/ui/approvals", "/ui/flow?id=idle-1"]
                for p in paths:
                    page = await context.new_page()
                    await page.goto(srv.url + p)
                await asyncio.sleep(2.0)  # first polls and the feed's first page are done
                context.on("request", count)
                idle = await measure(srv.pid, seconds)
                context.remove_listener("request", count)
                await browser.close()
    print(
        f"web_live_idle seconds={seconds:g} pages={len(paths)} requests={requests}"
        f" requests_per_s={requests / seconds:.2f} server_cpu_pct={idle:.2f}"
        f" baseline_cpu_pct={baseline:.2f}"
        f" per_page_cpu_pct={max(0.0, idle - baseline) / len(paths):.3f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    asyncio.run(main(parser.parse_args().seconds))
