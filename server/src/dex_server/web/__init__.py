"""Dex Web: the server-rendered browser UI at ``/ui`` (see ``docs/web.md``)."""

from __future__ import annotations

from dex_server.web._routes import WebMount, WebUI

__all__ = ["WebMount", "WebUI"]
