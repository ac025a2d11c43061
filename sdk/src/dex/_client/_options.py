"""Options of the Client calls: frozen keyword-only records with the spec's defaults."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dex._credential import CredentialLike
from dex._options import seconds
from dex._state._common import check_map_key

__all__ = [
    "ClientOptions",
    "IdReusePolicy",
    "InitialAttribute",
    "RPCInvokeOptions",
    "StartFlowOptions",
    "StopFlowOptions",
    "StopType",
    "seconds",
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
    DISALLOW = "disallow"
    ALLOW_TERMINATE_IF_RUNNING = "allow_terminate_if_running"


class StopType(enum.Enum):
    """How ``stop_flow`` closes a Flow: cancel (default), terminate, or fail with a reason."""

    CANCEL = "cancel"
    TERMINATE = "terminate"
    FAIL = "fail"


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """How a Client reaches the server.

    Attributes:
        server_address: ``host:port`` (or an ``http(s)://`` URL) of the Dex server;
            default ``"localhost:8801"``.
        credential: a ``Credential`` (``FileCredential``, ``ApiKeyCredential``, your
            own) or a fixed bearer token string, for a server started with a token;
            None sends no token.
        timeout: seconds a single request may take (default 30). Long polls
            (``wait_for_flow``, ``read_stream``) add their own wait on top.

    Raises:
        ValueError: ``timeout`` is not a finite positive number.

    """

    server_address: str = "localhost:8801"
    credential: CredentialLike = None
    timeout: float = 30.0

    def __post_init__(self) -> None:
        _check_duration("ClientOptions", "timeout", self.timeout, zero=False)


@dataclass(frozen=True, kw_only=True)
class InitialAttribute:
    """One initial Attribute (``key is None``) or AttributeMap instance value of a start."""

    attribute: Any
    key: str | None
    value: Any


@dataclass(frozen=True, kw_only=True)
class StartFlowOptions:
    """Options of ``start_flow``; immutable once the Flow started.

    Attributes:
        id_reuse_policy: rule for a Flow ID used before (default ``IdReusePolicy.DEFAULT``).
        request_id: idempotency key of this start; empty: the client picks a random one,
            so a start it sends again after a lost connection never starts a second run.
        ignore_already_started: when the ID is taken by a run started with the same
            ``request_id``, return its run ID instead of raising
            ``FlowAlreadyStartedError``.
        start_delay: accept the start now, run the start Step after this delay.
        initial_attributes: values written atomically with the Flow's creation; add them
            with ``with_attribute`` / ``with_attribute_map``.

    Raises:
        ValueError: ``start_delay`` is negative or not finite.

    """

    id_reuse_policy: IdReusePolicy = IdReusePolicy.DEFAULT
    request_id: str = ""
    ignore_already_started: bool = False
    start_delay: timedelta | float | None = None
    initial_attributes: tuple[InitialAttribute, ...] = ()

    def __post_init__(self) -> None:
        _check_duration("StartFlowOptions", "start_delay", self.start_delay, zero=True)

    def with_attribute(self, attribute: Any, value: Any) -> StartFlowOptions:
        """Return a copy that also sets the Attribute ``attribute`` to ``value`` at start."""
        item = InitialAttribute(attribute=attribute, key=None, value=value)
        return dataclasses.replace(self, initial_attributes=(*self.initial_attributes, item))

    def with_attribute_map(self, attribute_map: Any, key: str, value: Any) -> StartFlowOptions:
        """Return a copy that also sets instance ``key`` of ``attribute_map`` at start.

        ``key`` follows the rule of ``AttributeMap`` itself: any non-empty string, ``/``
        included.

        Raises:
            InvalidMapKeyError: ``key`` is not a non-empty string (a ``ValueError``).

        """
        check_map_key(attribute_map.name, key)
        item = InitialAttribute(attribute=attribute_map, key=key, value=value)
        return dataclasses.replace(self, initial_attributes=(*self.initial_attributes, item))


@dataclass(frozen=True, kw_only=True)
class RPCInvokeOptions:
    """Per-call options of ``invoke_rpc``.

    Attributes:
        timeout: seconds the server waits for the Worker; None uses the RPC's own timeout
            (the server caps it at 60 s).
        load_attribute_map_instances: extra map instances to deliver, as
            ``(attribute_map, key)`` pairs.
        lock_attribute_map_instances: extra map instances to lock for this call, as
            ``(attribute_map, key)`` pairs; any lock makes the call transactional.

    Raises:
        ValueError: ``timeout`` is not a finite positive duration.

    """

    timeout: timedelta | float | None = None
    load_attribute_map_instances: tuple[tuple[Any, str], ...] = ()
    lock_attribute_map_instances: tuple[tuple[Any, str], ...] = ()

    def __post_init__(self) -> None:
        _check_duration("RPCInvokeOptions", "timeout", self.timeout, zero=False)


@dataclass(frozen=True, kw_only=True)
class StopFlowOptions:
    """Options of ``stop_flow``: the stop ``type`` (default CANCEL) and an optional reason."""

    type: StopType = StopType.CANCEL
    reason: str | None = None
