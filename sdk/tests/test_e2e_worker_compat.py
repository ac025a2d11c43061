"""Workers, codecs, blob caches and credentials as code written for the Dex model uses them.

Every test runs a real server subprocess and a real in-process Worker: a ``Codec`` of the
``Value`` API carries Flow inputs, Attributes and RPC values; user ``BlobCache`` objects
are accepted; ``with``/``async with`` close Workers; ``FileCredential`` and
``ApiKeyCredential`` authenticate Clients and Workers against a server with a token.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dex import (
    ApiKeyCredential,
    AsyncClient,
    AsyncWorker,
    Attribute,
    ClientOptions,
    CodecRegistry,
    Context,
    FileCredential,
    Flow,
    FlowStatus,
    JsonCodec,
    PersistenceSchema,
    PullRegistrationError,
    PullWorkerOptions,
    Registry,
    Step,
    StepDecision,
    StepList,
    Value,
    WireKind,
    Worker,
    WorkerOptions,
    WorkerTarget,
    rpc,
)
from dex_server.testing import RunningServer, running_server

from tests.e2e_flows.harness import unique_id
from tests.support import async_wait_until
from tests.support.blob_caches import DictBlobCache

TOKEN = "e2e-compat-token"

# --------------------------------------------------------------------------- custom types


class Money:
    """Not a dataclass: no built-in codec knows it."""

    __slots__ = ("cents", "currency")

    def __init__(self, cents: int, currency: str) -> None:
        self.cents = cents
        self.currency = currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.cents, self.currency) == (
            other.cents,
            other.currency,
        )

    def __hash__(self) -> int:
        return hash((self.cents, self.currency))

    def __repr__(self) -> str:
        return f"Money({self.cents}, {self.currency!r})"


class MoneyCodec:
    """A codec written against the ``Codec`` protocol: ``Value``s of kind STRING."""

    @property
    def type_name(self) -> str:
        return "Money"

    @property
    def wire_kind(self) -> WireKind:
        return WireKind.STRING

    def encode(self, value: Money) -> Value:
        if not isinstance(value, Money):
            raise TypeError(f"Money requires Money, got {type(value).__name__}")
        return Value(WireKind.STRING, f"{value.cents} {value.currency}")

    def decode(self, value: Value) -> Money:
        cents, currency = str(value.data).split(" ")
        return Money(int(cents), currency)


class Tag:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tag) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


TAG_CODEC: JsonCodec[Tag] = JsonCodec(
    "Tag", lambda data: Tag(data["name"]), lambda tag: {"name": tag.name}, Tag
)

BALANCE = Attribute("balance", Money)


class Double(Step[Money]):
    def execute(self, context: Context, input: Money) -> StepDecision:
        doubled = Money(input.cents * 2, input.currency)
        return StepDecision.graceful_complete(f"{doubled.cents} {doubled.currency}")


class PriceFlow(Flow[Money]):
    """Start input of a custom type; completes with its doubled amount as text."""

    def get_steps(self) -> StepList[Money]:
        return StepList.start_step(Double())


class Wallet(Flow[None]):
    """Driven by RPCs whose inputs, outputs and Attribute have custom codecs."""

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(BALANCE)

    @rpc(is_transactional=True)
    def deposit(self, context: Context, amount: Money) -> Money:
        current = BALANCE.get(context) or Money(0, amount.currency)
        total = Money(current.cents + amount.cents, amount.currency)
        BALANCE.set(context, total)
        return total

    @rpc
    def label(self, context: Context, tag: Tag) -> Tag:
        return Tag(tag.name + "!")


class Measure(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(len(input))


class LengthFlow(Flow[str]):
    """A large start input travels as a blob the Worker resolves through its blob cache."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Measure())


PRICE = PriceFlow()
WALLET = Wallet()
LENGTH = LengthFlow()
BIG_TEXT = "x" * 20_000


def _registry() -> Registry:
    return Registry([PRICE, WALLET, LENGTH], CodecRegistry({Money: MoneyCodec(), Tag: TAG_CODEC}))


async def _exercise(client: AsyncClient) -> None:
    """Run PriceFlow and Wallet's RPCs through the custom codecs."""
    flow_id = unique_id("price")
    await client.start_flow(PRICE, flow_id, Money(250, "EUR"))
    result = await client.wait_for_flow(flow_id, timeout=30)
    assert result.status is FlowStatus.COMPLETED, result
    assert result.single_output(str) == "500 EUR"

    wallet_id = unique_id("wallet")
    await client.start_flow(WALLET, wallet_id, None)
    assert await client.invoke_rpc(WALLET.deposit, wallet_id, Money(5, "USD")) == Money(5, "USD")
    assert await client.invoke_rpc(WALLET.deposit, wallet_id, Money(7, "USD")) == Money(12, "USD")
    assert await client.invoke_rpc(WALLET.label, wallet_id, Tag("sale")) == Tag("sale!")

    length_id = unique_id("length")
    await client.start_flow(LENGTH, length_id, BIG_TEXT)
    measured = await client.wait_for_flow(length_id, timeout=30)
    assert measured.single_output(int) == len(BIG_TEXT)


@pytest.fixture
async def server(tmp_path: Path) -> Any:
    async with running_server(tmp_path / "server") as srv:
        yield srv


@pytest.fixture
async def token_server(tmp_path: Path) -> Any:
    async with running_server(tmp_path / "server", token=TOKEN) as srv:
        yield srv


# --------------------------------------------------------------------------- codecs, blob cache


async def test_codec_of_the_value_api_in_a_real_flow(server: RunningServer) -> None:
    registry = _registry()
    cache = DictBlobCache()
    options = WorkerOptions(server_address=server.address, pull=PullWorkerOptions(4))
    async with AsyncWorker(registry, cache, options) as worker:
        assert worker.registry is registry and worker.blob_cache is cache
        assert worker.options is options
        assert worker.worker_target == WorkerTarget(pull=True)
        before = worker.pull_registration_state()
        assert not before.is_ready
        queues = {q.queue for q in before.queues}
        assert queues == {worker.app_worker_id, "PriceFlow", "Wallet", "LengthFlow"}
        serving = asyncio.create_task(worker.start())
        await worker.wait_pull_registered(timeout=30)
        state = worker.pull_registration_state()
        assert state.is_ready
        assert all(q.has_registered_stream and q.last_permanent_error is None for q in state.queues)
        async with AsyncClient(
            registry, cache, ClientOptions(server_address=server.address)
        ) as client:
            await _exercise(client)
        assert worker.pull_reserved_rpc_declines == 0
        # the large input reached the handler through the user's blob cache
        assert list(cache.blobs.values()) == [json.dumps(BIG_TEXT).encode()]
        assert worker.stats.blob_fetches == 1
    # leaving ``async with`` closed the Worker: start() returned, no restart
    await asyncio.wait_for(serving, timeout=30)
    with pytest.raises(RuntimeError, match="closed"):
        await worker.start()


async def test_sync_worker_as_a_context_manager(server: RunningServer) -> None:
    registry = _registry()
    options = WorkerOptions(server_address=server.address)  # pull=None: pull defaults
    cache = DictBlobCache()
    with Worker(registry, cache, options) as worker:
        thread = threading.Thread(target=worker.start, name="sync-worker")
        thread.start()
        await asyncio.to_thread(worker.wait_pull_registered, 30)
        assert worker.pull_registration_state().is_ready
        async with AsyncClient(
            registry, options=ClientOptions(server_address=server.address)
        ) as client:
            await _exercise(client)
        assert list(cache.blobs.values()) == [json.dumps(BIG_TEXT).encode()]
    # __exit__ closed the Worker and waited for start() to return
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        worker.start()


# --------------------------------------------------------------------------- credentials


async def test_file_credential_for_client_and_worker(
    token_server: RunningServer, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    credential = FileCredential(token_file)
    registry = _registry()
    options = WorkerOptions(server_address=token_server.address, credential=credential)
    async with AsyncWorker(registry, None, options) as worker:
        serving = asyncio.create_task(worker.start())
        await worker.wait_pull_registered(timeout=30)
        client_options = ClientOptions(server_address=token_server.address, credential=credential)
        async with AsyncClient(registry, None, client_options) as client:
            await _exercise(client)
    await asyncio.wait_for(serving, timeout=30)


class _TokenEndpoint:
    """A loopback token endpoint that issues ``TOKEN`` for API key ``key-1``."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                if body.get("api_key") == "key-1":
                    status = 200
                    answer = {"access_token": TOKEN, "token_type": "Bearer", "expires_in": 600}
                else:
                    status, answer = 401, {"error": "invalid_client"}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/oauth/token"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def token_endpoint() -> Iterator[_TokenEndpoint]:
    endpoint = _TokenEndpoint()
    yield endpoint
    endpoint.close()


async def test_api_key_credential_for_client_and_worker(
    token_server: RunningServer, token_endpoint: _TokenEndpoint
) -> None:
    credential = ApiKeyCredential(token_endpoint.url, "dex-e2e", "key-1")
    registry = _registry()
    options = WorkerOptions(server_address=token_server.address, credential=credential)
    async with AsyncWorker(registry, None, options) as worker:
        serving = asyncio.create_task(worker.start())
        await worker.wait_pull_registered(timeout=30)
        client_options = ClientOptions(server_address=token_server.address, credential=credential)
        async with AsyncClient(registry, None, client_options) as client:
            await _exercise(client)
    await asyncio.wait_for(serving, timeout=30)
    # one exchange served the Worker and every Client request: the token is cached
    assert token_endpoint.requests == [{"server_id": "dex-e2e", "api_key": "key-1"}]
    credential.close()


async def test_permanent_rejection_stops_the_worker_when_asked(
    token_server: RunningServer,
) -> None:
    pull = PullWorkerOptions(stop_on_permanent_stream_rejection=True)
    options = WorkerOptions(server_address=token_server.address, pull=pull, credential="wrong")
    worker = AsyncWorker(_registry(), None, options)
    waiter = asyncio.create_task(worker.wait_pull_registered(timeout=30))
    with pytest.raises(PullRegistrationError) as raised:
        await asyncio.wait_for(worker.start(), timeout=30)
    assert raised.value.queue == worker.app_worker_id
    with pytest.raises(PullRegistrationError):
        await waiter
    state = worker.pull_registration_state()
    assert not state.is_ready
    assert all(q.last_permanent_error is raised.value for q in state.queues)


async def test_permanent_rejection_is_recorded_while_retrying(
    token_server: RunningServer,
) -> None:
    options = WorkerOptions(
        server_address=token_server.address,
        pull=PullWorkerOptions(stop_drain_timeout=timedelta(seconds=1)),
        credential="wrong",
    )
    async with AsyncWorker(_registry(), None, options) as worker:
        serving = asyncio.create_task(worker.start())

        async def rejected() -> bool:
            state = worker.pull_registration_state()
            return all(
                isinstance(q.last_permanent_error, PullRegistrationError) for q in state.queues
            )

        await async_wait_until("the rejection is recorded", rejected, timeout=30)
        assert not serving.done()  # it keeps retrying (with a 60 s backoff)
    await asyncio.wait_for(serving, timeout=30)  # close() ended the backoff at once
