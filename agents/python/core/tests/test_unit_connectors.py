"""Connector manifests, the OpenAPI mapping, secret providers and request building."""

from __future__ import annotations

import base64
import json
import pickle
import threading
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest
from dex_agents import (
    CallableSecrets,
    Connector,
    ConnectorCallError,
    ConnectorManifestError,
    ConnectorOperation,
    ConnectorSecret,
    ConnectorSecretError,
    ConnectorToolSource,
    DeferredToolExecution,
    EnvSecrets,
    FileSecrets,
    OpenAPIConnector,
    SecretProvider,
    ToolEffect,
    ToolExecutionError,
    ToolSource,
)

from tests.connector_defs import BILLING_DOCUMENT

SECRET = "s3cr3t-value-123"


def doc(paths: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": paths, **extra}


def build(document: Any, **kwargs: Any) -> OpenAPIConnector:
    kwargs.setdefault("base_url", "http://127.0.0.1:9")
    return OpenAPIConnector.from_document(document, **kwargs)


def call(key: str = "flow-1/turn-1/call-1") -> DeferredToolExecution:
    # call_tool reads only the idempotency key from the execution.
    return DeferredToolExecution(
        flow_id="flow-1",
        tool_call=cast(Any, None),
        idempotency_key=key,
        attempt=1,
        events=cast(Any, None),
        heartbeat=cast(Any, None),
    )


# --------------------------------------------------------------------------- mapping


def test_the_billing_document_maps_to_tools_with_effects_schemas_and_credentials() -> None:
    connector = build(BILLING_DOCUMENT, credentials=EnvSecrets())
    ops = {op.name: op for op in connector.operations}
    assert list(ops) == [
        "get_order",
        "create_refund",
        "create_charge",
        "echo_auth",
        "flaky_read",
        "wipe_everything",
    ]
    assert ops["get_order"].effect is ToolEffect.READ
    assert ops["create_refund"].effect is ToolEffect.IDEMPOTENT_WRITE
    assert ops["create_refund"].sends_idempotency_key
    assert ops["create_charge"].effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert not ops["create_charge"].sends_idempotency_key
    assert ops["echo_auth"].effect is ToolEffect.READ  # x-dex-effect wins over POST
    assert ops["wipe_everything"].effect is ToolEffect.IDEMPOTENT_WRITE  # DELETE
    assert {op.credentials for op in ops.values()} == {"bearerAuth"}
    assert ops["get_order"].input_schema == {
        "type": "object",
        "properties": {"order_id": {"type": "integer"}},
        "additionalProperties": False,
        "required": ["order_id"],
    }
    # The $ref to components.schemas.Refund is inlined.
    body = ops["create_refund"].input_schema["properties"]["body"]
    assert body["properties"] == {"order_id": {"type": "integer"}, "amount": {"type": "integer"}}
    assert ops["create_refund"].input_schema["required"] == ["body"]
    assert ops["get_order"].description == "Look up an order."


def test_methods_give_default_effects_and_keys_make_posts_idempotent() -> None:
    paths = {
        "/a": {
            "get": {"operationId": "a_get"},
            "put": {"operationId": "a_put"},
            "delete": {"operationId": "a_delete"},
            "post": {"operationId": "a_post"},
            "patch": {"operationId": "a_patch"},
        },
        "/b": {
            "post": {
                "operationId": "b_post",
                "parameters": [{"name": "Idempotency-Key", "in": "header", "required": True}],
            }
        },
    }
    ops = {op.name: op for op in build(doc(paths)).operations}
    assert {name: op.effect.value for name, op in ops.items()} == {
        "a_get": "read",
        "a_put": "idempotent_write",
        "a_delete": "idempotent_write",
        "a_post": "non_idempotent_write",
        "a_patch": "non_idempotent_write",
        "b_post": "idempotent_write",
    }
    # The declared key header is the session's to set, not an argument for the model.
    assert ops["b_post"].input_schema["properties"] == {}
    assert ops["b_post"].sends_idempotency_key
    everywhere = build(doc({"/c": {"post": {"operationId": "c"}}}, **{"x-idempotency-key": True}))
    assert everywhere.operations[0].effect is ToolEffect.IDEMPOTENT_WRITE


def test_parameters_of_every_location_and_derived_names() -> None:
    paths = {
        "/items/{item_id}/parts": {
            "parameters": [{"name": "item_id", "in": "path", "schema": {"type": "string"}}],
            "get": {
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    {"name": "X-Tenant", "in": "header", "required": True},
                ]
            },
        }
    }
    (op,) = build(doc(paths)).operations
    assert op.name == "get_items_item_id_parts"
    assert op.description == "GET /items/{item_id}/parts"
    assert op.input_schema["properties"] == {
        "item_id": {"type": "string"},
        "limit": {"type": "integer"},
        "X-Tenant": {"type": "string"},
    }
    assert op.input_schema["required"] == ["item_id", "X-Tenant"]
    assert op.credentials is None


BAD_DOCUMENTS: list[tuple[Any, str]] = [
    ("{not json", "not valid JSON"),
    ([], "must be a JSON object"),
    ({"swagger": "2.0", "paths": {}}, "only OpenAPI 3.0 and 3.1"),
    (doc({}), "has no paths"),
    (doc({"/a": {}}), "has no operations"),
    (doc({"a": {"get": {}}}), "must start with '/'"),
    (doc({"/a": {"get": {"operationId": "has space"}}}), "not a valid tool name"),
    (
        doc({"/a": {"get": {"operationId": "x"}}, "/b": {"get": {"operationId": "x"}}}),
        "'x' is used twice",
    ),
    (doc({"/a/{id}": {"get": {}}}), "placeholder {id} has no path parameter"),
    (
        doc({"/a": {"get": {"parameters": [{"name": "id", "in": "path"}]}}}),
        "'id' is not in the path",
    ),
    (doc({"/a": {"get": {"parameters": [{"name": "c", "in": "cookie"}]}}}), "cookie parameter"),
    (
        doc({"/a": {"get": {"parameters": [{"name": "Authorization", "in": "header"}]}}}),
        "is set by the Connector",
    ),
    (
        doc({"/a": {"post": {"requestBody": {"content": {"text/plain": {}}}}}}),
        "only application/json request bodies",
    ),
    (
        doc({"/a": {"get": {"parameters": [{"$ref": "other.yaml#/p"}]}}}),
        "only local $ref values",
    ),
    (doc({"/a": {"get": {"parameters": [{"$ref": "#/nowhere"}]}}}), "points nowhere"),
    (
        doc(
            {
                "/a": {
                    "post": {
                        "requestBody": {
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/N"}}
                            }
                        }
                    }
                }
            },
            components={
                "schemas": {
                    "N": {
                        "type": "object",
                        "properties": {"next": {"$ref": "#/components/schemas/N"}},
                    }
                }
            },
        ),
        "recursive schema",
    ),
    (doc({"/a": {"get": {"x-dex-effect": "maybe"}}}), "x-dex-effect 'maybe' is not one of"),
    (doc({"/a": {"get": {"security": [{"missing": []}]}}}), "'missing' is not defined"),
    (
        doc(
            {"/a": {"get": {"security": [{"k": []}]}}},
            components={"securitySchemes": {"k": {"type": "apiKey", "in": "query", "name": "k"}}},
        ),
        "must be sent in a header",
    ),
    (
        doc(
            {"/a": {"get": {"security": [{"o": []}]}}},
            components={"securitySchemes": {"o": {"type": "oauth2", "flows": {}}}},
        ),
        "type 'oauth2' of 'o' is not supported",
    ),
    (
        doc(
            {"/a": {"get": {"security": [{"a": [], "b": []}]}}},
            components={
                "securitySchemes": {
                    "a": {"type": "http", "scheme": "bearer"},
                    "b": {"type": "http", "scheme": "bearer"},
                }
            },
        ),
        "combining ['a', 'b'] is not supported",
    ),
]


@pytest.mark.parametrize(("document", "message"), BAD_DOCUMENTS)
def test_a_bad_document_raises_a_clear_error(document: Any, message: str) -> None:
    with pytest.raises(
        ConnectorManifestError, match=message.replace("$", r"\$").replace("[", r"\[")
    ):
        build(document, credentials=EnvSecrets())


def test_credentials_and_urls_are_checked_when_the_connector_is_built() -> None:
    without = build(BILLING_DOCUMENT)  # fine until an operation that needs them is offered
    with pytest.raises(ConnectorManifestError, match="needs credentials 'bearerAuth'"):
        ConnectorToolSource(without, ["get_order"])
    public = doc({"/open": {"get": {"operationId": "open", "security": []}}, "/x": {"get": {}}})
    public["security"] = [{"bearerAuth": []}]
    public["components"] = BILLING_DOCUMENT["components"]
    assert [t.name for t in ConnectorToolSource(build(public), ["open"]).tools] == ["open"]
    with pytest.raises(ConnectorManifestError, match="must be an absolute http"):
        build(BILLING_DOCUMENT, base_url="/relative", credentials=EnvSecrets())
    with pytest.raises(ConnectorManifestError, match="pass base_url"):
        OpenAPIConnector.from_document(doc({"/a": {"get": {}}}))
    with pytest.raises(ConnectorManifestError, match="timeout must be positive"):
        build(BILLING_DOCUMENT, credentials=EnvSecrets(), timeout=0)
    from_servers = OpenAPIConnector.from_document(BILLING_DOCUMENT, credentials=EnvSecrets())
    assert from_servers.base_url == "http://billing.invalid"
    assert from_servers.name == "billing"
    assert build(json.dumps(BILLING_DOCUMENT), credentials=EnvSecrets()).name == "billing"


# --------------------------------------------------------------------------- picking


def test_the_application_picks_the_operations_to_offer() -> None:
    connector = build(BILLING_DOCUMENT, credentials=EnvSecrets())
    source = ConnectorToolSource(connector, operations=["create_refund", "get_order"])
    assert isinstance(source, ToolSource)
    assert isinstance(connector, Connector)
    assert [t.name for t in source.tools] == ["create_refund", "get_order"]
    assert [t.effect for t in source.tools] == [ToolEffect.IDEMPOTENT_WRITE, ToolEffect.READ]
    assert len(ConnectorToolSource(connector).tools) == 6

    with pytest.raises(ConnectorManifestError, match="has no operation 'refund_all'; its ope"):
        ConnectorToolSource(connector, operations=["get_order", "refund_all"])
    with pytest.raises(ConnectorManifestError, match="operations is empty"):
        ConnectorToolSource(connector, operations=[])
    with pytest.raises(ConnectorManifestError, match="names 'get_order' twice"):
        ConnectorToolSource(connector, operations=["get_order", "get_order"])
    with pytest.raises(ConnectorManifestError, match="not a string"):
        ConnectorToolSource(connector, operations="get_order")


async def test_list_tools_returns_the_picked_tools() -> None:
    source = ConnectorToolSource(build(BILLING_DOCUMENT, credentials=EnvSecrets()), ["get_order"])
    assert list(await source.list_tools()) == list(source.tools)
    assert "get_order" in repr(source)


# --------------------------------------------------------------------------- secrets


async def test_env_secrets_derive_variable_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BILLING_BEARERAUTH", SECRET)
    monkeypatch.setenv("EXACT_NAME", "other")
    provider = EnvSecrets(prefix="BILLING_", names={"special": "EXACT_NAME"})
    assert isinstance(provider, SecretProvider)
    assert provider.variable_name("bearer-Auth.x") == "BILLING_BEARER_AUTH_X"
    assert await provider.resolve("bearerAuth") == SECRET
    assert await provider.resolve("special") == "other"
    with pytest.raises(ConnectorSecretError, match="BILLING_NOPE is not set"):
        await provider.resolve("nope")


async def test_file_secrets_read_one_file_per_reference(tmp_path: Path) -> None:
    (tmp_path / "bearerAuth").write_text(SECRET + "\n")
    (tmp_path / "empty").write_text("")
    provider = FileSecrets(tmp_path)
    assert await provider.resolve("bearerAuth") == SECRET
    with pytest.raises(ConnectorSecretError, match="is empty"):
        await provider.resolve("empty")
    with pytest.raises(ConnectorSecretError, match="cannot read"):
        await provider.resolve("absent")
    for bad in ("../etc", "a/b", "..", ""):
        with pytest.raises(ConnectorSecretError, match="not a plain file name"):
            await provider.resolve(bad)


async def test_callable_secrets_accept_sync_and_async_functions() -> None:
    async def vault(reference: str) -> str | None:
        return SECRET if reference == "bearerAuth" else None

    def broken(reference: str) -> str:
        raise RuntimeError(f"vault said {SECRET}")

    assert await CallableSecrets(vault).resolve("bearerAuth") == SECRET
    assert await CallableSecrets(lambda ref: ref.upper()).resolve("abc") == "ABC"
    with pytest.raises(ConnectorSecretError, match="no secret for credentials 'other'"):
        await CallableSecrets(vault).resolve("other")
    with pytest.raises(ConnectorSecretError) as caught:
        await CallableSecrets(broken).resolve("bearerAuth")
    assert SECRET not in str(caught.value) and "RuntimeError" in str(caught.value)
    assert caught.value.__suppress_context__


def test_a_resolved_secret_never_shows_its_value() -> None:
    secret = ConnectorSecret("bearerAuth", SECRET)
    assert SECRET not in repr(secret) and SECRET not in str(secret) and SECRET not in f"{secret}"
    assert secret.reveal() == SECRET
    assert secret.redact(f"token {SECRET}!") == "token [redacted]!"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)
    quoted = ConnectorSecret("q", 'a"b/c')
    quoted.hide("YSJiL2M=")
    assert quoted.redact('{"auth": "a\\"b/c", "basic": "YSJiL2M="}') == (
        '{"auth": "[redacted]", "basic": "[redacted]"}'
    )


# --------------------------------------------------------------------------- calls


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]] = []
    status = 200

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        _Recorder.seen.append(
            {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
        )
        # Like a careless API, the answer quotes the credentials it received.
        quoted = self.headers.get("Authorization") or self.headers.get("X-Api-Key")
        data = json.dumps({"ok": True, "path": self.path, "auth": quoted}).encode()
        if self.path.startswith("/big"):
            data = b"x" * 5000
        self.send_response(_Recorder.status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _handle


@pytest.fixture
def recorder() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.seen = []
    _Recorder.status = 200
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()


SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer"},
    "basic": {"type": "http", "scheme": "basic"},
    "key": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
}


def request_doc(scheme: str) -> dict[str, Any]:
    return doc(
        {
            "/things/{name}": {
                "post": {
                    "operationId": "put_thing",
                    "x-idempotency-key": True,
                    "parameters": [
                        {"name": "name", "in": "path", "required": True},
                        {"name": "dry", "in": "query", "schema": {"type": "boolean"}},
                        {"name": "tags", "in": "query", "schema": {"type": "array"}},
                        {"name": "X-Trace", "in": "header"},
                    ],
                    "requestBody": {"content": {"application/json": {"schema": {}}}},
                }
            },
            "/big": {"get": {"operationId": "big"}},
        },
        security=[{scheme: []}],
        components={"securitySchemes": SCHEMES},
    )


@pytest.mark.parametrize(
    ("scheme", "header", "value"),
    [
        ("bearer", "Authorization", f"Bearer {SECRET}"),
        ("basic", "Authorization", "Basic " + base64.b64encode(SECRET.encode()).decode()),
        ("key", "X-Api-Key", SECRET),
    ],
)
async def test_a_call_builds_the_request_from_the_arguments(
    recorder: str, scheme: str, header: str, value: str
) -> None:
    connector = build(
        request_doc(scheme), base_url=recorder, credentials=CallableSecrets(lambda ref: SECRET)
    )
    source = ConnectorToolSource(connector, ["put_thing"])
    arguments = {
        "name": "a b/c",
        "dry": True,
        "tags": ["x", "y"],
        "X-Trace": "t-1",
        "body": {"n": 1},
    }
    output = await source.call_tool(source.tools[0], arguments, call("f/turn-1/c-1"))
    (seen,) = _Recorder.seen
    assert seen["method"] == "POST"
    assert seen["path"] == "/things/a%20b%2Fc?dry=true&tags=x&tags=y"
    assert seen["headers"][header] == value
    assert seen["headers"]["Idempotency-Key"] == "f/turn-1/c-1"
    assert seen["headers"]["X-Trace"] == "t-1"
    assert json.loads(seen["body"]) == {"n": 1}
    answer = json.loads(output)
    assert answer["ok"] is True
    assert SECRET not in output and value.split()[-1] not in output
    assert answer["auth"] in ("Bearer [redacted]", "Basic [redacted]", "[redacted]")


async def test_large_answers_are_cut_at_the_limit(recorder: str) -> None:
    connector = build(
        request_doc("key"),
        base_url=recorder,
        credentials=CallableSecrets(lambda ref: SECRET),
        max_response_bytes=100,
    )
    source = ConnectorToolSource(connector, ["big"])
    output = await source.call_tool(source.tools[0], {}, call())
    assert output == "x" * 100 + "\n[cut at max_response_bytes=100]"


async def test_answers_map_to_model_visible_failures_or_step_failures(recorder: str) -> None:
    connector = build(
        request_doc("key"), base_url=recorder, credentials=CallableSecrets(lambda ref: SECRET)
    )
    source = ConnectorToolSource(connector, ["big"])
    _Recorder.status = 409
    with pytest.raises(ToolExecutionError, match="GET /big: HTTP 409 Conflict"):
        await source.call_tool(source.tools[0], {}, call())
    for status in (429, 500, 503):
        _Recorder.status = status
        with pytest.raises(ConnectorCallError, match=f"HTTP {status}"):
            await source.call_tool(source.tools[0], {}, call())
    closed = build(
        request_doc("key"),
        base_url="http://127.0.0.1:9",
        credentials=CallableSecrets(lambda ref: SECRET),
    )
    with pytest.raises(ConnectorCallError, match="ConnectError"):
        await ConnectorToolSource(closed, ["big"]).call_tool(source.tools[0], {}, call())


async def test_arguments_that_do_not_fit_fail_before_anything_is_sent(recorder: str) -> None:
    connector = build(
        request_doc("key"), base_url=recorder, credentials=CallableSecrets(lambda ref: SECRET)
    )
    source = ConnectorToolSource(connector, ["put_thing"])
    tool = source.tools[0]
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "missing required argument 'name'"),
        ({"name": "a", "extra": 1}, "unknown argument 'extra'"),
        ({"name": 5}, "argument 'name' must be of type string"),
        ({"name": "a", "dry": 1}, "argument 'dry' must be of type boolean"),
    ]
    for arguments, message in cases:
        with pytest.raises(ToolExecutionError, match=message):
            await source.call_tool(tool, arguments, call())
    missing = ConnectorToolSource(
        build(request_doc("key"), base_url=recorder, credentials=EnvSecrets(prefix="ABSENT_")),
        ["put_thing"],
    )
    with pytest.raises(ToolExecutionError, match="ABSENT_KEY is not set"):
        await missing.call_tool(tool, {"name": "a"}, call())
    assert _Recorder.seen == []


class _LeakyConnector:
    """A custom Connector whose errors and output quote the credentials."""

    name = "leaky"
    secrets: SecretProvider | None = CallableSecrets(lambda ref: SECRET)
    operations: Sequence[ConnectorOperation] = (
        ConnectorOperation("leak", "d", {"type": "object"}, ToolEffect.READ, "token"),
        ConnectorOperation("fail", "d", {"type": "object"}, ToolEffect.READ, "token"),
        ConnectorOperation("crash", "d", {"type": "object"}, ToolEffect.READ, "token"),
    )

    async def invoke(
        self,
        operation: ConnectorOperation,
        arguments: Mapping[str, Any],
        *,
        credentials: ConnectorSecret | None,
        idempotency_key: str,
    ) -> str:
        assert credentials is not None
        value = credentials.reveal()
        if operation.name == "fail":
            raise ToolExecutionError(f"denied for {value}")
        if operation.name == "crash":
            raise OSError(f"socket closed while sending {value}")
        return f"used {value} with {idempotency_key}"


async def test_the_source_scrubs_the_secret_from_outputs_and_errors() -> None:
    source = ConnectorToolSource(cast(Connector, _LeakyConnector()))
    leak, fail, crash = source.tools
    assert await source.call_tool(leak, {}, call("k")) == "used [redacted] with k"
    with pytest.raises(ToolExecutionError) as failed:
        await source.call_tool(fail, {}, call())
    assert failed.value.message == "denied for [redacted]"
    with pytest.raises(ConnectorCallError) as crashed:
        await source.call_tool(crash, {}, call())
    assert str(crashed.value) == "OSError: socket closed while sending [redacted]"
    assert crashed.value.__suppress_context__


def test_a_custom_connector_is_checked_when_offered() -> None:
    class NoSecrets(_LeakyConnector):
        secrets = None

    with pytest.raises(ConnectorManifestError, match="needs credentials 'token'"):
        ConnectorToolSource(cast(Connector, NoSecrets()))

    class BadName(_LeakyConnector):
        operations = (ConnectorOperation("a b", "d", {}, ToolEffect.READ),)

    with pytest.raises(ConnectorManifestError, match="'a b' is not a valid tool name"):
        ConnectorToolSource(cast(Connector, BadName()))


# --------------------------------------------------------------------------- docs


def test_the_documented_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    page = Path(__file__).resolve().parents[4] / "docs" / "agents" / "tools.md"
    section = page.read_text().split("## Connectors", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, str(page), "exec"), {"__name__": "docs_example"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "get_order read {'order_id': {'type': 'integer'}}"
    assert lines[1].startswith("create_refund idempotent_write {'body': {'type': 'object'")
    assert len(lines) == 2
