"""``Client``: the blocking facade; every call runs ``AsyncClient`` on a private loop thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from dex._client._async_client import AsyncClient
from dex._client._options import (
    ClientOptions,
    RPCInvokeOptions,
    StartFlowOptions,
    StopFlowOptions,
    TimeTravelOptions,
)
from dex._client._types import (
    FlowInfo,
    FlowListPage,
    FlowResult,
    FlowStatus,
    SearchFlowsPage,
    StreamMessage,
    StreamMessagesPage,
)
from dex._client._wait_options import WaitForStepCompletionOptions
from dex._flow_config import FlowConfig
from dex._protocol import (
    AttributeValuesWire,
    FlowStateWire,
    HealthResponse,
    HistoryPage,
    ReadAttributesRequest,
)
from dex._step_execution import StepExecutionId, TimerId

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
    or call ``close()`` to stop the thread; calls after ``close()`` raise ``RuntimeError``.

    Args:
        registry: the ``Registry`` of the Flows this client names (see ``AsyncClient``).
        blob_cache: optional shared ``BlobCache``.
        options: server address, credential and request timeout; None (the default)
            means ``ClientOptions()``.

    Raises:
        FeatureNotAvailableError: ``options.worker_target`` names listening Workers.

    """

    def __init__(
        self,
        registry: Registry,
        blob_cache: BlobCache | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="dex-client-loop", daemon=True
        )
        self._thread.start()
        self._closed = False

        async def make() -> AsyncClient:
            return AsyncClient(registry, blob_cache, options)

        try:
            self._async = self._call(make())
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise RuntimeError("Client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def registry(self) -> Registry:
        """The Registry this client was built with."""
        return self._async.registry

    @property
    def blob_cache(self) -> BlobCache | None:
        """The blob cache this client was built with (None without one)."""
        return self._async.blob_cache

    @property
    def options(self) -> ClientOptions:
        """The options this client was built with (``ClientOptions()`` for None)."""
        return self._async.options

    def close(self) -> None:
        """Close connections and stop the loop thread. Idempotent."""
        if self._closed:
            return
        self._call(self._async.close())
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
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

    def wait_for_flow(self, flow_id: str, timeout: timedelta | float | None = None) -> FlowResult:
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
        rpc_method: Callable[..., Any],
        flow_id: str,
        input: object = None,
        *,
        run_id: str = "",
        options: RPCInvokeOptions = RPCInvokeOptions(),  # noqa: B008
        request_id: str | None = None,
    ) -> Any:
        """Invoke an RPC; see ``AsyncClient.invoke_rpc`` (``request_id``: idempotency key)."""
        return self._call(
            self._async.invoke_rpc(
                rpc_method, flow_id, input, run_id=run_id, options=options, request_id=request_id
            )
        )

    def write_stream(self, flow_id: str, stream: Any, source: str, value: Any) -> None:
        """Write a Stream message; see ``AsyncClient.write_stream``."""
        self._call(self._async.write_stream(flow_id, stream, source, value))

    def read_stream(
        self,
        flow_id: str,
        stream: Any,
        resume_token: str = "",
        timeout: timedelta | float | None = None,
    ) -> StreamMessage[Any]:
        """Read the next Stream message; see ``AsyncClient.read_stream``."""
        return self._call(self._async.read_stream(flow_id, stream, resume_token, timeout))

    def read_stream_messages(
        self,
        flow_id: str,
        stream: Any,
        resume_token: str = "",
        max_messages: int = 100,
        timeout: timedelta | float | None = None,
    ) -> list[StreamMessage[Any]]:
        """Read the messages after a token at once; see ``AsyncClient.read_stream_messages``."""
        return self._call(
            self._async.read_stream_messages(flow_id, stream, resume_token, max_messages, timeout)
        )

    def list_stream_messages(
        self, flow_id: str, stream: Any, page_size: int = 100, before_page_token: str = ""
    ) -> StreamMessagesPage[Any]:
        """List Stream messages; see ``AsyncClient.list_stream_messages``."""
        return self._call(
            self._async.list_stream_messages(flow_id, stream, page_size, before_page_token)
        )

    def health_check(self) -> bool:
        """Whether the server is healthy; see ``AsyncClient.health_check``."""
        return self._call(self._async.health_check())

    def get_health(self) -> HealthResponse:
        """The server's health details; see ``AsyncClient.get_health``."""
        return self._call(self._async.get_health())

    # Parts of the Dex model not run yet: each raises FeatureNotAvailableError.

    def search_flows(
        self,
        query: str,
        page_size: int,
        next_page_token: str = "",
        *,
        include_continued_as_new: bool = False,
    ) -> SearchFlowsPage:
        """Search Flows; see ``AsyncClient.search_flows``."""
        return self._call(
            self._async.search_flows(
                query, page_size, next_page_token, include_continued_as_new=include_continued_as_new
            )
        )

    def time_travel(self, flow_id: str, options: TimeTravelOptions) -> str:
        """Fork a Flow's history into a new run; see ``AsyncClient.time_travel``."""
        return self._call(self._async.time_travel(flow_id, options))

    def skip_timer(
        self, flow_id: str, step_execution_id: StepExecutionId, timer_id: TimerId
    ) -> None:
        """Fire one pending timer of a waiting Step now; see ``AsyncClient.skip_timer``."""
        self._call(self._async.skip_timer(flow_id, step_execution_id, timer_id))

    def wait_for_step_completion(
        self,
        flow_id: str,
        step_execution_id: StepExecutionId,
        options: WaitForStepCompletionOptions = WaitForStepCompletionOptions(),  # noqa: B008
    ) -> None:
        """Block until a Step execution ended; see ``AsyncClient.wait_for_step_completion``."""
        self._call(self._async.wait_for_step_completion(flow_id, step_execution_id, options))

    def wait_for_attribute_match(
        self, flow_id: str, attribute: Any, *args: object, **kwargs: object
    ) -> Any:
        """Wait for an Attribute to match; see ``AsyncClient.wait_for_attribute_match``."""
        return self._call(self._async.wait_for_attribute_match(flow_id, attribute, *args, **kwargs))

    def update_flow_config(self, flow_id: str, config: FlowConfig) -> None:
        """Merge fields into a Flow's FlowConfig; see ``AsyncClient.update_flow_config``."""
        self._call(self._async.update_flow_config(flow_id, config))

    def trigger_continue_as_new(self, flow_id: str) -> None:
        """Continue as a new run; see ``AsyncClient.trigger_continue_as_new``."""
        self._call(self._async.trigger_continue_as_new(flow_id))
