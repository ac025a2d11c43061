"""Options of the Client calls: frozen records, positional in the documented order.

A start that uses an optional feature (a Flow timeout, a ``config_override``, a Flow
retry policy) names it in its request (see ``required_start_features``), and a server
that does not run it refuses the start: ``start_flow`` raises ``FeatureNotAvailableError``.
This release's server runs Flow timeouts and FlowConfig, not Flow retries.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from dex._credential import CredentialLike
from dex._env import DEFAULT_SERVER_ADDRESS, env_credential, env_server_address
from dex._flow_config import FlowConfig, unsupported_flow_config
from dex._options import RetryPolicy, StepDurability, seconds
from dex._protocol import FlowTimeoutSpec
from dex._state._common import check_map_key
from dex._worker_target import WorkerTarget

if TYPE_CHECKING:
    from dex._options import StepOptions
    from dex._registry import FlowEntry
    from dex._step import Step

__all__ = [
    "ClientOptions",
    "FlowTimeoutHandlerOptions",
    "FlowTimeoutPolicy",
    "IdReusePolicy",
    "InitialAttribute",
    "RPCInvokeOptions",
    "StartFlowOptions",
    "StopFlowOptions",
    "StopType",
    "TimeTravelOptions",
    "TimeTravelStepMethod",
    "TimeTravelType",
    "seconds",
    "required_start_features",
]


def _check_duration(owner: str, name: str, value: timedelta | float | None, *, zero: bool) -> None:
    s = seconds(value)
    if s is not None and (not math.isfinite(s) or s < 0 or (s == 0 and not zero)):
        bound = "non-negative" if zero else "positive"
        raise ValueError(f"{owner}.{name} must be finite and {bound}, got {value!r}")


class IdReusePolicy(enum.Enum):
    """What ``start_flow`` does when the Flow ID was used before (spec §2.3).

    ``DEFAULT`` rejects a running Flow and starts a new run over a closed one.
    """

    DEFAULT = "default"
    ALLOW_IF_PREVIOUS_FAILED = "allow_if_previous_failed"
    ALLOW_IF_NOT_RUNNING = "allow_if_not_running"
    ALLOW_TERMINATE_IF_RUNNING = "allow_terminate_if_running"
    DISALLOW = "disallow"


class StopType(enum.Enum):
    """How ``stop_flow`` closes a Flow: cancel (default), terminate, or fail with a reason."""

    CANCEL = "cancel"
    TERMINATE = "terminate"
    FAIL = "fail"


class FlowTimeoutPolicy(enum.Enum):
    """What a Flow's soft timeout does: fail it, cancel it, or run its timeout handler."""

    DEFAULT = "default"
    FAIL = "fail"
    CANCEL = "cancel"
    HANDLER = "handler"


class TimeTravelType(enum.Enum):
    """Where ``time_travel`` forks a Flow's history from."""

    BEGINNING = "beginning"
    HISTORY_EVENT_TIME = "history_event_time"
    STEP_TYPE = "step_type"
    STEP_EXECUTION_ID = "step_execution_id"


class TimeTravelStepMethod(enum.Enum):
    """Which method of the chosen Step a time-travel fork runs again."""

    WAIT_FOR = "wait_for"
    EXECUTE = "execute"


@dataclass(frozen=True)
class ClientOptions:
    """How a Client reaches the server.

    Attributes:
        server_address: ``host:port`` (or an ``http(s)://`` URL) of the Dex server,
            ``unix:///PATH`` for a server on this machine listening on that Unix socket
            (its ``--unix-socket``), or ``inproc://<name>`` for an embedded server of this
            process (the Client then uses its HTTP address); default: env
            ``DEX_SERVER_ADDRESS`` when set, else ``"localhost:8801"``. A ``unix:`` address
            without a path raises ``ValueError``.
        worker_target: where Flows started by this Client send their tasks. None (the
            default) and a pull target are what this release runs; a listening target
            makes the Client raise ``FeatureNotAvailableError``.
        credential: a ``Credential`` (``FileCredential``, ``ApiKeyCredential``, your
            own) or a fixed bearer token string, for a server started with a token;
            None (the default) sends the token in env ``DEX_TOKEN`` when set, else none.
        timeout: seconds a single request may take (default 30; keyword only). Long
            polls (``wait_for_flow``, ``read_stream``) add their own wait on top.

    Raises:
        ValueError: ``timeout`` is not a finite positive number.

    """

    server_address: str = DEFAULT_SERVER_ADDRESS
    worker_target: WorkerTarget | None = None
    credential: CredentialLike = None
    _: dataclasses.KW_ONLY
    timeout: float = 30.0

    def __post_init__(self) -> None:
        # The environment fills in only what the caller left unset.
        object.__setattr__(self, "server_address", env_server_address(self.server_address))
        object.__setattr__(self, "credential", env_credential(self.credential))
        _check_duration("ClientOptions", "timeout", self.timeout, zero=False)


@dataclass(frozen=True, kw_only=True)
class InitialAttribute:
    """One initial Attribute (``key is None``) or AttributeMap instance value of a start."""

    attribute: Any
    key: str | None
    value: Any


@dataclass(frozen=True)
class FlowTimeoutHandlerOptions:
    """Options of a Flow's timeout handler method (``FlowTimeoutPolicy.HANDLER``).

    The fields mirror a Step's ``execute`` options: ``method_timeout`` (None: 2 h),
    ``heartbeat_timeout``, ``retry`` (None: the default ``RetryPolicy``), ``durability``,
    locks and loads. ``on_failure_proceed_to(step)`` routes a handler that failed for good
    to ``step`` (a ``Step[None]``); without it the Flow fails. A start with these options
    and the FAIL or CANCEL policy is refused (``BadRequestError``).
    """

    method_timeout: timedelta | float | None = None
    heartbeat_timeout: timedelta | float | None = None
    retry: RetryPolicy | None = None
    durability: StepDurability = StepDurability.DEFAULT
    lock_attributes: tuple[Any, ...] = ()
    load_attribute_maps: tuple[Any, ...] = ()
    load_attribute_map_instances: tuple[Any, ...] = ()
    load_channels: tuple[Any, ...] = ()
    load_channel_maps: tuple[Any, ...] = ()
    load_channel_map_instances: tuple[Any, ...] = ()
    _failure_target: type[Step[None]] | None = None
    _failure_options: StepOptions | None = None

    def on_failure_proceed_to(
        self, step: type[Step[None]], options: StepOptions | None = None
    ) -> FlowTimeoutHandlerOptions:
        """Return a copy whose handler, when it fails for good, moves to Step ``step``."""
        return dataclasses.replace(self, _failure_target=step, _failure_options=options)


@dataclass(frozen=True)
class StartFlowOptions:
    """Options of ``start_flow``; immutable once the Flow started.

    Attributes:
        timeout: soft timeout of the whole run, from the start (None: none); a durable
            ``sys:timeout_handler`` Timer that ``skip_timer`` can fire early.
        timeout_policy: what the timeout does: FAIL (``FLOW_TIMEOUT``), CANCEL, HANDLER
            (``Flow.handle_timeout`` returns a decision); DEFAULT is HANDLER when the Flow
            overrides ``handle_timeout``, else FAIL.
        timeout_handler_options: options of the timeout handler (HANDLER only).
        start_delay: accept the start now, run the start Step after this delay.
        id_reuse_policy: rule for a Flow ID used before (default ``IdReusePolicy.DEFAULT``).
        retry_policy: retries of a failed Flow as a new run (not run yet).
        _attribute_initializations: values written atomically with the Flow's creation;
            add them with ``with_attribute``.
        config_override: ``FlowConfig`` of this Flow, kept with the run and shown by
            ``describe_flow``; a listening ``worker_target`` raises
            ``FeatureNotAvailableError``.
        ignore_already_started: when the ID is taken by a run started with the same
            ``request_id``, return its run ID instead of raising
            ``FlowAlreadyStartedError``.
        request_id: idempotency key of this start; None or empty: the client picks a
            random one, so a start it sends again after a lost connection never starts a
            second run.

    Raises:
        ValueError: ``start_delay`` or ``timeout`` is negative or not finite.

    """

    timeout: timedelta | float | None = None
    timeout_policy: FlowTimeoutPolicy = FlowTimeoutPolicy.DEFAULT
    timeout_handler_options: FlowTimeoutHandlerOptions | None = None
    start_delay: timedelta | float | None = None
    id_reuse_policy: IdReusePolicy = IdReusePolicy.DEFAULT
    retry_policy: RetryPolicy | None = None
    _attribute_initializations: tuple[InitialAttribute, ...] = ()
    config_override: FlowConfig | None = None
    ignore_already_started: bool = False
    request_id: str | None = None

    def __post_init__(self) -> None:
        _check_duration("StartFlowOptions", "start_delay", self.start_delay, zero=True)
        _check_duration("StartFlowOptions", "timeout", self.timeout, zero=False)

    @property
    def initial_attributes(self) -> tuple[InitialAttribute, ...]:
        """The initial Attribute and AttributeMap values added with ``with_attribute``."""
        return self._attribute_initializations

    def with_attribute(self, attribute: Any, /, *args: Any) -> StartFlowOptions:
        """Return a copy that also sets an initial value, written with the Flow's creation.

        ``with_attribute(attribute, value)`` sets an Attribute;
        ``with_attribute(attribute_map, key, value)`` sets one AttributeMap instance
        (``key`` follows ``AttributeMap``'s rule: any non-empty string, ``/`` included).

        Raises:
            TypeError: the number of arguments does not fit the kind of ``attribute``.
            InvalidMapKeyError: ``key`` is not a non-empty string (a ``ValueError``).

        """
        from dex._state import AttributeMap

        if isinstance(attribute, AttributeMap):
            if len(args) != 2:
                raise TypeError(
                    "with_attribute(attribute_map, key, value) takes a key and a value, "
                    f"got {len(args)} argument(s) after the map"
                )
            return self.with_attribute_map(attribute, args[0], args[1])
        if len(args) != 1:
            raise TypeError(
                "with_attribute(attribute, value) takes one value, "
                f"got {len(args)} argument(s) after the Attribute"
            )
        item = InitialAttribute(attribute=attribute, key=None, value=args[0])
        return self._adding(item)

    def with_attribute_map(self, attribute_map: Any, key: str, value: Any) -> StartFlowOptions:
        """Return a copy that also sets instance ``key`` of ``attribute_map`` at start.

        Same as ``with_attribute(attribute_map, key, value)``.

        Raises:
            InvalidMapKeyError: ``key`` is not a non-empty string (a ``ValueError``).

        """
        check_map_key(attribute_map.name, key)
        return self._adding(InitialAttribute(attribute=attribute_map, key=key, value=value))

    def _adding(self, item: InitialAttribute) -> StartFlowOptions:
        items = (*self._attribute_initializations, item)
        return dataclasses.replace(self, _attribute_initializations=items)


def flow_timeout_spec(entry: FlowEntry, options: StartFlowOptions) -> FlowTimeoutSpec | None:
    """The wire form of the start's soft timeout (None: the Flow has none).

    Raises:
        FlowDefinitionError: ``timeout_handler_options`` lock, load or route to something
            the Flow does not declare.

    """
    from dex._options import StepOptions as Options
    from dex._spec import options_spec

    timeout_s = seconds(options.timeout)
    if timeout_s is None:
        return None
    h = options.timeout_handler_options
    handler = None
    if h is not None:
        step_options = Options(
            execute_method_timeout=h.method_timeout,
            heartbeat_timeout=h.heartbeat_timeout,
            execute_retry=h.retry,
            execute_durability=h.durability,
            execute_lock_attributes=h.lock_attributes,
            execute_load_attribute_maps=h.load_attribute_maps,
            execute_load_attribute_map_instances=h.load_attribute_map_instances,
            execute_load_channels=h.load_channels,
            execute_load_channel_maps=h.load_channel_maps,
            execute_load_channel_map_instances=h.load_channel_map_instances,
            execute_failure_step=h._failure_target,
            execute_failure_options=h._failure_options,
        )
        handler = options_spec(step_options, entry, "timeout_handler_options")
    return FlowTimeoutSpec(
        timeout_s=timeout_s,
        policy=options.timeout_policy.value,
        handler=handler,
    )


def required_start_features(options: StartFlowOptions) -> list[str]:
    """Name each optional feature ``options`` asks of the server (none for a plain start).

    The start request carries these names; a server that does not run one refuses the
    start with ``FEATURE_NOT_AVAILABLE`` rather than start a Flow without it.
    """
    wanted = [
        ("Flow timeouts (StartFlowOptions.timeout)", options.timeout is not None),
        (
            "Flow timeouts (StartFlowOptions.timeout_policy)",
            options.timeout_policy is not FlowTimeoutPolicy.DEFAULT,
        ),
        (
            "Flow timeouts (StartFlowOptions.timeout_handler_options)",
            options.timeout_handler_options is not None,
        ),
        ("Flow retries (StartFlowOptions.retry_policy)", options.retry_policy is not None),
    ]
    features = [name for name, asked in wanted if asked]
    if options.config_override is not None:
        config = unsupported_flow_config(options.config_override)
        if config is not None:
            features.append(config)
    return features


@dataclass(frozen=True)
class RPCInvokeOptions:
    """Per-call options of ``invoke_rpc``.

    Attributes:
        lock_attribute_map_instances: extra map instances to lock for this call
            (``amap.lock(key)``); any lock makes the call transactional.
        load_attribute_map_instances: extra AttributeMap instances to deliver
            (``amap.load(key)``).
        load_channel_map_instances: extra ChannelMap instances whose pending messages to
            deliver (``channel_map.load(key)``).
        timeout: seconds the server waits for the Worker (keyword only); None uses the
            RPC's own timeout (the server caps it at 60 s).

    Each instance may also be given as an ``(map, key)`` pair.

    Raises:
        ValueError: ``timeout`` is not a finite positive duration.

    """

    lock_attribute_map_instances: tuple[Any, ...] = ()
    load_attribute_map_instances: tuple[Any, ...] = ()
    load_channel_map_instances: tuple[Any, ...] = ()
    _: dataclasses.KW_ONLY
    timeout: timedelta | float | None = None

    def __post_init__(self) -> None:
        _check_duration("RPCInvokeOptions", "timeout", self.timeout, zero=False)


@dataclass(frozen=True)
class StopFlowOptions:
    """Options of ``stop_flow``: the stop ``type`` (default CANCEL) and an optional reason."""

    type: StopType = StopType.CANCEL
    reason: str | None = None


@dataclass(frozen=True)
class TimeTravelOptions:
    """Where ``time_travel`` forks a Flow, and what the new run keeps of the old one.

    Attributes:
        type: the kind of fork point.
        history_event_time: for ``HISTORY_EVENT_TIME``: fork at this time.
        step_type: for ``STEP_TYPE``: fork at this Step type.
        step_execution_id: for ``STEP_EXECUTION_ID``: fork at this execution.
        step_method: which method of that Step runs again.
        reason: free text recorded with the fork.
        skip_writes_reapply: do not re-apply the effects (Attribute writes, Channel
            publishes, scheduled Steps) of the RPCs recorded after the fork point.
        rerun_single_attempt: keyword-only extension. By default a single-attempt Step
            (``execute_retry`` with ``maximum_attempts=1``) that committed after the fork
            point is not run again: the new run takes its recorded outcome, and one that
            durably started without an outcome fails with ``OUTCOME_UNKNOWN``. ``True``
            runs them again. The ``TimeTravelFork`` history event says which was chosen.

    """

    type: TimeTravelType
    history_event_time: datetime | None = None
    step_type: str | None = None
    step_execution_id: str | None = None
    step_method: TimeTravelStepMethod | None = None
    reason: str | None = None
    skip_writes_reapply: bool = False
    rerun_single_attempt: bool = field(default=False, kw_only=True)
