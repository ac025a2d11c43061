"""``WorkerTarget``: how the server reaches the Workers of a Flow."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkerTarget", "is_pull_target"]


@dataclass(frozen=True)
class WorkerTarget:
    """Where the server sends a Flow's tasks: a listening Worker's address, or pull Workers.

    This release runs pull Workers only (they connect to the server and take tasks), so
    the one target it serves is ``WorkerTarget(pull=True)``; ``None`` wherever a target is
    optional means the same. A listening target (``address``, ``headless``) is accepted
    as a value; a Client or start that needs one raises ``FeatureNotAvailableError``.

    Attributes:
        address: ``host:port`` of a listening Worker (default ``""``: none).
        headless: resolve ``address`` as a headless DNS name of many Workers (default False).
        pull: the Flow's Workers pull their tasks from the server (default False).

    """

    address: str = ""
    headless: bool = False
    pull: bool = False


def is_pull_target(target: WorkerTarget | None) -> bool:
    """Whether ``target`` asks for nothing but what this release runs: pull Workers.

    None and a target without ``address`` and ``headless`` qualify.
    """
    return target is None or (not target.address and not target.headless)
