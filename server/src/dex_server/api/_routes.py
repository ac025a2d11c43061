from __future__ import annotations

from dex._protocol import HealthResponse, encoder
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from dex_server.service import Runtime


def build_routes(runtime: Runtime) -> list[BaseRoute]:
    async def health(request: Request) -> Response:
        body = HealthResponse(ok=True, version="0.1.0", store="sqlite")
        return Response(encoder.encode(body), media_type="application/json")

    return [Route("/v1/health", health)]
