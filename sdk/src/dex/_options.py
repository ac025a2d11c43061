"""StepOptions and RetryPolicy: how the engine runs a Step type's methods."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dex._state import (
        AttributeMap,
        Channel,
        ChannelLoad,
        ChannelMap,
        InstanceLoad,
        LockKey,
    )
    from dex._step import Step

__all__ = [
    "RetryPolicy",
    "StepDurability",
    "StepOptions",
    "WaitForFailurePolicy",
]

Duration = timedelta | float  # float: seconds


def seconds(d: Duration | None) -> float | None:
    """Return a duration in seconds (None stays None)."""
    if d is None:
        return None
    return d.total_seconds() if isinstance(d, timedelta) else float(d)


class StepDurability(enum.Enum):
    """When a method's result is persisted. ASYNC behaves as SYNC in this engine."""

    DEFAULT = "default"
    SYNC = "sync"
    ASYNC = "async"


class WaitForFailurePolicy(enum.Enum):
    """What happens when ``wait_for`` exhausts its retries."""

    FAIL_FLOW = "fail_flow"
    """The Flow fails (default)."""
    PROCEED = "proceed"
    """``execute`` runs anyway; ``context.wait_for_method_failed()`` is True."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry policy of one Step method.

    Delay before attempt n+1 = min(initial_interval × backoff_coefficient^(n-1),
    maximum_interval). Retries stop at the first limit reached: ``maximum_attempts``
    (including the first; 0 or None = unlimited) or ``total_duration`` since the first
    attempt. Every field left at its zero/None default takes the engine's default, shown
    in brackets. Durations are ``timedelta`` or seconds.

    Attributes:
        initial_interval: first delay [1 s].
        backoff_coefficient: growth factor [2].
        maximum_interval: largest delay [100 s].
        maximum_attempts: attempt budget [unlimited].
        total_duration: time budget [4 h].

    Raises:
        ValueError: a negative or non-finite value.

    """

    initial_interval: Duration | None = None
    backoff_coefficient: float = 0.0
    maximum_interval: Duration | None = None
    maximum_attempts: int | None = 0
    total_duration: Duration | None = None

    def __post_init__(self) -> None:
        for name in ("initial_interval", "maximum_interval", "total_duration"):
            v = seconds(getattr(self, name))
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"RetryPolicy.{name} must be finite and not negative")
        if (
            not math.isfinite(self.backoff_coefficient)
            or self.backoff_coefficient < 0
            or (self.maximum_attempts is not None and self.maximum_attempts < 0)
        ):
            raise ValueError(
                "RetryPolicy: backoff_coefficient must be finite and not negative, "
                "maximum_attempts not negative"
            )


def check_schedule_to_start(owner: str, value: Duration | None) -> float | None:
    """Return a schedule-to-start timeout in seconds, or raise ``ValueError`` naming it."""
    v = seconds(value)
    if v is not None and not (math.isfinite(v) and v > 0):
        raise ValueError(
            f"{owner}.schedule_to_start_timeout must be a finite positive duration, got {value!r}"
        )
    return v


@dataclass(frozen=True, slots=True)
class StepOptions:
    """Options of a Step type (``Step.get_step_options``) or of one movement.

    Per-movement options (``StepMovement.of(..., options=...)``) replace the Step type's
    options whole. All fields are optional; None means "unset" (the default applies).
    Positional order is the order below; the last four are keyword-only.

    Attributes:
        wait_for_method_timeout: per-attempt timeout of ``wait_for`` (None: 2 h).
        execute_method_timeout: per-attempt timeout of ``execute`` (None: 2 h).
        heartbeat_timeout: fail an attempt when no heartbeat/output frame arrives within it
            (None: no heartbeat timeout).
        wait_for_retry / execute_retry: retry policies (None: ``RetryPolicy()``).
        wait_for_failure: FAIL_FLOW (default) or PROCEED.
        wait_for_durability / execute_durability: ``StepDurability`` (default DEFAULT).
        wait_for_lock_attributes / execute_lock_attributes: lock keys (``attr.lock()``,
            ``amap.lock(key)``) held for the whole method.
        *_load_attribute_maps: AttributeMaps loaded whole.
        *_load_attribute_map_instances: single instances (``amap.load(key)``).
        *_load_channels: Channels whose pending messages are loaded.
        *_load_channel_maps / *_load_channel_map_instances: same for ChannelMaps.
        execute_failure_step / execute_failure_options: the recovery route set by
            ``on_execute_failure_proceed_to`` (keyword-only).
        schedule_to_start_timeout: the longest a ready attempt waits for a
            Worker to take it (keyword-only; timedelta or seconds). When it passes, the
            attempt fails with error type ``SCHEDULE_TO_START_TIMEOUT`` and follows the
            retry policy. The wait restarts whenever the task is queued again (its Worker
            was lost, or a Worker rejected it). Default None: the Flow's
            ``get_schedule_to_start_timeout()``, else the server's default (none: a task
            waits for a Worker as long as it takes).
        execute_inline: the Step's ``execute`` may run on the Worker that delivers the
            result satisfying its ``Wait`` (keyword-only; default False), so that it
            commits with that result: no task, round trip or commit of its own. The
            Worker does so only when it saw the whole change: it ran this Step's
            ``wait_for`` (a Wait for ``n`` messages of one Channel that was empty) and the
            results that published those messages. It rebuilds the snapshot the execute
            would get; the server takes the outcome only if the task it builds is the
            same (else it dispatches ``execute`` as usual, so the method may run twice).
            Set it for an ``execute`` whose effects are all in its result (state writes,
            publishes, held Stream writes, the decision): no live Stream writes,
            heartbeats or reads, which make the Worker fall back. Needs both methods
            without locks, the same AttributeMaps loaded whole by both (the ``wait_for``
            brings the snapshot), and no other loads. History records the
            ``StepExecuteCompleted`` with output ``inline: true``.
        wait_for_inline: the Step's ``wait_for`` builds its ``Wait`` from its input alone
            (keyword-only; default False). Set it for a ``wait_for`` that does not touch
            its ``context`` (no state, Streams, heartbeats or identity) and has no side
            effects. The Worker whose ``execute`` schedules the Step then runs that
            ``wait_for`` itself, right after the ``execute``, and its Wait commits in the
            same transaction as the decision: the Step waits without a task, a round trip
            and a commit of its own. History still records its ``StepWaitForCompleted``
            (attempt 1, output ``inline: true``). Anything the Worker cannot do there
            (the method touches ``context``, raises, is a generator, or its Wait holds a
            SubFlow) falls back to the usual dispatch, so the method may run twice. Only
            movements from an ``execute`` decision go inline; a start, an RPC result or a
            failure route dispatches ``wait_for`` as usual. Async methods run on the
            Worker's event loop, sync ones on its executor.

    Durations are ``timedelta`` or seconds.

    Raises:
        ValueError: a timeout that is not positive, ``wait_for_inline`` with
            ``wait_for`` locks or loads (an inline ``wait_for`` has no state), or
            ``execute_inline`` with locks or loads other than the same AttributeMaps.

    """

    wait_for_method_timeout: Duration | None = None
    execute_method_timeout: Duration | None = None
    heartbeat_timeout: Duration | None = None
    wait_for_retry: RetryPolicy | None = None
    execute_retry: RetryPolicy | None = None
    wait_for_failure: WaitForFailurePolicy = WaitForFailurePolicy.FAIL_FLOW
    wait_for_durability: StepDurability = StepDurability.DEFAULT
    execute_durability: StepDurability = StepDurability.DEFAULT
    wait_for_lock_attributes: tuple[LockKey, ...] = ()
    execute_lock_attributes: tuple[LockKey, ...] = ()
    wait_for_load_attribute_maps: tuple[AttributeMap[Any], ...] = ()
    wait_for_load_attribute_map_instances: tuple[InstanceLoad, ...] = ()
    wait_for_load_channels: tuple[Channel[Any] | ChannelLoad, ...] = ()
    wait_for_load_channel_maps: tuple[ChannelMap[Any], ...] = ()
    wait_for_load_channel_map_instances: tuple[InstanceLoad, ...] = ()
    execute_load_attribute_maps: tuple[AttributeMap[Any], ...] = ()
    execute_load_attribute_map_instances: tuple[InstanceLoad, ...] = ()
    execute_load_channels: tuple[Channel[Any] | ChannelLoad, ...] = ()
    execute_load_channel_maps: tuple[ChannelMap[Any], ...] = ()
    execute_load_channel_map_instances: tuple[InstanceLoad, ...] = ()
    _: KW_ONLY
    execute_failure_step: type[Step[Any]] | None = None
    execute_failure_options: StepOptions | None = None
    schedule_to_start_timeout: Duration | None = None
    wait_for_inline: bool = False
    execute_inline: bool = False

    def __post_init__(self) -> None:
        for name in _SEQUENCE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        for name in _TIMEOUT_FIELDS:
            value = getattr(self, name)
            if value is not None:
                v = seconds(value)
                if v is not None and v <= 0:
                    raise ValueError(f"StepOptions.{name} must be positive")
        if self.schedule_to_start_timeout is not None:
            check_schedule_to_start("StepOptions", self.schedule_to_start_timeout)
        if self.wait_for_inline and any(getattr(self, n) for n in _WAIT_FOR_STATE_FIELDS):
            raise ValueError(
                "StepOptions.wait_for_inline needs a wait_for without locks or loads"
                " (an inline wait_for reads no state)"
            )
        if self.execute_inline and (
            any(getattr(self, n) for n in _INLINE_EXECUTE_EXCLUDED)
            or self.wait_for_load_attribute_maps != self.execute_load_attribute_maps
        ):
            raise ValueError(
                "StepOptions.execute_inline needs both methods without locks, the same"
                " AttributeMaps loaded whole by both, and no other loads"
            )

    def on_execute_failure_proceed_to(
        self, step: type[Step[Any]], options: StepOptions | None = None
    ) -> StepOptions:
        """Return a copy whose exhausted ``execute`` schedules ``step`` with the same input.

        The recovery Step sees ``context.recovery_error``. ``options`` replace the recovery
        Step's own options for that movement.
        """
        return dataclasses.replace(self, execute_failure_step=step, execute_failure_options=options)


# the fields __post_init__ turns into tuples, and the timeouts it checks (built once: a
# StepOptions is made for every movement that carries options)
_SEQUENCE_FIELDS = tuple(
    f.name for f in dataclasses.fields(StepOptions) if "_lock_" in f.name or "_load_" in f.name
)
_TIMEOUT_FIELDS = ("wait_for_method_timeout", "execute_method_timeout", "heartbeat_timeout")
_WAIT_FOR_STATE_FIELDS = tuple(n for n in _SEQUENCE_FIELDS if n.startswith("wait_for_"))
_INLINE_EXECUTE_EXCLUDED = tuple(
    n for n in _SEQUENCE_FIELDS if not n.endswith("_load_attribute_maps")
)
