"""HTTP and WebSocket routes of the server."""

from __future__ import annotations

from dex_server.api._routes import BearerAuth, build_routes

__all__ = ["BearerAuth", "build_routes"]
