"""A Worker and a Client on the server's machine reach it through its Unix socket.

A real server started with ``--unix-socket`` and a token; the Worker is a child process
given only ``unix:///PATH`` (no TCP address at all), so every frame and every HTTP request
it sends (the large values it reads come over HTTP) goes through the socket. The Client
uses the same address. Values over the blob threshold make both sides use HTTP beside the
WebSocket.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dex import AsyncClient, ClientOptions, FlowStatus, WorkerOptions
from dex_server.testing import running_server

from tests.e2e_flows.common import read_log
from tests.e2e_flows.large_flows import FILLER, FillPlan, registry
from tests.support.process import WorkerProcess

LARGE = "tests.e2e_flows.large_flows:registry"
TOKEN = "unix-s3cret"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # a Unix socket's path is limited to 107 bytes; pytest's folders can be longer
    path = Path(tempfile.mkdtemp(prefix="dexu-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_worker_and_a_client_run_a_flow_through_the_unix_socket(
    tmp_path: Path, short_dir: Path
) -> None:
    sock = short_dir / "dex.sock"
    address = f"unix://{sock}"
    gates = tmp_path / "gates"
    gates.mkdir()
    async with running_server(tmp_path / "server", token=TOKEN, unix_socket=sock) as server:
        assert sock.exists()
        with WorkerProcess(
            LARGE, server_address=address, credential=TOKEN, gate_dir=gates
        ) as worker:
            options = ClientOptions(server_address=address, credential=TOKEN, timeout=60)
            async with AsyncClient(registry(), options=options) as client:
                flow_id = "over-the-socket"
                size = 300 * 1024  # over the blob threshold: values travel beside the frames
                await client.start_flow(FILLER, flow_id, FillPlan(count=3, size=size))
                result = await client.wait_for_flow(flow_id, timeout=60)
                assert result.status is FlowStatus.COMPLETED, result
                assert result.single_output(int) == 3
                # the RPC runs on the Worker, which fetches the three values over HTTP
                sizes = await client.invoke_rpc(FILLER.sizes, flow_id)
                assert sizes == [size - 2] * 3 + [0] * 5
            assert worker.is_alive()
        assert [ln.split()[:2] for ln in read_log(gates, "large")] == [["fill", flow_id]]
        # the same Flow, read over TCP: one server behind both
        options = ClientOptions(server_address=server.address, credential=TOKEN)
        async with AsyncClient(registry(), options=options) as client:
            described = await client.describe_flow(flow_id)
            assert described.status is FlowStatus.COMPLETED
    assert not sock.exists()


async def test_a_wrong_token_over_the_unix_socket_is_refused(
    tmp_path: Path, short_dir: Path
) -> None:
    sock = short_dir / "dex.sock"
    async with running_server(tmp_path / "server", token=TOKEN, unix_socket=sock):
        options = ClientOptions(server_address=f"unix://{sock}", credential="wrong")
        async with AsyncClient(registry(), options=options) as client:
            with pytest.raises(Exception, match="(?i)token|unauthenticated|401"):
                await client.describe_flow("nothing-here")


@pytest.mark.parametrize("address", ["unix:", "unix://", "  unix:  "])
def test_a_unix_address_without_a_path_is_refused_when_the_options_are_built(
    address: str,
) -> None:
    with pytest.raises(ValueError, match="names no socket"):
        WorkerOptions(server_address=address)
    with pytest.raises(ValueError, match="names no socket"):
        ClientOptions(server_address=address)


def test_the_unix_address_forms_name_the_same_socket() -> None:
    from dex._env import unix_socket_path

    assert unix_socket_path("unix:///run/dex/dex.sock") == "/run/dex/dex.sock"
    assert unix_socket_path("unix:/run/dex/dex.sock") == "/run/dex/dex.sock"
    assert unix_socket_path("unix:dex.sock") == "dex.sock"
    assert unix_socket_path("localhost:8801") is None
    assert unix_socket_path("http://unix.example:80") is None
