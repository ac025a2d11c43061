"""``AsyncClient``: the one implementation of every Client call (the sync Client wraps it)."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

from dex._client import _defs, _search
from dex._client._options import (
    ClientOptions,
    RPCInvokeOptions,
    StartFlowOptions,
    StopFlowOptions,
    TimeTravelOptions,
    flow_timeout_spec,
    required_start_features,
    seconds,
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
from dex._flow_config import FlowConfig, config_to_wire
from dex._protocol import (
    AttributeValuesWire,
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
    SkipTimerRequest,
    StartFlowRequest,
    StartFlowResponse,
    StopFlowRequest,
    StreamListResponse,
    StreamReadResponse,
    StreamWriteRequest,
    TimeTravelRequest,
    TimeTravelResponse,
)
from dex._step_execution import StepExecutionId, TimerId
from dex._transport import HttpTransport
from dex._worker_target import is_pull_target
from dex.errors import (
    ErrorSubStatus,
    LongPollTimeoutError,
    RequestTimeoutError,
    StatusCode,
    feature_not_available,
)

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
            codecs of inputs, outputs and Stream values. ``start_flow`` and ``invoke_rpc``
            take the Flow instances it holds. An empty ``Registry([])`` is enough for
            calls that decode no user values (tools such as a CLI).
        blob_cache: optional shared ``BlobCache`` (reserved for large-value reads).
        options: server address, credential and request timeout; None (the default)
            means ``ClientOptions()``.

    Raises:
        FeatureNotAvailableError: ``options.worker_target`` names listening Workers
            (this release runs pull Workers only).
        InProcessServerNotFoundError: ``options.server_address`` is ``inproc://<name>``
            and no embedded server of that name runs in this process.

    Use ``async with AsyncClient(...) as client`` or call ``close()``. One instance may be
    used by many tasks of one event loop at once (it pools HTTP connections); do not share
    it across event loops or threads (use the sync ``Client`` from threads). Long polls
    (``wait_for_flow``, ``read_stream``, ``wait_for_attribute_match``, waiting for a Step's
    completion) use a pool of their own, of up to 1,000 connections, so that many pending
    waits never delay the other calls (which share up to 100 connections).

    Every server error is raised as the ``dex.errors`` class of its code; an unreachable
    server raises ``ServiceUnavailableError``. A ``flow_id`` no Flow can have is refused
    before anything is sent: an empty one with ``BadRequestError``, one longer than
    ``MAX_FLOW_ID_BYTES`` (1,024 UTF-8 bytes) with ``LimitExceededError``.

    """

    def __init__(
        self,
        registry: Registry,
        blob_cache: BlobCache | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        if options is None:
            options = ClientOptions()
        if not is_pull_target(options.worker_target):
            feature_not_available("listening Workers (ClientOptions.worker_target)")
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
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
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
            flow: the Flow instance the Registry holds.
            flow_id: the business ID of the execution: non-empty, at most 1,024 UTF-8 bytes.
            input: the start Step's input (must match its declared type; None when the
                Flow has no start Step).
            options: ID reuse policy, idempotency, start delay, initial Attributes.

        Raises:
            FlowDefinitionError: ``flow`` is not the instance the Registry holds (another
                instance of the same class included), or its type is not registered.
            FeatureNotAvailableError: ``options`` sets a Flow retry policy or a listening
                ``config_override.worker_target``, or a feature the server does not run
                (it refuses the start, and nothing is started).
            BadRequestError: a Flow timeout over 100 years, handler options with the FAIL
                or CANCEL policy, or an invalid ``config_override`` value.
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
                    self.registry, options._attribute_initializations
                )
            ],
            start_delay_s=seconds(options.start_delay),
            requires=required_start_features(options),
            config=None
            if options.config_override is None
            else config_to_wire(options.config_override),
            timeout=flow_timeout_spec(self.registry.flow_entry(spec.flow_type), options),
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

    async def wait_for_flow(
        self, flow_id: str, timeout: timedelta | float | None = None
    ) -> FlowResult:
        """Wait until the Flow's latest run closes and return how it ended.

        The server long-polls in calls of at most 60 s; with ``timeout=None`` this keeps
        calling until the Flow closes.

        Args:
            flow_id: the Flow.
            timeout: how long to wait at most, a ``timedelta`` or seconds (fractions
                allowed); None waits until the Flow closes.

        Raises:
            LongPollTimeoutError: ``timeout`` passed and the Flow is still running.
            FlowNotFoundError: no such Flow.
            ValueError: ``timeout`` is negative or not finite.

        """
        deadline = _deadline(timeout)
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
                    long_poll=True,
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
            return FlowResult.from_wire(wire, self.registry.codec_for)

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
        rpc_method: Callable[..., Any],
        flow_id: str,
        input: object = None,
        *,
        run_id: str = "",
        options: RPCInvokeOptions = RPCInvokeOptions(),  # noqa: B008
        request_id: str | None = None,
    ) -> Any:
        """Invoke an RPC of a Flow (``client.invoke_rpc(flow.my_rpc, flow_id, input)``).

        ``rpc_method`` is an ``@rpc`` method accessed on the Flow instance the Registry
        holds. Returns the decoded output (None for an RPC without output). ``input=None``
        is sent as null whatever the input type; the Worker's decoder decides whether the
        RPC accepts it.

        ``request_id`` (default ``None``: none) makes the invocation idempotent within the
        Flow's run: the server records the first invocation with it that succeeds, with its
        effects, and answers any later or concurrent one with the same ``request_id`` with
        that first output, without running the RPC or applying its effects again. Pass the
        same value (a UUID, at most 256 bytes) when retrying after a timeout, a lost
        connection or a crash, when you cannot tell whether the first call committed. A
        call that failed is not recorded: its retry runs the RPC.

        Raises:
            FlowDefinitionError: ``rpc_method`` is not an RPC of the registered instance.
            WorkerInvocationError: the handler raised (``detail`` has its type and message).
            RpcLockConflictError: a requested lock is held; retry later.
            FlowNotActiveOrNotFoundError: the Flow is missing, or closed and the RPC needs
                a running Flow.
            NoWorkerAvailableError, RequestTimeoutError: no Worker answered in time.
            ValueMappingError: ``input`` or the output does not match the declared types.

        """
        rpc = _defs.rpc_call_info(self.registry, rpc_method)
        loads = [_defs.map_instance_name(i) for i in options.load_attribute_map_instances]
        channel_loads = [_defs.map_instance_name(i) for i in options.load_channel_map_instances]
        locks = [_defs.map_instance_name(i) for i in options.lock_attribute_map_instances]
        timeout_s = seconds(options.timeout)
        extra = None
        if loads or channel_loads:
            extra = LoadSpec(attribute_map_instances=loads, channel_map_instances=channel_loads)
        request = InvokeRpcRequest(
            rpc_name=rpc.name,
            input=rpc.encode_input(input),
            run_id=run_id,
            timeout_s=timeout_s,
            extra_loads=extra,
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
        timeout: timedelta | float | None = None,
    ) -> StreamMessage[Any]:
        """Return the next retained message after ``resume_token`` (oldest when empty).

        Long-polls until a message arrives; ``timeout`` (a ``timedelta`` or seconds) caps
        the wait, ``None`` waits indefinitely.

        Raises:
            LongPollTimeoutError: no message within ``timeout``.
            ValueError: ``timeout`` is negative or not finite.

        """
        return (await self._read_stream(flow_id, stream, resume_token, timeout, None))[0]

    async def read_stream_messages(
        self,
        flow_id: str,
        stream: Any,
        resume_token: str = "",
        max_messages: int = 100,
        timeout: timedelta | float | None = None,
    ) -> list[StreamMessage[Any]]:
        """Return the retained messages after ``resume_token``, oldest first (beyond Dex).

        Like ``read_stream``, but one request returns every message already there, up to
        ``max_messages`` (the server returns at most 100): a reader that follows a busy
        Stream sends one request per batch instead of one per message. Long-polls until at
        least one message arrives; resume from the last message's ``resume_token``.

        Raises:
            LongPollTimeoutError: no message within ``timeout``.
            ValueError: ``max_messages`` below 1, or ``timeout`` negative or not finite.

        """
        if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
            raise ValueError(f"max_messages must be a positive integer, got {max_messages!r}")
        return await self._read_stream(flow_id, stream, resume_token, timeout, max_messages)

    async def _read_stream(
        self,
        flow_id: str,
        stream: Any,
        resume_token: str,
        timeout: timedelta | float | None,
        max_messages: int | None,
    ) -> list[StreamMessage[Any]]:
        target = _defs.stream_target(self.registry, stream)
        deadline = _deadline(timeout)
        while True:
            wait_s = _LONG_POLL_CAP_S
            if deadline is not None:
                wait_s = max(0.0, min(wait_s, deadline - time.monotonic()))
            params = {"timeout_s": _fmt(wait_s)}
            if resume_token:
                params["resume_token"] = resume_token
            if max_messages is not None:
                params["max_messages"] = str(max_messages)
            try:
                wire = await self._http.call(
                    "GET",
                    target.path(flow_id) + "/next",
                    StreamReadResponse,
                    params=params,
                    timeout=wait_s + _LONG_POLL_SLACK_S,
                    long_poll=True,
                    flow_id=flow_id,
                )
            except LongPollTimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            found = wire.messages or ([wire.message] if wire.message is not None else [])
            if found:
                return [StreamMessage.from_wire(m, target.decode(m.value)) for m in found]
            if deadline is not None and time.monotonic() >= deadline:
                raise _long_poll_timeout(flow_id, timeout)

    async def list_stream_messages(
        self,
        flow_id: str,
        stream: Any,
        page_size: int = 100,
        before_page_token: str = "",
    ) -> StreamMessagesPage[Any]:
        """List retained Stream messages newest first (server caps a page at 1000).

        Pass the page's ``next_page_token`` as ``before_page_token`` for older messages;
        it is ``""`` on the oldest page.
        """
        target = _defs.stream_target(self.registry, stream)
        params = {"page_size": str(page_size)}
        if before_page_token:
            params["before"] = before_page_token
        wire = await self._http.call(
            "GET", target.path(flow_id), StreamListResponse, params=params, flow_id=flow_id
        )
        return StreamMessagesPage(
            tuple(StreamMessage.from_wire(m, target.decode(m.value)) for m in wire.messages),
            wire.before_page_token or "",
        )

    # ------------------------------------------------------------------ server

    async def health_check(self) -> bool:
        """Return whether the server answers and is healthy (False while it is degraded).

        ``get_health`` gives the details (version, store, the reason of a degraded state).

        Raises:
            ServiceUnavailableError: the server cannot be reached.

        """
        return (await self.get_health()).ok

    async def get_health(self) -> HealthResponse:
        """Return the server's ``HealthResponse``: ok, status, reason, version and store.

        Needs no credential. Safe to call concurrently.

        Raises:
            ServiceUnavailableError: the server cannot be reached.

        """
        return await self._http.call("GET", "/v1/health", HealthResponse)

    # ------------------------------------------------------------------ the rest of the model
    # search, time travel, Step waits, timers, FlowConfig updates and continue-as-new.

    async def search_flows(
        self,
        query: str,
        page_size: int,
        next_page_token: str = "",
        *,
        include_continued_as_new: bool = False,
    ) -> SearchFlowsPage:
        """Search Flows by a query over indexed Attributes and system fields; one page.

        The query language: comparisons (``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``),
        ``AND`` / ``OR`` / ``NOT``, parentheses, ``IN (...)``, ``BETWEEN ... AND ...``,
        ``STARTS_WITH``, ``IS [NOT] NULL`` and ``ORDER BY field [ASC|DESC]`` (default:
        newest first). System fields: ``FlowId``, ``RunId``, ``FlowType``,
        ``ExecutionStatus``, ``StartTime``, ``CloseTime``, ``DexParentFlowID``,
        ``ActiveStepTypes``. A search sees every committed write.

        Args:
            query: the query (``""`` matches every Flow).
            page_size: at most this many Flows (1..1000).
            next_page_token: the previous page's ``next_page_token`` (``""``: the first).
            include_continued_as_new: also return runs that continued as new.

        Raises:
            BadRequestError: the query does not parse or type-check (the message names
                the position and the token), a bad page size, or a token from another
                query.
            FeatureNotAvailableError: the server does not run Flow search.

        """
        return await _search.search_page(
            self._http, query, page_size, next_page_token, include_continued_as_new
        )

    async def time_travel(self, flow_id: str, options: TimeTravelOptions) -> str:
        """Fork the Flow's latest run at a point of its history; return the new run ID.

        Use it to run a Flow again from a Step (after fixing its code, say) without losing
        the old run: that run stays readable by its run ID, and a running one is
        terminated. The new run starts from the state as of the fork point; the effects
        of later RPCs are applied on top unless ``options.skip_writes_reapply``.
        Single-attempt Steps that committed after the fork point are not run again unless
        ``options.rerun_single_attempt`` (docs/engine.md, "Time travel").

        Raises:
            FlowNotFoundError: no Flow has this ID.
            BadRequestError: the fork point is missing a field, or names nothing in the
                history (nothing changes).

        """
        when = options.history_event_time
        request = TimeTravelRequest(
            type=options.type.value,
            history_event_time=when.timestamp() if when is not None else None,
            step_type=options.step_type,
            step_execution_id=options.step_execution_id,
            step_method=options.step_method.value if options.step_method else None,
            reason=options.reason,
            skip_writes_reapply=options.skip_writes_reapply,
            rerun_single_attempt=options.rerun_single_attempt,
        )
        response = await self._http.call(
            "POST",
            f"/v1/flows/{_Q(flow_id)}/time-travel",
            TimeTravelResponse,
            body=request,
            flow_id=flow_id,
        )
        return response.run_id

    async def skip_timer(
        self, flow_id: str, step_execution_id: StepExecutionId, timer_id: TimerId
    ) -> None:
        """Fire one pending timer of a waiting Step execution now.

        Use it to cut a wait short (a reminder that should go out at once, a test that
        must not sit through a long timer). The timer is chosen by ``condition_id`` or by
        its zero-based index among the Wait's timers (other conditions are not counted).
        The execution wakes as if the timer had fired on its own: with ``Wait.any_of`` it
        wins, with ``Wait.all_of`` it counts as ready. Returns once the server committed it.
        The Flow timeout's ``sys:timeout_handler`` timer is skipped with
        ``StepExecutionId("sys:timeout_handler")`` and index 0.

        Raises:
            ValueError: ``step_execution_id`` has an empty type or a number below 1.
            StepExecutionNotFoundError: the latest run has no such execution.
            TimerNotFoundError: its Wait has no such timer, or it is not parked on a Wait.
            TimerNotPendingError: that timer already fired or was skipped (or the
                execution's Wait was met).
            FlowNotActiveOrNotFoundError: the Flow is closed.
            FlowNotFoundError: no such Flow.

        """
        path = _step_path(flow_id, step_execution_id) + "/skip-timer"
        body = SkipTimerRequest(
            condition_id=timer_id.condition_id, condition_index=timer_id.condition_index
        )
        await self._http.raw("POST", path, body=body, flow_id=flow_id, idempotent=False)

    async def wait_for_step_completion(
        self,
        flow_id: str,
        step_execution_id: StepExecutionId,
        options: WaitForStepCompletionOptions = WaitForStepCompletionOptions(),  # noqa: B008
    ) -> None:
        """Block until one Step execution of the Flow's latest run has ended.

        An execution ends when its ``execute`` committed, when it failed for good, or when
        it was cancelled (closing the Flow ends all of them). Returns at once for one that
        already ended. The server long-polls in calls of at most 60 s
        (``options.internal_handler_timeout`` shortens them); this keeps calling until the
        execution ends or ``options.request_timeout`` (0, the default: no limit) passes.
        Safe to call from many tasks at once; it changes nothing.

        Raises:
            ValueError: ``step_execution_id`` has an empty type or a number below 1, or a
                timeout is negative.
            StepExecutionNotFoundError: the latest run has not created that execution
                (the Step type ran fewer times).
            RequestTimeoutError: ``request_timeout`` passed first.
            FlowNotFoundError: no such Flow.

        """
        path = _step_path(flow_id, step_execution_id) + "/completion"
        total = options.request_timeout.total_seconds()
        per_call = options.internal_handler_timeout.total_seconds()
        if total < 0 or per_call < 0:
            raise ValueError("WaitForStepCompletionOptions timeouts must not be negative")
        deadline = _deadline(total) if total > 0 else None
        while True:
            wait_s = min(per_call, _LONG_POLL_CAP_S) if per_call > 0 else _LONG_POLL_CAP_S
            if deadline is not None:
                wait_s = max(0.0, min(wait_s, deadline - time.monotonic()))
            try:
                await self._http.raw(
                    "GET",
                    path,
                    params={"timeout_s": _fmt(wait_s)},
                    timeout=wait_s + _LONG_POLL_SLACK_S,
                    long_poll=True,
                    flow_id=flow_id,
                    idempotent=True,
                )
            except LongPollTimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise RequestTimeoutError(
                        StatusCode.DEADLINE_EXCEEDED,
                        ErrorSubStatus.REQUEST_TIMEOUT,
                        f"Step execution {step_execution_id} still running after"
                        f" {total}s (request_timeout)",
                        "wait_for_step_completion",
                        flow_id,
                    ) from None
                continue
            return

    async def wait_for_attribute_match(
        self, flow_id: str, attribute: Any, *args: object, **kwargs: object
    ) -> Any:
        """Block until an active Flow's committed Attribute matches; return the value.

        Call as ``(flow_id, attribute, AttributeMatch[, WaitForAttributeOptions])`` or,
        for a map instance, ``(flow_id, attribute_map, key, AttributeMatch[, options])``
        (``match=``, ``key=`` and ``options=`` may be given by keyword). Ordering
        matches take numbers; strings and bools compare for equality only. The server
        long-polls (at most 60 s per call, or ``internal_handler_timeout``); this keeps
        calling until a match or ``request_timeout`` (``0``: no limit).

        Raises:
            FlowNotActiveOrNotFoundError: no such Flow, or it closed without a match.
            RequestTimeoutError: ``request_timeout`` passed without a match.
            BadRequestError: an undeclared Attribute, a value kept as a blob, or an
                operand its operator does not take.
            TypeError: wrong arguments (a hard-delete Attribute, no AttributeMatch).

        """
        return await _search.wait_match(
            self._http, self.registry, flow_id, attribute, args, dict(kwargs)
        )

    async def update_flow_config(self, flow_id: str, config: FlowConfig) -> None:
        """Merge ``config`` into a running Flow's ``FlowConfig``.

        Every field of ``config`` that is not None replaces the Flow's value; the others
        keep theirs (``attribute_store_names=[]`` is a value: it disables the stores).
        ``describe_flow(...).config`` shows the merged config, and the history records a
        ``FlowConfigUpdated`` event. Step methods that start afterwards use the new
        ``step_durability``; which fields mean something in this engine is said on
        ``FlowConfig``. Concurrent updates are applied one after the other.

        Raises:
            FlowNotActiveOrNotFoundError: the Flow is closed or does not exist.
            BadRequestError: a negative continue-as-new field, a listening
                ``worker_target`` or an empty Attribute Store name (nothing changes).

        """
        await self._http.raw(
            "POST",
            f"/v1/flows/{_Q(flow_id)}/config",
            body=config_to_wire(config),
            flow_id=flow_id,
            idempotent=True,
        )

    async def trigger_continue_as_new(self, flow_id: str) -> None:
        """Make a running Flow continue as a new run with the same Flow ID.

        Returns once the request is recorded. The handover happens at the Flow's next
        commit after which every live Step execution is parked in its Wait (at once if
        that is now): the new run gets the Attributes, pending Channel messages and the
        parked executions; the old run's status becomes ``CONTINUED_AS_NEW``.

        Raises:
            FlowNotFoundError: no Flow has this ID.
            FlowNotActiveOrNotFoundError: its latest run is closed.

        """
        await self._http.raw(
            "POST", f"/v1/flows/{_Q(flow_id)}/continue-as-new", body=None, flow_id=flow_id
        )


def _step_path(flow_id: str, execution: StepExecutionId) -> str:
    if not isinstance(execution, StepExecutionId):
        raise TypeError(f"expected a StepExecutionId, got {type(execution).__name__}")
    if not execution.step_type or isinstance(execution.number, bool) or execution.number < 1:
        raise ValueError(
            f"a StepExecutionId needs a non-empty step_type and a number >= 1, got {execution!r}"
        )
    return (
        f"/v1/flows/{_Q(flow_id)}/steps/{_defs.quote_segment(execution.step_type)}"
        f"/{int(execution.number)}"
    )


def _deadline(timeout: timedelta | float | None) -> float | None:
    """Monotonic deadline of a wait of ``timeout`` (None: no deadline)."""
    s = seconds(timeout)
    if s is None:
        return None
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"timeout must be finite and non-negative, got {timeout!r}")
    return time.monotonic() + s


def _fmt(value: float) -> str:
    return f"{value:.3f}"


def _long_poll_timeout(flow_id: str, timeout: timedelta | float | None) -> LongPollTimeoutError:
    return LongPollTimeoutError(
        StatusCode.DEADLINE_EXCEEDED,
        ErrorSubStatus.LONG_POLL_TIMEOUT,
        f"still waiting after {seconds(timeout)}s",
        "wait_for_flow",
        flow_id,
    )
