"""How a Client reaches the server: ``ClientOptions``."""

from __future__ import annotations

from dex import (
    ClientOptions,
    Credential,
    WorkerTarget,
)

__all__ = [
    "ClientOptions",
    "Credential",
    "WorkerTarget",
]
