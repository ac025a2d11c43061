"""``AsyncClient``: the one implementation of every Client call (the sync Client wraps it)."""

from __future__ import annotations

import time
import uuid
from types import TracebackType
from typing import TYPE_CHECKING, Any

from dex._client import _defs
from dex._client._options import (
    ClientOptions,
    RPCInvokeOptions,
    StartFlowOptions,
    StopFlowOptions,
    seconds,
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
    ErrorCode,
    FlowInfoWire,
    FlowListResponse,
    FlowResultWire,
    FlowStateWire,
    HealthResponse,
    HistoryPage,
    InitialAttribute,
    InvokeRpcRequest,
    InvokeRpcResponse,
    LoadSpec,
    ReadAttributesRequest,
    StartFlowRequest,
    StartFlowResponse,
    StopFlowRequest,
    StreamListResponse,
    StreamReadResponse,
    StreamWriteRequest,
)
from dex._transport import HttpTransport
from dex.errors import LongPollTimeoutError

if TYPE_CHECKING:
    from dex._blob_cache import BlobCache
    from dex._flow import Flow
    from dex._registry import Registry

_LONG_POLL_CAP_S = 60.0
_LONG_POLL_SLACK_S = 10.0  # HTTP timeout beyond the server-side long poll
_Q = _defs.flow_segment


class AsyncClient:
    """Start, stop, wait for and talk to Flows from application code (asyncio).

    Args:
        registry: the ``Registry`` of the Flows this client names; it supplies the
            codecs of inputs, outputs and Stream values. An empty ``Registry([])`` is
            enough for calls that decode no user values (tools such as a CLI).
        blob_cache: optional shared ``BlobCache`` (reserved for large-value reads).
        options: server address, credential and request timeout.

    Use ``async with AsyncClient(...) as client`` or call ``close()``. One instance may be
    used by many tasks of one event loop at once (it pools HTTP connections); do not share
    it across event loops or threads (use the sync ``Client`` from threads).

    Every server error is raised as the ``dex.errors`` class of its code; an unreachable
    server raises ``ServiceUnavailableError``. A ``flow_id`` no Flow can have is refused
    before anything is sent: an empty one with ``BadRequestError``, one longer than
    ``MAX_FLOW_ID_BYTES`` (1,024 UTF-8 bytes) with ``LimitExceededError``.

    """

    def __init__(
        self,
        registry: Registry,
        blob_cache: BlobCache | None = None,
        options: ClientOptions = ClientOptions(),  # noqa: B008 - frozen, safe to share
    ) -> None:
        self.registry = registry
        self.blob_cache = blob_cache
        self.options = options
        self._http = HttpTransport(
            options.server_address, credential=options.credential, timeout=seconds(options.timeout)
        )

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Close pooled connections. Idempotent."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ Flows

    async def start_flow(
        self,
        flow: Flow[Any],
        flow_id: str,
        input: Any = None,
        options: StartFlowOptions = StartFlowOptions(),  # noqa: B008
    ) -> str:
        """Start a Flow and return its run ID once the server accepted it.

        Args:
            flow: the registered Flow instance.
            flow_id: the business ID of the execution: non-empty, at most 1,024 UTF-8 bytes.
            input: the start Step's input (must match its declared type; None when the
                Flow has no start Step).
            options: ID reuse policy, idempotency, start delay, initial Attributes.

        Raises:
            FlowAlreadyStartedError: the ID is taken and the reuse policy rejects a new run.
            BadRequestError: ``flow_id`` is empty.
            ValueMappingError: ``input`` or an initial value does not match its type.
            LimitExceededError: ``flow_id`` is longer than 1,024 UTF-8 bytes (raised before
                any request), or a value or the request is too large.

        """
        _defs.check_flow_id(flow_id)
        spec = _defs.flow_spec(self.registry, flow)
        encoded = _defs.encode_start_input(self.registry, flow, input)
        request = StartFlowRequest(
            flow_type=spec.flow_type,
            flow_id=flow_id,
            spec=spec,
            input=encoded,
            id_reuse_policy=options.id_reuse_policy.value,
            # A request ID makes the start idempotent, so a lost connection can retry it.
            request_id=options.request_id or uuid.uuid4().hex,
            ignore_already_started=options.ignore_already_started,
            initial_attributes=[
                InitialAttribute(name=name, value=value)
                for name, value in _defs.encode_initial_attributes(
                    self.registry, options.initial_attributes
                )
            ],
            start_delay_s=seconds(options.start_delay),
        )
        response = await self._http.call(
            "POST", "/v1/flows", StartFlowResponse, body=request, flow_id=flow_id, idempotent=True
        )
        return response.run_id

    async def stop_flow(
        self,
        flow_id: str,
        options: StopFlowOptions = StopFlowOptions(),  # noqa: B008
    ) -> None:
        """Stop a running Flow (cancel by default); returns once the server accepted it.

        Raises:
            FlowNotActiveOrNotFoundError: the Flow is closed or does not exist.

        """
        request = StopFlowRequest(type=options.type.value, reason=options.reason)
        await self._http.raw("POST", f"/v1/flows/{_Q(flow_id)}/stop", body=request, flow_id=flow_id)

    async def wait_for_flow(self, flow_id: str, timeout: float | None = None) -> FlowResult:
        """Wait until the Flow's latest run closes and return how it ended.

        The server long-polls in calls of at most 60 s; with ``timeout=None`` this keeps
        calling until the Flow closes.

        Raises:
            LongPollTimeoutError: ``timeout`` seconds passed and the Flow is still running.
            FlowNotFoundError: no such Flow.

        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait_s = _LONG_POLL_CAP_S
            if deadline is not None:
                wait_s = max(0.0, min(wait_s, deadline - time.monotonic()))
            try:
                wire = await self._http.call(
                    "GET",
                    f"/v1/flows/{_Q(flow_id)}/result",
                    FlowResultWire,
                    params={"timeout_s": _fmt(wait_s)},
                    timeout=wait_s + _LONG_POLL_SLACK_S,
                    flow_id=flow_id,
                )
            except LongPollTimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            if wire.status == "running":  # a server may answer early; keep waiting
                if deadline is not None and time.monotonic() >= deadline:
                    raise _long_poll_timeout(flow_id, timeout)
                continue
            return FlowResult.from_wire(wire)

    async def describe_flow(self, flow_id: str) -> FlowInfo:
        """Describe the Flow's latest run (running or retained closed).

        Raises:
            FlowNotFoundError: no such Flow.

        """
        wire = await self._http.call(
            "GET", f"/v1/flows/{_Q(flow_id)}", FlowInfoWire, flow_id=flow_id
        )
        return FlowInfo.from_wire(wire)

    async def list_flows(
        self,
        flow_type: str | None = None,
        status: FlowStatus | str | None = None,
        page_size: int = 100,
        page_token: str | None = None,
    ) -> FlowListPage:
        """List Flows newest first, optionally filtered by type and status; one page.

        Args:
            flow_type: only Flows of this type (None: every type).
            status: only Flows in this status (None: any status).
            page_size: at most this many Flows (default 100; the server caps it at 1000).
            page_token: the ``next_page_token`` of the previous page (None: the first page).

        Raises:
            BadRequestError: ``page_token`` is not a token the server returned, or
                ``page_size`` is not a positive integer.
            ValueError: ``status`` is not a ``FlowStatus`` value.

        """
        params = {"page_size": str(page_size)}
        if flow_type:
            params["flow_type"] = flow_type
        if status is not None:
            params["status"] = FlowStatus(status).value if isinstance(status, str) else status.value
        if page_token:
            params["page_token"] = page_token
        wire = await self._http.call("GET", "/v1/flows", FlowListResponse, params=params)
        return FlowListPage(
            flows=tuple(FlowInfo.from_wire(f) for f in wire.flows),
            next_page_token=wire.next_page_token or None,
        )

    async def get_history(
        self,
        flow_id: str,
        run_id: str = "",
        page_size: int = 200,
        page_token: str | None = None,
    ) -> HistoryPage:
        """Read one page of a run's semantic history (latest run when ``run_id`` is empty).

        Raises:
            FlowNotFoundError: no such Flow or run.
            BadRequestError: ``page_token`` is not a token the server returned.

        """
        params = {"page_size": str(page_size)}
        if run_id:
            params["run_id"] = run_id
        if page_token:
            params["page_token"] = page_token
        return await self._http.call(
            "GET", f"/v1/flows/{_Q(flow_id)}/history", HistoryPage, params=params, flow_id=flow_id
        )

    async def get_flow_state(self, flow_id: str) -> FlowStateWire:
        """Snapshot a Flow's active Steps, Channel sizes and Attribute names (diagnostics).

        Raises:
            FlowNotFoundError: no such Flow.

        """
        return await self._http.call(
            "GET", f"/v1/flows/{_Q(flow_id)}/state", FlowStateWire, flow_id=flow_id
        )

    async def read_attributes(
        self, flow_id: str, request: ReadAttributesRequest
    ) -> AttributeValuesWire:
        """Read committed Attribute values of a Flow straight from the store (no Worker).

        Use it to show a Flow's state while its Workers are down (a deploy, say), where an
        RPC would wait for a Worker. The answer is the committed state of one run at one
        moment (all of it read in one store transaction), values as JSON by physical name
        (``"<map>/<URL-quoted key>"`` for map instances), blob references resolved, and
        every Channel's pending count. Also works for closed Flows within retention.
        Safe to call concurrently; it changes nothing.

        Args:
            flow_id: the Flow.
            request: the names, whole AttributeMaps and key ranges to read, and optionally
                a ``run_id`` (default: the latest run).

        Raises:
            FlowNotFoundError: no such Flow (or run).
            BadRequestError: a map the Flow type does not declare, a bad range.

        """
        return await self._http.call(
            "POST",
            f"/v1/flows/{_Q(flow_id)}/attributes",
            AttributeValuesWire,
            body=request,
            flow_id=flow_id,
            idempotent=True,
        )

    # ------------------------------------------------------------------ RPC

    async def invoke_rpc(
        self,
        bound_rpc: Any,
        flow_id: str,
        input: Any = None,
        *,
        run_id: str = "",
        options: RPCInvokeOptions = RPCInvokeOptions(),  # noqa: B008
        request_id: str | None = None,
    ) -> Any:
        """Invoke an RPC of a Flow (``client.invoke_rpc(flow.my_rpc, flow_id, input)``).

        Returns the decoded output (None for an RPC without output).

        ``request_id`` (default ``None``: none) makes the invocation idempotent within the
        Flow's run: the server records the first invocation with it that succeeds, with its
        effects, and answers any later or concurrent one with the same ``request_id`` with
        that first output, without running the RPC or applying its effects again. Pass the
        same value (a UUID, at most 256 bytes) when retrying after a timeout, a lost
        connection or a crash, when you cannot tell whether the first call committed. A
        call that failed is not recorded: its retry runs the RPC.

        Raises:
            WorkerInvocationError: the handler raised (``detail`` has its type and message).
            RpcLockConflictError: a requested lock is held; retry later.
            FlowNotActiveOrNotFoundError: the Flow is missing, or closed and the RPC needs
                a running Flow.
            NoWorkerAvailableError, RequestTimeoutError: no Worker answered in time.
            ValueMappingError: ``input`` or the output does not match the declared types.

        """
        rpc = _defs.rpc_call_info(self.registry, bound_rpc)
        loads = [_defs.map_instance_name(m, k) for m, k in options.load_attribute_map_instances]
        locks = [_defs.map_instance_name(m, k) for m, k in options.lock_attribute_map_instances]
        timeout_s = seconds(options.timeout)
        request = InvokeRpcRequest(
            rpc_name=rpc.name,
            input=rpc.encode_input(input),
            run_id=run_id,
            timeout_s=timeout_s,
            extra_loads=LoadSpec(attribute_map_instances=loads) if loads else None,
            extra_locks=locks,
            request_id=request_id or "",
        )
        http_timeout = (timeout_s if timeout_s is not None else rpc.timeout_s) + _LONG_POLL_SLACK_S
        response = await self._http.call(
            "POST",
            f"/v1/flows/{_Q(flow_id)}/rpc",
            InvokeRpcResponse,
            body=request,
            timeout=None if self._http.timeout is None else max(http_timeout, self._http.timeout),
            flow_id=flow_id,
        )
        return rpc.decode_output(response.output)

    # ------------------------------------------------------------------ Streams

    async def write_stream(self, flow_id: str, stream: Any, source: str, value: Any) -> None:
        """Append ``value`` to a Flow's Stream (best effort; the Flow need not exist).

        Args:
            flow_id: the Flow ID the Stream instance belongs to.
            stream: the declared ``Stream`` handle.
            source: a non-empty free-form label of the writer.
            value: a value of the Stream's type.

        Raises:
            ValueError: ``source`` is empty.
            LimitExceededError: the value is larger than the server accepts.

        """
        if not source:
            raise ValueError("write_stream needs a non-empty source")
        target = _defs.stream_target(self.registry, stream)
        request = StreamWriteRequest(source=source, value=target.encode(value))
        await self._http.raw("POST", target.path(flow_id), body=request, flow_id=flow_id)

    async def read_stream(
        self,
        flow_id: str,
        stream: Any,
        resume_token: str = "",
        timeout: float | None = None,
    ) -> StreamMessage:
        """Return the next retained message after ``resume_token`` (oldest when empty).

        Long-polls until a message arrives; ``timeout=None`` waits indefinitely.

        Raises:
            LongPollTimeoutError: no message within ``timeout`` seconds.

        """
        target = _defs.stream_target(self.registry, stream)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait_s = _LONG_POLL_CAP_S
            if deadline is not None:
                wait_s = max(0.0, min(wait_s, deadline - time.monotonic()))
            params = {"timeout_s": _fmt(wait_s)}
            if resume_token:
                params["resume_token"] = resume_token
            try:
                wire = await self._http.call(
                    "GET",
                    target.path(flow_id) + "/next",
                    StreamReadResponse,
                    params=params,
                    timeout=wait_s + _LONG_POLL_SLACK_S,
                    flow_id=flow_id,
                )
            except LongPollTimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            if wire.message is not None:
                return StreamMessage.from_wire(wire.message, target.decode(wire.message.value))
            if deadline is not None and time.monotonic() >= deadline:
                raise _long_poll_timeout(flow_id, timeout)

    async def list_stream_messages(
        self,
        flow_id: str,
        stream: Any,
        page_size: int = 100,
        before_page_token: str = "",
    ) -> StreamMessagesPage:
        """List retained Stream messages newest first (server caps a page at 1000)."""
        target = _defs.stream_target(self.registry, stream)
        params = {"page_size": str(page_size)}
        if before_page_token:
            params["before"] = before_page_token
        wire = await self._http.call(
            "GET", target.path(flow_id), StreamListResponse, params=params, flow_id=flow_id
        )
        return StreamMessagesPage(
            messages=tuple(
                StreamMessage.from_wire(m, target.decode(m.value)) for m in wire.messages
            ),
            before_page_token=wire.before_page_token or None,
        )

    # ------------------------------------------------------------------ server

    async def health_check(self) -> HealthResponse:
        """Check the server answers; returns its ``HealthResponse`` (ok, version, store).

        Raises:
            ServiceUnavailableError: the server cannot be reached or is unhealthy.

        """
        return await self._http.call("GET", "/v1/health", HealthResponse)


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def _long_poll_timeout(flow_id: str, timeout: float | None) -> LongPollTimeoutError:
    return LongPollTimeoutError(
        f"still waiting after {timeout}s",
        code=ErrorCode.LONG_POLL_TIMEOUT,
        flow_id=flow_id,
        retryable=True,
    )
