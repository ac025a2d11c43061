"""dexcli end to end: the real command against a real server and a real Worker process.

The Worker is the hello_flow example's (``examples/hello_flow/worker.py``); the tests start
its OrderFlow with the public Client and look at it with ``dexcli``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import dex
import pytest
from dex._protocol import PROTOCOL_VERSION
from dex_server.cli import main
from dex_server.cli._sessions import AttemptGroups, group_events, session_status
from dex_server.testing import RunningServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "hello_flow"
DEXCLI = Path(sys.executable).parent / "dexcli"
STOP_REASON = "operator stopped the order for a manual check"


def dexcli_cmd() -> list[str]:
    return [str(DEXCLI)] if DEXCLI.exists() else [sys.executable, "-m", "dex_server.cli"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run dexcli's ``main`` in this process (fast); see ``run_cli_process`` for the script."""
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update({"COLUMNS": "200", **(env or {})})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Result(code, out.getvalue(), err.getvalue())


def run_cli_process(*args: str, timeout: float = 30) -> Result:
    """Run the installed ``dexcli`` console script as a child process."""
    proc = subprocess.run(
        [*dexcli_cmd(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def wait_until(what: str, probe: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("order_flow", EXAMPLE / "order_flow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["order_flow"] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Stack:
    server: RunningServer
    done_id: str  # a completed OrderFlow
    open_id: str  # an OrderFlow waiting in AwaitShipment

    @property
    def address(self) -> str:
        return self.server.address

    def cli(self, *args: str) -> Result:
        return run_cli("--server", self.address, *args)


async def _start_flows(address: str, example: ModuleType, done_id: str, open_id: str) -> None:
    flow = example.ORDER_FLOW
    options = dex.ClientOptions(server_address=address)
    async with dex.AsyncClient(example.registry(), options=options) as client:
        for flow_id in (done_id, open_id):
            order = example.Order(order_id=flow_id, item="pen", quantity=1, amount_cents=100)
            await client.start_flow(flow, flow_id, order)
        deadline = time.monotonic() + 15
        while True:
            state = await client.get_flow_state(done_id)
            if any(s.step_type == "AwaitShipment" for s in state.active_steps):
                break
            assert time.monotonic() < deadline, "OrderFlow did not reach AwaitShipment"
            await asyncio.sleep(0.02)
        await client.invoke_rpc(flow.confirm_shipment, done_id, "TRACK-1")
        result = await client.wait_for_flow(done_id, timeout=15.0)
        assert result.status is dex.FlowStatus.COMPLETED


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("cli-server")
    server = RunningServer(directory, {})
    asyncio.run(server.start())
    log = open(directory / "worker.log", "wb")
    worker = subprocess.Popen(
        [sys.executable, str(EXAMPLE / "worker.py")],
        env={**os.environ, "DEX_SERVER_ADDRESS": server.address},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        suffix = uuid.uuid4().hex[:8]
        done_id, open_id = f"cli-done-{suffix}", f"cli-open-{suffix}"
        asyncio.run(_start_flows(server.address, load_example(), done_id, open_id))
        yield Stack(server=server, done_id=done_id, open_id=open_id)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        log.close()
        asyncio.run(server.stop())


# --------------------------------------------------------------------------- flow list / show


def test_flow_list_json_and_filters(stack: Stack) -> None:
    listed = stack.cli("--output", "json", "flow", "list")
    assert listed.code == 0, listed.err
    by_id = {f["flowId"]: f for f in listed.json()["flows"]}
    assert by_id[stack.done_id]["status"] == "completed"
    assert by_id[stack.done_id]["flowType"] == "OrderFlow"
    assert "closedAt" in by_id[stack.done_id]
    assert by_id[stack.open_id]["status"] == "running"

    running = stack.cli("-o", "json", "flow", "list", "--type", "OrderFlow", "--status", "running")
    ids = [f["flowId"] for f in running.json()["flows"]]
    assert stack.open_id in ids and stack.done_id not in ids

    first = stack.cli("-o", "json", "flow", "list", "--page-size", "1").json()
    assert len(first["flows"]) == 1 and first["nextPageToken"]
    everything = stack.cli("-o", "json", "flow", "list", "--page-size", "1", "--all").json()
    assert {stack.done_id, stack.open_id} <= {f["flowId"] for f in everything["flows"]}
    assert everything["nextPageToken"] is None


def test_flow_list_table(stack: Stack) -> None:
    listed = stack.cli("flow", "list")
    assert listed.code == 0, listed.err
    assert stack.done_id in listed.out and stack.open_id in listed.out
    assert "completed" in listed.out and "running" in listed.out


def test_flow_show(stack: Stack) -> None:
    shown = stack.cli("-o", "json", "flow", "show", stack.open_id)
    assert shown.code == 0, shown.err
    record = shown.json()
    assert record["flowId"] == stack.open_id and record["status"] == "running"
    assert "status" in record["attributeNames"]
    (step,) = record["activeSteps"]
    assert step["stepType"] == "AwaitShipment" and step["phase"] == "waiting"
    assert step["stepExecutionId"] == "AwaitShipment-1"

    table = stack.cli("flow", "show", stack.open_id)
    assert table.code == 0
    assert "AwaitShipment-1" in table.out and "waiting" in table.out


# --------------------------------------------------------------------------- flow history


def test_flow_history_json_shape(stack: Stack) -> None:
    hist = stack.cli("--output", "json", "flow", "history", stack.done_id)
    assert hist.code == 0, hist.err
    doc = hist.json()
    assert set(doc) == {"flowId", "runId", "events", "nextPageToken"}
    assert doc["flowId"] == stack.done_id and doc["runId"] and doc["nextPageToken"] is None
    types = [e["type"] for e in doc["events"]]
    assert types[0] == "FlowStarted" and types[-1] == "FlowClosed"
    assert "RpcExecutionCompleted" in types
    completed = [e for e in doc["events"] if e["type"] == "StepExecuteCompleted"]
    assert [e["payload"]["context"]["stepType"] for e in completed] == [
        "ReserveStock",
        "ChargePayment",
        "CoolingOff",
        "AwaitShipment",
    ]
    for event in doc["events"]:
        assert set(event) == {"eventId", "eventTime", "type", "payload"}
        assert isinstance(event["eventId"], str) and event["eventId"].isdigit()
        assert event["eventTime"].endswith("Z")
        datetime.fromisoformat(event["eventTime"])  # RFC 3339


def test_flow_history_pages(stack: Stack) -> None:
    whole = stack.cli("-o", "json", "flow", "history", stack.done_id).json()["events"]
    page = stack.cli("-o", "json", "flow", "history", stack.done_id, "--page-size", "2").json()
    assert page["events"] == whole[:2] and page["nextPageToken"]
    second = stack.cli(
        "-o", "json", "flow", "history", stack.done_id,
        "--page-size", "2", "--page-token", page["nextPageToken"],
    ).json()  # fmt: skip
    assert second["events"] == whole[2:4]
    every = stack.cli("-o", "json", "flow", "history", stack.done_id, "--page-size", "2", "--all")
    assert every.json()["events"] == whole and every.json()["nextPageToken"] is None
    by_run = stack.cli(
        "-o", "json", "flow", "history", stack.done_id, "--run-id", page["runId"]
    ).json()
    assert by_run["events"] == whole


def test_flow_history_table(stack: Stack) -> None:
    hist = stack.cli("flow", "history", stack.done_id)
    assert hist.code == 0, hist.err
    assert "StepExecuteCompleted" in hist.out and "ChargePayment-1" in hist.out
    assert "FlowClosed" in hist.out


# --------------------------------------------------------------------------- stop and errors


def test_flow_stop_needs_yes_then_stops(stack: Stack) -> None:
    refused = stack.cli("flow", "stop", stack.open_id)
    assert refused.code == 2
    assert refused.err.count("\n") == 1 and "--yes" in refused.err

    stopped = stack.cli(
        "flow", "stop", stack.open_id, "--type", "terminate", "--reason", STOP_REASON, "--yes"
    )
    assert stopped.code == 0, stopped.err
    wait_until(
        "the Flow to be terminated",
        lambda: (
            stack.cli("-o", "json", "flow", "show", stack.open_id).json()["status"] == "terminated"
        ),
    )
    again = stack.cli("-o", "json", "flow", "stop", stack.open_id, "--yes")
    assert again.code == 1
    error = json.loads(again.err)["error"]
    assert error["code"] == "FLOW_NOT_ACTIVE" and "it is terminated" in error["message"]
    # the history table shows why it stopped
    hist = stack.cli("flow", "history", stack.open_id)
    (closed,) = [ln for ln in hist.out.splitlines() if "FlowClosed" in ln]
    assert "terminated" in closed and STOP_REASON in closed


def test_flow_stop_of_an_unknown_flow_says_not_found(stack: Stack) -> None:
    nope = stack.cli("-o", "json", "flow", "stop", "nope", "--yes")
    assert nope.code == 3
    error = json.loads(nope.err)["error"]
    assert error["code"] == "FLOW_NOT_FOUND" and error["message"] == "no Flow with ID 'nope'"
    assert "not running" not in error["message"]


def test_history_of_an_unknown_run_says_run_not_found(stack: Stack) -> None:
    bogus = stack.cli("-o", "json", "flow", "history", stack.done_id, "--run-id", "bogus")
    assert bogus.code == 3
    error = json.loads(bogus.err)["error"]
    assert error["code"] == "RUN_NOT_FOUND"
    assert f"Flow {stack.done_id!r} has no run 'bogus'" in error["message"]
    neither = stack.cli("-o", "json", "flow", "history", "nope", "--run-id", "bogus")
    assert neither.code == 3 and json.loads(neither.err)["error"]["code"] == "FLOW_NOT_FOUND"


def test_list_of_an_unknown_type_says_so(stack: Stack) -> None:
    # exit 0 (an empty answer is an answer), with a line that names the type
    unknown = stack.cli("flow", "list", "--type", "NoSuchType")
    assert unknown.code == 0, unknown.err
    assert unknown.out.startswith("no Flows of type 'NoSuchType'; types of the newest Flows:")
    assert "OrderFlow" in unknown.out
    case = stack.cli("flow", "list", "--type", "orderflow")
    assert "did you mean 'OrderFlow'?" in case.out
    as_json = stack.cli("-o", "json", "flow", "list", "--type", "NoSuchType")
    assert as_json.code == 0 and as_json.json()["flows"] == []


def test_global_options_after_the_command(stack: Stack) -> None:
    # exactly as docs/getting-started.md writes it
    hist = run_cli("flow", "history", stack.done_id, "-o", "json", "--server", stack.address)
    assert hist.code == 0, hist.err
    assert hist.json()["flowId"] == stack.done_id
    listed = run_cli("flow", "list", f"--server={stack.address}", "--output=json", "--all")
    assert listed.code == 0, listed.err
    assert stack.done_id in {f["flowId"] for f in listed.json()["flows"]}
    mixed = run_cli("--server", stack.address, "flow", "show", stack.done_id, "-ojson")
    assert mixed.json()["status"] == "completed"
    # a usage error after the command still answers in JSON
    bad = run_cli("flow", "list", "--status", "sleeping", "-o", "json")
    assert bad.code == 2 and json.loads(bad.err)["error"]["code"] == "USAGE"


def test_history_payload_times_are_rfc3339(stack: Stack) -> None:
    doc = stack.cli("-o", "json", "flow", "history", stack.done_id).json()
    steps = [e for e in doc["events"] if e["type"] == "StepExecuteCompleted"]
    assert steps
    for event in steps:
        context = event["payload"]["context"]
        assert context["startedTime"].endswith("Z")
        datetime.fromisoformat(context["startedTime"].replace("Z", "+00:00"))
        assert isinstance(context["duration"], float)  # durations stay seconds


def test_piped_tables_do_not_wrap(stack: Stack) -> None:
    proc = subprocess.run(
        [*dexcli_cmd(), "--server", stack.address, "flow", "history", stack.done_id],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "30"},
    )
    assert proc.returncode == 0, proc.stderr
    rows = [ln for ln in proc.stdout.splitlines() if "StepExecuteCompleted" in ln]
    assert len(rows) == 4
    assert all("ChargePayment-1" in r or "attempt 1" in r for r in rows)
    assert all("attempt 1, " in r and r.rstrip().endswith(" ms") for r in rows)


def test_request_errors_are_one_line_with_their_exit_code(stack: Stack) -> None:
    missing = stack.cli("flow", "show", "no-such-flow")
    assert missing.code == 3 and missing.out == ""  # 3: not found
    assert missing.err.startswith("error: ") and missing.err.count("\n") == 1

    as_json = stack.cli("--output", "json", "flow", "history", "no-such-flow")
    assert as_json.code == 3
    assert json.loads(as_json.err)["error"]["code"] == "FLOW_NOT_FOUND"

    down = run_cli("--server", "127.0.0.1:1", "--timeout", "5", "-o", "json", "health")
    assert down.code == 4  # 4: the server cannot be reached
    error = json.loads(down.err)["error"]
    assert error["code"] == "UNAVAILABLE"
    assert "cannot reach the Dex server at 127.0.0.1:1" in error["message"]
    listed = run_cli("flow", "list", "--server", "127.0.0.1:1", "--timeout", "5")
    assert listed.code == 4 and "127.0.0.1:1" in listed.err


def test_usage_errors_exit_2(stack: Stack) -> None:
    bad_type = stack.cli("-o", "json", "flow", "stop", stack.done_id, "--type", "pause", "--yes")
    assert bad_type.code == 2 and json.loads(bad_type.err)["error"]["code"] == "USAGE"
    bad_status = stack.cli("flow", "list", "--status", "sleeping")
    assert bad_status.code == 2 and bad_status.err.count("\n") == 1
    unknown = stack.cli("flow", "list", "--bogus")
    assert unknown.code == 2 and unknown.err.count("\n") == 1


def test_console_script(stack: Stack) -> None:
    listed = run_cli_process("--server", stack.address, "-o", "json", "flow", "list")
    assert listed.code == 0, listed.err
    assert stack.done_id in {f["flowId"] for f in listed.json()["flows"]}
    missing = run_cli_process("--server", stack.address, "-o", "json", "flow", "show", "nope")
    assert missing.code == 3
    assert json.loads(missing.err)["error"]["code"] == "FLOW_NOT_FOUND"


def test_health_and_version(stack: Stack) -> None:
    health = stack.cli("-o", "json", "health")
    assert health.code == 0, health.err
    assert health.json()["ok"] is True and health.json()["store"]
    assert stack.cli("health").out.startswith(f"{stack.address}: ok")
    version = run_cli("-o", "json", "version")
    assert version.code == 0 and version.json()["protocol"] == PROTOCOL_VERSION
    assert run_cli("version").out.startswith("dexcli ")
    assert run_cli("version", "-o", "json").json()["protocol"] == PROTOCOL_VERSION


def test_version_imports_neither_typer_nor_the_sdk() -> None:
    # the fast path of `dexcli version`: only the standard library is imported
    probe = (
        "import sys\n"
        "from dex_server.cli import main\n"
        "try:\n"
        "    main(['version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in ('typer', 'rich', 'dex', 'httpx') if m in sys.modules)\n"
        "print('heavy=' + ','.join(heavy))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.splitlines()[-1] == "heavy=", proc.stdout


def test_token_from_option_and_env(tmp_path: Path) -> None:
    server = RunningServer(tmp_path, {"token": "s3cret"})
    asyncio.run(server.start())
    try:
        base = ("--server", server.address, "-o", "json")
        assert run_cli(*base, "health").code == 0  # health needs no token
        denied = run_cli(*base, "flow", "list")
        assert denied.code == 1
        assert json.loads(denied.err)["error"]["code"] == "UNAUTHENTICATED"
        message = json.loads(denied.err)["error"]["message"]
        assert server.address in message and "--token" in message and "DEX_TOKEN" in message
        assert run_cli(*base, "--token", "s3cret", "flow", "list").code == 0
        assert run_cli(*base, "flow", "list", env={"DEX_TOKEN": "s3cret"}).code == 0
    finally:
        asyncio.run(server.stop())


# --------------------------------------------------------------------------- session helpers


def test_attempt_grouping_keeps_the_highest_attempt() -> None:
    def ev(step: str, attempt: int, kind: str, text: str = "") -> dict[str, Any]:
        data = {"text": text} if text else {}
        return {
            "type": kind,
            "turn_id": "turn-1",
            "step_execution_id": step,
            "attempt": attempt,
            "data": data,
        }

    events = [
        ev("RunModel-1", 1, "text_delta", "partial fir"),
        ev("CallTool-1", 1, "tool_call_started"),
        ev("RunModel-1", 2, "text_delta", "second "),
        ev("RunModel-1", 1, "text_delta", "late, from the lost attempt"),
        ev("RunModel-1", 2, "text_delta", "try"),
    ]
    groups = group_events(events)
    assert [(g["stepExecutionId"], g["attempt"], g["text"]) for g in groups] == [
        ("CallTool-1", 1, ""),
        ("RunModel-1", 2, "second try"),
    ]
    live = AttemptGroups()
    seen = [live.offer(e) for e in events]
    assert seen == [(True, None), (True, None), (True, 1), (False, None), (True, None)]


def test_session_status_words() -> None:
    assert session_status("running", None, []) == "starting"
    assert session_status("running", {"status": "running_model"}, []) == "running-model"
    assert session_status("running", {"status": "running_tools"}, [{}]) == "awaiting-approval"
    state = {"status": "waiting_for_user_message"}
    assert session_status("running", state, []) == "waiting-for-message"
    assert session_status("canceled", state, []) == "canceled"
