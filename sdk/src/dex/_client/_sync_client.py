"""``Client``: the blocking facade; every call runs ``AsyncClient`` on a private loop thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from dex._client._async_client import AsyncClient
from dex._client._options import (
    ClientOptions,
    RPCInvokeOptions,
    StartFlowOptions,
    StopFlowOptions,
)
from dex._client._types import (
    FlowInfo,
    FlowListPage,
    FlowResult,
    FlowStatus,
    StreamMessage,
    StreamMessagesPage,
)
from dex._protocol import (
    AttributeValuesWire,
    FlowStateWire,
    HealthResponse,
    HistoryPage,
    ReadAttributesRequest,
)

if TYPE_CHECKING:
    from dex._blob_cache import BlobCache
    from dex._flow import Flow
    from dex._registry import Registry

T = TypeVar("T")


class Client:
    """Blocking Client with the same methods as ``AsyncClient`` (see there for details).

    Calls run on a private event-loop thread owned by this instance, so a ``Client`` may be
    used from many threads at once. Do not call it from inside a running event loop's
    thread where blocking matters; use ``AsyncClient`` there. Use it as a context manager
    or call ``close()`` to stop the thread.
    """

    def __init__(
        self,
        registry: Registry,
        blob_cache: BlobCache | None = None,
        options: ClientOptions = ClientOptions(),  # noqa: B008 - frozen, safe to share
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="dex-client-loop", daemon=True
        )
        self._thread.start()
        self._closed = False

        async def make() -> AsyncClient:
            return AsyncClient(registry, blob_cache, options)

        self._async = self._call(make())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("Client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def options(self) -> ClientOptions:
        """The options this client was built with."""
        return self._async.options

    def close(self) -> None:
        """Close connections and stop the loop thread. Idempotent."""
        if self._closed:
            return
        self._call(self._async.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start_flow(
        self,
        flow: Flow[Any],
        flow_id: str,
        input: Any = None,
        options: StartFlowOptions = StartFlowOptions(),  # noqa: B008
    ) -> str:
        """Start a Flow; see ``AsyncClient.start_flow``."""
        return self._call(self._async.start_flow(flow, flow_id, input, options))

    def stop_flow(
        self,
        flow_id: str,
        options: StopFlowOptions = StopFlowOptions(),  # noqa: B008
    ) -> None:
        """Stop a Flow; see ``AsyncClient.stop_flow``."""
        self._call(self._async.stop_flow(flow_id, options))

    def wait_for_flow(self, flow_id: str, timeout: float | None = None) -> FlowResult:
        """Wait for a Flow to close; see ``AsyncClient.wait_for_flow``."""
        return self._call(self._async.wait_for_flow(flow_id, timeout))

    def describe_flow(self, flow_id: str) -> FlowInfo:
        """Describe a Flow; see ``AsyncClient.describe_flow``."""
        return self._call(self._async.describe_flow(flow_id))

    def list_flows(
        self,
        flow_type: str | None = None,
        status: FlowStatus | str | None = None,
        page_size: int = 100,
        page_token: str | None = None,
    ) -> FlowListPage:
        """List Flows; see ``AsyncClient.list_flows``."""
        return self._call(self._async.list_flows(flow_type, status, page_size, page_token))

    def get_history(
        self,
        flow_id: str,
        run_id: str = "",
        page_size: int = 200,
        page_token: str | None = None,
    ) -> HistoryPage:
        """Read history; see ``AsyncClient.get_history``."""
        return self._call(self._async.get_history(flow_id, run_id, page_size, page_token))

    def get_flow_state(self, flow_id: str) -> FlowStateWire:
        """Snapshot a Flow's state; see ``AsyncClient.get_flow_state``."""
        return self._call(self._async.get_flow_state(flow_id))

    def read_attributes(self, flow_id: str, request: ReadAttributesRequest) -> AttributeValuesWire:
        """Read committed Attribute values; see ``AsyncClient.read_attributes``."""
        return self._call(self._async.read_attributes(flow_id, request))

    def invoke_rpc(
        self,
        bound_rpc: Any,
        flow_id: str,
        input: Any = None,
        *,
        run_id: str = "",
        options: RPCInvokeOptions = RPCInvokeOptions(),  # noqa: B008
        request_id: str | None = None,
    ) -> Any:
        """Invoke an RPC; see ``AsyncClient.invoke_rpc`` (``request_id``: idempotency key)."""
        return self._call(
            self._async.invoke_rpc(
                bound_rpc, flow_id, input, run_id=run_id, options=options, request_id=request_id
            )
        )

    def write_stream(self, flow_id: str, stream: Any, source: str, value: Any) -> None:
        """Write a Stream message; see ``AsyncClient.write_stream``."""
        self._call(self._async.write_stream(flow_id, stream, source, value))

    def read_stream(
        self, flow_id: str, stream: Any, resume_token: str = "", timeout: float | None = None
    ) -> StreamMessage:
        """Read the next Stream message; see ``AsyncClient.read_stream``."""
        return self._call(self._async.read_stream(flow_id, stream, resume_token, timeout))

    def list_stream_messages(
        self, flow_id: str, stream: Any, page_size: int = 100, before_page_token: str = ""
    ) -> StreamMessagesPage:
        """List Stream messages; see ``AsyncClient.list_stream_messages``."""
        return self._call(
            self._async.list_stream_messages(flow_id, stream, page_size, before_page_token)
        )

    def health_check(self) -> HealthResponse:
        """Check the server; see ``AsyncClient.health_check``."""
        return self._call(self._async.health_check())
