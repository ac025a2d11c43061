from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dex_server.app import ServerConfig


class Runtime:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass
