"""The running server: store, dispatcher and background loops wired together."""

from __future__ import annotations

from dex_server.service._runtime import Runtime

__all__ = ["Runtime"]
