"""A local stand-in for the Anthropic Messages API, so the real CLI runs without an API key.

The Claude Agent SDK drives its bundled CLI, and the CLI calls the Messages API at
``ANTHROPIC_BASE_URL``. :class:`FakeMessagesServer` answers there from a script, streamed
the way the API streams, so tests exercise the real SDK, the real CLI and its hooks, with
no network and no key::

    with FakeMessagesServer(script) as server:
        env = server.cli_env(home=tmp_path / "home")  # give it to the CLI's process

The script sees each request as a :class:`ModelCall` and returns a :class:`FakeReply`
(or plain text).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAKE_API_KEY = "sk-ant-test-offline"


@dataclass(frozen=True)
class FakeToolCall:
    """One ``tool_use`` block: the tool's name as the CLI offers it, and its input."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FakeReply:
    """One model response: optional thinking, text, then tool calls (``tool_use`` stop)."""

    text: str = ""
    tool_calls: tuple[FakeToolCall, ...] = ()
    thinking: str = ""
    input_tokens: int = 12
    output_tokens: int = 7


@dataclass(frozen=True)
class ToolResult:
    """A ``tool_result`` the conversation carries, with the name of the tool it answers."""

    tool_use_id: str
    tool_name: str
    text: str
    is_error: bool


@dataclass(frozen=True)
class ModelCall:
    """One Messages API request, reduced to what a script needs.

    Attributes:
        messages: the request's ``user`` and ``assistant`` messages, in order.
        tools: names of the tools offered.
        user_texts: texts of the user messages that hold no tool results, in order.
        turn_number: 1-based count of ``user_texts`` (one per conversation turn).
        call_index: 0-based index of this call within the turn.
        tool_results: every tool result since the turn's user text.

    """

    messages: list[dict[str, Any]]
    tools: list[str]
    user_texts: list[str]
    turn_number: int
    call_index: int
    tool_results: list[ToolResult]

    @property
    def user_text(self) -> str:
        """The turn's user text ("" when there is none)."""
        return self.user_texts[-1] if self.user_texts else ""

    def saw_text(self, needle: str) -> bool:
        """Whether any message of the request contains ``needle``."""
        return needle in json.dumps(self.messages)


Script = Callable[[ModelCall], "FakeReply | str"]


def _blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


# Texts the CLI adds to the conversation itself (context reminders, resume prompts).
_CLI_TEXTS = ("Continue from where you left off.", "(no content)")


def _written_by_cli(text: str) -> bool:
    stripped = text.strip()
    return not stripped or stripped.startswith("<system-reminder>") or stripped in _CLI_TEXTS


def parse_call(body: Mapping[str, Any]) -> ModelCall:
    """Reduce a Messages API request body to a :class:`ModelCall`."""
    messages = [m for m in body.get("messages", []) if m.get("role") in ("user", "assistant")]
    tools = [str(t.get("name")) for t in body.get("tools", []) if isinstance(t, dict)]
    user_texts: list[str] = []
    turn_start = 0
    names: dict[str, str] = {}
    for index, message in enumerate(messages):
        blocks = _blocks(message)
        for block in blocks:
            if block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
        if message["role"] == "user" and not any(b.get("type") == "tool_result" for b in blocks):
            texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
            spoken = [t for t in texts if not _written_by_cli(t)]
            if spoken:
                user_texts.append("\n".join(spoken))
                turn_start = index
    results: list[ToolResult] = []
    for message in messages[turn_start + 1 :]:
        for block in _blocks(message):
            if block.get("type") == "tool_result":
                tool_use_id = str(block.get("tool_use_id"))
                results.append(
                    ToolResult(
                        tool_use_id=tool_use_id,
                        tool_name=names.get(tool_use_id, ""),
                        text=_text_of(block.get("content")),
                        is_error=bool(block.get("is_error")),
                    )
                )
    # The CLI stores one response as one assistant entry per content block; count
    # responses, not blocks, by merging consecutive assistant messages.
    responses = 0
    previous = ""
    for message in messages[turn_start + 1 :]:
        if message["role"] == "assistant" and previous != "assistant":
            responses += 1
        previous = message["role"]
    return ModelCall(
        messages=messages,
        tools=tools,
        user_texts=user_texts,
        turn_number=len(user_texts),
        call_index=responses,
        tool_results=results,
    )


def _events(call: ModelCall, reply: FakeReply, model: str) -> list[tuple[str, dict[str, Any]]]:
    digest = hashlib.sha256(json.dumps(call.messages).encode()).hexdigest()[:12]
    stop = "tool_use" if reply.tool_calls else "end_turn"
    out: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{digest}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": reply.input_tokens, "output_tokens": 0},
                },
            },
        )
    ]
    blocks: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    if reply.thinking:
        blocks.append(
            (
                {"type": "thinking", "thinking": "", "signature": ""},
                {"type": "thinking_delta", "thinking": reply.thinking},
            )
        )
    if reply.text:
        blocks.append(({"type": "text", "text": ""}, {"type": "text_delta", "text": reply.text}))
    for number, tool_call in enumerate(reply.tool_calls):
        tool_use_id = f"toolu_{digest}_{number}"
        blocks.append(
            (
                {"type": "tool_use", "id": tool_use_id, "name": tool_call.name, "input": {}},
                {"type": "input_json_delta", "partial_json": json.dumps(dict(tool_call.input))},
            )
        )
    for index, (start, delta) in enumerate(blocks):
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        if delta is not None:
            out.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens},
            },
        )
    )
    out.append(("message_stop", {"type": "message_stop"}))
    return out


class FakeMessagesServer:
    """Serve the Messages API on ``127.0.0.1`` from a script, in a background thread.

    Args:
        script: answers each model call; a ``str`` is a text-only reply.
        on_call: called with each model call before it is answered, in the request's
            thread (it may block, e.g. on a file gate, to hold the call open).

    Use it as a context manager; :attr:`base_url` and :meth:`cli_env` tell the CLI where
    it is. Requests other than ``POST /v1/messages`` get an empty JSON object.
    Concurrency: each request runs in its own thread.
    """

    def __init__(self, script: Script, on_call: Callable[[ModelCall], None] | None = None):
        self.script = script
        self.on_call = on_call
        self.calls: list[ModelCall] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def cli_env(self, home: Path | None = None) -> dict[str, str]:
        """Environment for the CLI: this server, a placeholder key, no other traffic.

        Args:
            home: a directory to use as ``HOME`` so the CLI keeps its config and
                transcripts there (created when missing); None leaves ``HOME`` alone.

        """
        env = {
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": FAKE_API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        if home is not None:
            home.mkdir(parents=True, exist_ok=True)
            env["HOME"] = str(home)
        return env

    def __enter__(self) -> FakeMessagesServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _answer(self, body: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        call = parse_call(body)
        with self._lock:
            self.calls.append(call)
        if self.on_call is not None:
            self.on_call(call)
        reply = self.script(call)
        if isinstance(reply, str):
            reply = FakeReply(text=reply)
        return _events(call, reply, str(body.get("model", "claude-test")))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?", 1)[0]
                if path.endswith("/count_tokens"):
                    self._json({"input_tokens": 1})
                    return
                if path != "/v1/messages":
                    self._json({})
                    return
                events = outer._answer(body)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for name, data in events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

            def do_GET(self) -> None:
                self._json({})

            def _json(self, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return Handler
