"""FlowConfig rules: merging an update into a Flow's config, and the durability it implies.

Of the ``FlowConfig`` fields, ``step_durability`` decides something here (which durability
a Step method without its own runs with, shown in each Step event of the history). The
others have no effect in this engine and are kept and shown back as given:
``active_step_search_mode`` and the continue-as-new fields, ``attribute_store_names``, and a
pull ``worker_target`` (every Worker pulls). A listening ``worker_target`` is refused.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from dex._protocol import FlowConfigWire

__all__ = ["InvalidConfigError", "check_config", "effective_durability", "merge_config"]

Durability = Literal["sync", "async"]
# the largest count or byte size a config field takes (a 63-bit integer)
_MAX_INT = (1 << 63) - 1


class InvalidConfigError(ValueError):
    """A FlowConfig field holds a value no Flow can have; the message names the field."""


def check_config(config: FlowConfigWire) -> None:
    """Refuse values no Flow can have.

    Raises:
        InvalidConfigError: a negative (or absurdly large) threshold or page size, a
            listening ``worker_target`` (this engine runs pull Workers only), or an empty
            Attribute Store name.

    """
    for name in ("continue_as_new_threshold", "continue_as_new_page_size_bytes"):
        value = getattr(config, name)
        if value is not None and not 0 <= value <= _MAX_INT:
            raise InvalidConfigError(f"FlowConfig.{name} must be >= 0, got {value}")
    target = config.worker_target
    if target is not None and (target.address or target.headless):
        raise InvalidConfigError(
            "FlowConfig.worker_target names a listening Worker; this engine runs pull Workers"
        )
    for store in config.attribute_store_names or []:
        if not store:
            raise InvalidConfigError("FlowConfig.attribute_store_names holds an empty name")


def merge_config(current: FlowConfigWire | None, update: FlowConfigWire) -> FlowConfigWire:
    """Return ``current`` with every field ``update`` sets (not None) replaced by it.

    ``attribute_store_names=[]`` is a value (it disables the stores), not "keep".

    Raises:
        InvalidConfigError: as :func:`check_config` for ``update``.

    """
    check_config(update)
    base = current if current is not None else FlowConfigWire()
    changes = {
        f: getattr(update, f) for f in update.__struct_fields__ if getattr(update, f) is not None
    }
    return msgspec.structs.replace(base, **changes)


def effective_durability(
    method_option: str, *, has_recovery_route: bool, flow_default: str | None
) -> Durability:
    """The durability a Step method runs with (dex-model §3.9).

    The method's own option wins when it is not ``default``; otherwise a method with a
    recovery route (a ``wait_for`` that proceeds on failure, an ``execute`` with a failure
    Step) is SYNC; otherwise the Flow's ``step_durability``, and SYNC when that is unset
    or ``default``.
    """
    if method_option in ("sync", "async"):
        return method_option  # type: ignore[return-value]
    if has_recovery_route:
        return "sync"
    if flow_default in ("sync", "async"):
        return flow_default  # type: ignore[return-value]
    return "sync"
