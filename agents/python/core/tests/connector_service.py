"""A small billing HTTP service for the Connector tests, run as a child process.

It checks a bearer token, counts every request, applies refunds once per
``Idempotency-Key`` (a repeat gets the first answer back), applies charges on every
request (no key support), and can pause a request at a ``FileGate`` after applying it,
before answering, so a test can SIGKILL the Worker mid-call.

Environment: ``SERVICE_TOKEN`` (the expected bearer token), ``SERVICE_STATE_DIR`` (gates
and the address file). Without a token: ``GET /_stats`` returns the counters as JSON, and
``POST /_gates`` with ``{"operation": ..., "gate": ...}`` makes the next request of that
operation pass the ``FileGate`` named ``gate``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from dex_agents.testing import FileGate

ADDRESS_FILE = "service.address"


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self.applied: dict[str, int] = {"refunds": 0, "charges": 0}
        self.refund_keys: list[str] = []
        self.answers_by_key: dict[str, dict[str, Any]] = {}
        self.armed: dict[str, str] = {}

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": dict(self.requests),
                "applied": dict(self.applied),
                "refund_keys": list(self.refund_keys),
            }


STATE = _State()
TOKEN = os.environ.get("SERVICE_TOKEN", "")
STATE_DIR = Path(os.environ.get("SERVICE_STATE_DIR", "."))


def pause_at(operation: str) -> None:
    """Pass the gate armed for ``operation``, if any (blocks this request's thread)."""
    with STATE.lock:
        name = STATE.armed.pop(operation, None)
    if name is None:
        return
    gate = FileGate(STATE_DIR, name)
    gate.mark_reached()
    deadline = time.monotonic() + 60
    while not gate.is_released() and time.monotonic() < deadline:
        time.sleep(0.02)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request line is enough in the counters

    def _answer(self, status: int, payload: Any) -> None:
        data = json.dumps(payload, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _count(self) -> None:
        with STATE.lock:
            line = f"{self.command} {self.path}"
            STATE.requests[line] = STATE.requests.get(line, 0) + 1

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self._answer(401, {"error": "bad or missing token"})
        return False

    def do_GET(self) -> None:
        if self.path == "/_stats":
            self._answer(200, STATE.stats())
            return
        self._count()
        if not self._authorized():
            return
        if self.path.startswith("/orders/"):
            order_id = self.path.split("/")[2].split("?")[0]
            if order_id == "0":
                self._answer(404, {"error": "no order 0"})
                return
            pause_at("get_order")
            self._answer(200, {"order_id": order_id, "status": "shipped", "total": 42})
            return
        if self.path == "/flaky":
            # An overloaded API that quotes the credentials in its error answer.
            auth = self.headers.get("Authorization")
            self._answer(503, {"error": "try again later", "auth": auth})
            return
        self._answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = self._body()
        if self.path == "/_gates":
            with STATE.lock:
                STATE.armed[body["operation"]] = body["gate"]
            self._answer(200, {"armed": body["operation"]})
            return
        self._count()
        if self.path == "/echo":
            # A careless API that quotes the request's credentials in its error answer.
            self._answer(400, {"error": "rejected", "auth": self.headers.get("Authorization")})
            return
        if not self._authorized():
            return
        if self.path == "/refunds":
            key = self.headers.get("Idempotency-Key") or ""
            with STATE.lock:
                STATE.refund_keys.append(key)
                answer = STATE.answers_by_key.get(key) if key else None
                if answer is None:
                    STATE.applied["refunds"] += 1
                    answer = {"refund_id": f"RF-{STATE.applied['refunds']}", "body": body}
                    if key:
                        STATE.answers_by_key[key] = answer
            pause_at("create_refund")
            self._answer(201, answer)
            return
        if self.path == "/charges":
            with STATE.lock:
                STATE.applied["charges"] += 1
                answer = {"charge_id": f"CH-{STATE.applied['charges']}", "body": body}
            pause_at("create_charge")
            self._answer(201, answer)
            return
        self._answer(404, {"error": "not found"})


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    target = STATE_DIR / ADDRESS_FILE
    temporary = target.with_suffix(".tmp")
    temporary.write_text(f"http://{host!s}:{port}")
    temporary.replace(target)
    server.serve_forever()


if __name__ == "__main__":
    main()
