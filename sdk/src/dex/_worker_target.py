"""``WorkerTarget``: how the server reaches the Workers of a Flow."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkerTarget", "is_pull_target"]


@dataclass(frozen=True)
class WorkerTarget:
    """How the server reaches a Worker; for this engine, always ``WorkerTarget(pull=True)``.

    Workers of this engine pull their tasks over one WebSocket, so ``Worker.worker_target``
    is always the pull target. ``address`` and ``headless`` describe a Worker listening on
    its own port, which this release does not run: a Worker asked to listen raises
    ``FeatureNotAvailableError``.

    Attributes:
        address: ``host:port`` of a listening Worker (default empty).
        headless: ``address`` is a headless DNS name of several Workers (default False).
        pull: the Worker pulls its tasks (default False).

    Raises:
        ValueError: ``pull`` together with ``address`` or ``headless``.

    """

    address: str = ""
    headless: bool = False
    pull: bool = False

    def __post_init__(self) -> None:
        if self.pull and (self.address or self.headless):
            raise ValueError("WorkerTarget: pull cannot be combined with address or headless")

    @property
    def is_listening(self) -> bool:
        """Whether this target names a listening Worker (not run by this release)."""
        return bool(self.address or self.headless)


def is_pull_target(target: WorkerTarget | None) -> bool:
    """Whether ``target`` asks for nothing but what this release runs: pull Workers.

    None and a target without ``address`` and ``headless`` qualify.
    """
    return target is None or not target.is_listening
