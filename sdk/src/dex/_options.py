"""StepOptions and RetryPolicy: how the engine runs a Step type's methods."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dex._state import AttributeMap, Channel, ChannelLoad, ChannelMap, InstanceLoad, LockKey
    from dex._step import Step

__all__ = ["RetryPolicy", "StepDurability", "StepOptions", "WaitForFailurePolicy"]

Duration = timedelta | float  # float: seconds


def seconds(d: Duration | None) -> float | None:
    """Return a duration in seconds (None stays None)."""
    if d is None:
        return None
    return d.total_seconds() if isinstance(d, timedelta) else float(d)


class StepDurability(enum.StrEnum):
    """When a method's result is persisted. ASYNC behaves as SYNC in this engine."""

    DEFAULT = "default"
    SYNC = "sync"
    ASYNC = "async"


class WaitForFailurePolicy(enum.StrEnum):
    """What happens when ``wait_for`` exhausts its retries."""

    FAIL_FLOW = "fail_flow"
    """The Flow fails (default)."""
    PROCEED = "proceed"
    """``execute`` runs anyway; ``context.wait_for_method_failed()`` is True."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Retry policy of one Step method.

    Delay before attempt n+1 = min(initial_interval × backoff_coefficient^(n-1),
    maximum_interval). Retries stop at the first limit reached: ``maximum_attempts``
    (including the first; None or 0 = unlimited) or ``total_duration`` since the first
    attempt. A zero/None interval or duration takes the default.

    Attributes:
        initial_interval: first delay (default 1 s).
        backoff_coefficient: growth factor (default 2).
        maximum_interval: largest delay (default 100 s).
        maximum_attempts: attempt budget (default unlimited).
        total_duration: time budget (default 4 h).

    """

    initial_interval: Duration = timedelta(seconds=1)
    backoff_coefficient: float = 2.0
    maximum_interval: Duration = timedelta(seconds=100)
    maximum_attempts: int | None = None
    total_duration: Duration | None = timedelta(hours=4)

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


def _tuple(v: Any) -> tuple[Any, ...]:
    return tuple(v) if not isinstance(v, tuple) else v


@dataclass(frozen=True, kw_only=True, slots=True)
class StepOptions:
    """Options of a Step type (``Step.get_step_options``) or of one movement.

    Per-movement options (``StepMovement.of(..., options=...)``) replace the Step type's
    options whole. All fields are optional.

    Attributes:
        wait_for_method_timeout: per-attempt timeout of ``wait_for`` (default 2 h).
        execute_method_timeout: per-attempt timeout of ``execute`` (default 2 h).
        heartbeat_timeout: fail an attempt when no heartbeat/output frame arrives within it
            (default None: no heartbeat timeout).
        schedule_to_start_timeout: the longest a ready attempt waits for a
            Worker to take it (timedelta or seconds). When it passes, the attempt fails
            with error type ``SCHEDULE_TO_START_TIMEOUT`` and follows the retry policy.
            The wait restarts whenever the task is queued again (its Worker was lost, or
            a Worker rejected it). Default None: the Flow's
            ``get_schedule_to_start_timeout()``, else the server's default (none: a task
            waits for a Worker as long as it takes).
        wait_for_retry / execute_retry: retry policies (default ``RetryPolicy()``).
        wait_for_failure: FAIL_FLOW (default) or PROCEED.
        execute_failure_step / execute_failure_options: the recovery route set by
            ``on_execute_failure_proceed_to``.
        wait_for_durability / execute_durability: ``StepDurability`` (default DEFAULT).
        wait_for_lock_attributes / execute_lock_attributes: lock keys (``attr.lock()``,
            ``amap.lock(key)``) held for the whole method.
        *_load_attribute_maps: AttributeMaps loaded whole.
        *_load_attribute_map_instances: single instances (``amap.load(key)``).
        *_load_channels: Channels whose pending messages are loaded.
        *_load_channel_maps / *_load_channel_map_instances: same for ChannelMaps.

    """

    wait_for_method_timeout: Duration = timedelta(hours=2)
    execute_method_timeout: Duration = timedelta(hours=2)
    heartbeat_timeout: Duration | None = None
    wait_for_retry: RetryPolicy = field(default_factory=RetryPolicy)
    execute_retry: RetryPolicy = field(default_factory=RetryPolicy)
    wait_for_failure: WaitForFailurePolicy = WaitForFailurePolicy.FAIL_FLOW
    execute_failure_step: type[Step[Any]] | None = None
    execute_failure_options: StepOptions | None = None
    wait_for_durability: StepDurability = StepDurability.DEFAULT
    execute_durability: StepDurability = StepDurability.DEFAULT
    wait_for_lock_attributes: tuple[LockKey, ...] = ()
    execute_lock_attributes: tuple[LockKey, ...] = ()
    wait_for_load_attribute_maps: tuple[AttributeMap[Any], ...] = ()
    execute_load_attribute_maps: tuple[AttributeMap[Any], ...] = ()
    wait_for_load_attribute_map_instances: tuple[InstanceLoad, ...] = ()
    execute_load_attribute_map_instances: tuple[InstanceLoad, ...] = ()
    wait_for_load_channels: tuple[Channel[Any] | ChannelLoad, ...] = ()
    execute_load_channels: tuple[Channel[Any] | ChannelLoad, ...] = ()
    wait_for_load_channel_maps: tuple[ChannelMap[Any], ...] = ()
    execute_load_channel_maps: tuple[ChannelMap[Any], ...] = ()
    wait_for_load_channel_map_instances: tuple[InstanceLoad, ...] = ()
    execute_load_channel_map_instances: tuple[InstanceLoad, ...] = ()
    schedule_to_start_timeout: Duration | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if "_lock_" in f.name or "_load_" in f.name:
                object.__setattr__(self, f.name, _tuple(getattr(self, f.name)))
        for name in ("wait_for_method_timeout", "execute_method_timeout", "heartbeat_timeout"):
            v = seconds(getattr(self, name))
            if v is not None and v <= 0:
                raise ValueError(f"StepOptions.{name} must be positive")
        check_schedule_to_start("StepOptions", self.schedule_to_start_timeout)

    def on_execute_failure_proceed_to(
        self, step: type[Step[Any]], options: StepOptions | None = None
    ) -> StepOptions:
        """Return a copy whose exhausted ``execute`` schedules ``step`` with the same input.

        The recovery Step sees ``context.recovery_error``. ``options`` replace the recovery
        Step's own options for that movement.
        """
        return dataclasses.replace(self, execute_failure_step=step, execute_failure_options=options)
