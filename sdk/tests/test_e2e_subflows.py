"""End to end SubFlows: a real server, Worker children, parents waiting on child Flows.

Runs on SQLite, and on PostgreSQL with ``DEX_TEST_DATABASE=postgres`` (where one test puts
the parent and the child on two servers sharing the database).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_asyncio
from dex import (
    AsyncClient,
    ClientOptions,
    FlowConfig,
    FlowNotFoundError,
    FlowStatus,
    StartFlowOptions,
    StepDurability,
)
from dex_server.testing import (
    RunningServer,
    create_test_database,
    drop_test_database,
    selected_database,
)

from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import Stack, e2e_stack, registry, unique_id
from tests.e2e_flows.subflow_flows import CHILD, IMPATIENT, PARENT, TWINS
from tests.support import FileGate, WorkerProcess, async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """One server and Worker for the tests that kill nothing (their tags keep them apart)."""
    async with e2e_stack(tmp_path_factory.mktemp("e2e-subflows")) as running:
        yield running


def child_id(parent_id: str, step: str = "Spawn", index: int = 0) -> str:
    return f"SubFlow:{parent_id}-{step}-1-{index}"


def child_runs(directory: Path, tag: str) -> list[str]:
    """The child runs logged for ``tag`` (parents log to the same file)."""
    return [line for line in read_log(directory, tag) if line.startswith("child")]


def stored_runs(server: RunningServer, flow_id: str) -> list[dict[str, Any]]:
    """The stored run records of ``flow_id``, read from the server's database itself."""
    if server.database_url is not None:
        import psycopg

        with psycopg.connect(server.database_url) as conn:
            rows = conn.execute("SELECT data FROM flows WHERE flow_id=%s", (flow_id,)).fetchall()
    else:
        with contextlib.closing(sqlite3.connect(server.database_path)) as db:
            rows = db.execute("SELECT data FROM flows WHERE flow_id=?", (flow_id,)).fetchall()
    return [msgspec.json.decode(bytes(r[0])) for r in rows]


async def wait_child_waiting(client: AsyncClient, kid: str) -> None:
    """Poll until the child ``kid`` exists and its Step waits (on its ``go`` Channel)."""

    async def probe() -> bool | None:
        try:
            state = await client.get_flow_state(kid)
        except FlowNotFoundError:
            return None
        return any(s.phase == "waiting" for s in state.active_steps) or None

    await async_wait_until(f"{kid} waits", probe, timeout=20)


async def run_parent(client: AsyncClient, parent_id: str, value: str) -> dict[str, Any]:
    await client.start_flow(PARENT, parent_id, value)
    result = await client.wait_for_flow(parent_id, timeout=30)
    assert result.status is FlowStatus.COMPLETED, result
    out: dict[str, Any] = result.single_output(dict)
    return out


async def test_parent_starts_a_child_and_gets_its_result(stack: Stack) -> None:
    tag = unique_id("sub-ok")
    out = await run_parent(stack.client, tag, f"default|ok|{tag}")

    child = await stack.client.describe_flow(child_id(tag))
    assert out == {
        "flow_id": child_id(tag),
        "status": "COMPLETED",
        "error": None,
        "output": f"child ok {tag} run {child.run_id}",
        "timer": False,
    }
    assert child.status is FlowStatus.COMPLETED
    # the child run keeps its parent's Flow ID (what the DexParentFlowID index reads)
    [record] = await asyncio.to_thread(stored_runs, stack.server, child_id(tag))
    assert record["parent_flow_id"] == tag and "subflow_waiters" not in record
    assert child_runs(stack.directory, tag) == ["child ok"]


async def test_a_failed_child_is_seen_by_the_parent_which_goes_on(stack: Stack) -> None:
    tag = unique_id("sub-fail")
    out = await run_parent(stack.client, tag, f"default|fail|{tag}")

    assert out["status"] == "FAILED"
    assert f"child {tag} failed on purpose" in out["error"]
    assert out["output"] is None


async def test_two_children_of_one_wait_get_their_own_ids(stack: Stack) -> None:
    tag = unique_id("sub-two")
    await stack.client.start_flow(TWINS, tag, tag)
    result = await stack.client.wait_for_flow(tag, timeout=30)

    assert result.single_output(list) == [
        [child_id(tag, "SpawnTwo", 0), "COMPLETED"],
        [child_id(tag, "SpawnTwo", 1), "FAILED"],
    ]


async def test_reuse_policies_when_the_child_id_already_has_a_run(stack: Stack) -> None:
    c = stack.client
    # ATTACH: a second parent run with the same ID waits for the child that completed
    a = unique_id("sub-attach")
    first = await run_parent(c, a, f"attach|ok|{a}")
    again = await run_parent(c, a, f"attach|fail|{a}")
    assert again == first and first["status"] == "COMPLETED"
    assert child_runs(stack.directory, a) == ["child ok"]

    # default: restart after an abnormal end, reuse a success
    d = unique_id("sub-default")
    failed = await run_parent(c, d, f"default|fail|{d}")
    assert failed["status"] == "FAILED"
    restarted = await run_parent(c, d, f"default|ok|{d}")
    assert restarted["status"] == "COMPLETED"
    reused = await run_parent(c, d, f"default|fail|{d}")
    assert reused == restarted
    assert child_runs(stack.directory, d) == ["child fail", "child ok"]

    # ALWAYS_RESTART: a new child run every time
    r = unique_id("sub-restart")
    one = await run_parent(c, r, f"always_restart|ok|{r}")
    two = await run_parent(c, r, f"always_restart|ok|{r}")
    assert one["status"] == two["status"] == "COMPLETED"
    assert one["output"] != two["output"]
    assert child_runs(stack.directory, r) == ["child ok", "child ok"]


async def test_reuse_policies_when_the_child_is_still_running(stack: Stack) -> None:
    c = stack.client
    tag = unique_id("sub-running")
    kid = child_id(tag)
    await c.start_flow(PARENT, tag, f"default|hold|{tag}")
    await wait_child_waiting(c, kid)
    held = await c.describe_flow(kid)
    await c.stop_flow(tag)  # the parent goes; its child keeps running
    await c.wait_for_flow(tag, timeout=30)
    assert (await c.describe_flow(kid)).status is FlowStatus.RUNNING

    # the default policy attaches to the running child: releasing it completes the parent
    await c.start_flow(PARENT, tag, f"default|hold|{tag}")
    await c.invoke_rpc(CHILD.release, kid, "go")
    out = (await c.wait_for_flow(tag, timeout=30)).single_output(dict)
    assert out["output"] == f"child hold {tag} run {held.run_id}"

    # ALWAYS_RESTART terminates a running child and starts a new run
    again = unique_id("sub-restart-running")
    await c.start_flow(PARENT, again, f"always_restart|hold|{again}")
    await wait_child_waiting(c, child_id(again))
    first = await c.describe_flow(child_id(again))
    await c.stop_flow(again)
    await c.wait_for_flow(again, timeout=30)
    await c.start_flow(PARENT, again, f"always_restart|ok|{again}")
    out = (await c.wait_for_flow(again, timeout=30)).single_output(dict)
    # a new run: one ID has one running run at most, so the held one was terminated
    assert out["status"] == "COMPLETED" and first.run_id not in out["output"]
    latest = await c.describe_flow(child_id(again))
    assert latest.status is FlowStatus.COMPLETED and latest.run_id != first.run_id


async def test_a_child_that_cannot_start_fails_the_wait_and_starts_nothing(stack: Stack) -> None:
    tag = unique_id("sub-refused")
    await stack.client.start_flow(PARENT, tag, f"retry|ok|{tag}")
    result = await stack.client.wait_for_flow(tag, timeout=30)

    assert result.status is FlowStatus.FAILED
    assert "SubFlow retries (SubFlowOptions.retry_policy)" in (result.error_message or "")
    with pytest.raises(FlowNotFoundError):
        await stack.client.describe_flow(child_id(tag))


async def test_a_child_inherits_its_parents_config_and_its_override_wins(stack: Stack) -> None:
    c = stack.client
    parent_config = FlowConfig(step_durability=StepDurability.ASYNC, continue_as_new_threshold=3)
    options = StartFlowOptions(config_override=parent_config)
    plain, override = unique_id("sub-cfg"), unique_id("sub-cfg-over")
    await c.start_flow(PARENT, plain, f"default|ok|{plain}", options)
    await c.start_flow(PARENT, override, f"config|ok|{override}", options)
    for parent_id in (plain, override):
        result = await c.wait_for_flow(parent_id, timeout=30)
        assert result.status is FlowStatus.COMPLETED, result

    assert (await c.describe_flow(child_id(plain))).config == parent_config
    merged = (await c.describe_flow(child_id(override))).config
    assert merged == FlowConfig(step_durability=StepDurability.ASYNC, continue_as_new_threshold=7)
    # the parent keeps its own config
    assert (await c.describe_flow(override)).config == parent_config


async def test_a_child_with_a_timeout_times_out_and_its_parent_sees_it(stack: Stack) -> None:
    tag = unique_id("sub-timeout")
    out = await run_parent(stack.client, tag, f"timeout|hold|{tag}")

    assert out["status"] == "FAILED"
    assert "soft timeout" in out["error"]
    child = await stack.client.describe_flow(child_id(tag))
    assert child.status is FlowStatus.FAILED and child.timeout_at is not None
    result = await stack.client.wait_for_flow(child_id(tag), timeout=5)
    assert "soft timeout of 0.5 s" in (result.error_message or "")


async def test_children_are_found_by_their_parents_flow_id(stack: Stack) -> None:
    tag = unique_id("sub-search")
    await stack.client.start_flow(TWINS, tag, tag)
    await stack.client.wait_for_flow(tag, timeout=30)

    page = await stack.client.search_flows(f"DexParentFlowID = '{tag}'", 10)
    assert sorted(f.flow_id for f in page.flows) == [
        child_id(tag, "SpawnTwo", 0),
        child_id(tag, "SpawnTwo", 1),
    ]
    # a system field, not an Attribute of the child
    assert all("DexParentFlowID" not in f.indexed_attributes for f in page.flows)
    page = await stack.client.search_flows(
        f"DexParentFlowID STARTS_WITH '{tag}' AND FlowId = '{child_id(tag, 'SpawnTwo', 1)}'", 10
    )
    assert [f.flow_id for f in page.flows] == [child_id(tag, "SpawnTwo", 1)]
    page = await stack.client.search_flows(f"FlowId = '{tag}' AND DexParentFlowID IS NULL", 10)
    assert [f.flow_id for f in page.flows] == [tag]


async def test_parent_completing_does_not_cancel_its_child(stack: Stack) -> None:
    c = stack.client
    tag = unique_id("sub-leave")
    await c.start_flow(IMPATIENT, tag, tag)
    result = await c.wait_for_flow(tag, timeout=30)
    out = result.single_output(dict)
    # the Timer won the any_of: the child is read as a running snapshot
    assert out["timer"] is True and out["status"] == "RUNNING"

    kid = child_id(tag, "SpawnOrTimeout")
    assert (await c.describe_flow(kid)).status is FlowStatus.RUNNING
    await c.invoke_rpc(CHILD.release, kid, "go")
    done = await c.wait_for_flow(kid, timeout=30)
    assert done.status is FlowStatus.COMPLETED
    assert done.single_output(str).startswith(f"child hold {tag}")


async def test_parent_resumes_once_after_its_worker_is_killed_while_the_child_runs(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path) as stack:
        tag = unique_id("sub-kill")
        await stack.client.start_flow(PARENT, tag, f"default|gate|{tag}")
        await FileGate(tmp_path, f"{tag}-child").async_wait_until_reached(timeout=20)

        stack.workers[0].kill()
        replacement = await stack.start_worker()
        result = await stack.client.wait_for_flow(tag, timeout=60)

        out = result.single_output(dict)
        assert out["status"] == "COMPLETED"
        assert out["output"].startswith(f"child gate {tag}")
        parent_runs = [line for line in read_log(tmp_path, tag) if line.startswith("parent")]
        assert parent_runs == [f"parent-execute 1 {replacement.pid}"]
        assert child_runs(tmp_path, tag) == ["child gate", "child gate"]


@pytest.mark.skipif(selected_database() != "postgres", reason="needs DEX_TEST_DATABASE=postgres")
async def test_parent_and_child_on_two_servers_of_one_database(tmp_path: Path) -> None:
    url = await asyncio.to_thread(create_test_database)
    servers = [RunningServer(tmp_path / f"s{i}", {"database_url": url}) for i in range(2)]
    workers: list[WorkerProcess] = []
    clients: list[AsyncClient] = []
    try:
        for s in servers:
            s.directory.mkdir(parents=True)
            await s.start()
        # the parent's Worker serves only parents (server 0), the child's only children
        for factory, s in (("parents_only", servers[0]), ("children_only", servers[1])):
            w = WorkerProcess(
                f"tests.e2e_flows.subflow_flows:{factory}",
                server_address=s.address,
                gate_dir=tmp_path,
            )
            workers.append(w)
            await asyncio.to_thread(w.start)
        clients = [
            AsyncClient(registry(), options=ClientOptions(server_address=s.address))
            for s in servers
        ]
        tag = unique_id("sub-two-servers")
        await clients[0].start_flow(PARENT, tag, f"default|hold|{tag}")
        kid = child_id(tag)

        await wait_child_waiting(clients[1], kid)
        await clients[1].invoke_rpc(CHILD.release, kid, "go")
        result = await clients[0].wait_for_flow(tag, timeout=30)
        out = result.single_output(dict)
        assert out["status"] == "COMPLETED"
        assert out["output"].startswith(f"child hold {tag}")
        assert (await clients[0].describe_flow(kid)).status is FlowStatus.COMPLETED
    finally:
        for cl in clients:
            await cl.close()
        for w in workers:
            w.close()
        for s in servers:
            await s.stop()
        await asyncio.to_thread(drop_test_database, url)
