"""``OpenAPIConnector``: a Connector whose operations come from an OpenAPI 3 document."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from dex_agents._connectors import (
    ConnectorCallError,
    ConnectorManifestError,
    ConnectorOperation,
    ConnectorSecret,
    SecretProvider,
)
from dex_agents._enums import ToolEffect
from dex_agents._runner import ToolExecutionError

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
IDEMPOTENCY_EXTENSION = "x-idempotency-key"
EFFECT_EXTENSION = "x-dex-effect"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
_MAX_ERROR_BODY_CHARS = 2000
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
_PARAMETER_LOCATIONS = ("path", "query", "header")
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 425, 429})


class _Auth:
    """How one security scheme puts its secret on a request."""

    def __init__(self, kind: str, name: str = "") -> None:
        self.kind = kind  # "bearer", "basic" or "header"
        self.name = name

    def apply(self, headers: dict[str, str], secret: ConnectorSecret) -> None:
        value = secret.reveal()
        if self.kind == "bearer":
            headers["Authorization"] = f"Bearer {value}"
        elif self.kind == "basic":
            encoded = base64.b64encode(value.encode()).decode()
            secret.hide(encoded)
            headers["Authorization"] = "Basic " + encoded
        else:
            headers[self.name] = value


class _Plan:
    """How to turn one operation's arguments into an HTTP request."""

    def __init__(
        self,
        method: str,
        path: str,
        parameters: Sequence[tuple[str, str]],
        has_body: bool,
        auth: _Auth | None,
    ) -> None:
        self.method = method
        self.path = path
        self.parameters = list(parameters)  # (name, location)
        self.has_body = has_body
        self.auth = auth


class OpenAPIConnector:
    """A Connector generated from an OpenAPI 3.0 or 3.1 document; calls run over httpx.

    Build it with :meth:`from_document`. Each operation of the document becomes one
    Connector operation:

    * name: the ``operationId`` (else ``<method>_<path words>``);
    * input schema: an ``object`` with one property per path, query and header parameter
      (required as the document says) and ``body`` for a JSON request body;
    * effect: ``x-dex-effect`` on the operation if present, else by method: GET, HEAD and
      OPTIONS are ``read``; PUT and DELETE are ``idempotent_write``; POST and PATCH are
      ``non_idempotent_write`` unless the operation says the API honours an idempotency
      key (``x-idempotency-key: true`` on the operation or the document, or a declared
      ``Idempotency-Key`` header parameter), then ``idempotent_write``;
    * credentials: the operation's first security requirement (else the document's), a
      scheme of ``components.securitySchemes``: HTTP ``bearer`` or ``basic`` (the secret is
      ``user:password``) or an ``apiKey`` in a header. The scheme name is the credentials
      reference the secret provider resolves.

    When an operation honours idempotency keys, every attempt of a call sends the call's
    idempotency key in the ``Idempotency-Key`` header (the model does not set it).

    Outcomes: a 2xx answer's body is the output (an empty body gives ``HTTP <status>``;
    past ``max_response_bytes`` it is cut with a note). A 4xx answer (except 408, 425 and
    429) raises ``ToolExecutionError`` with the status and body: the model sees a failure
    and the call is not retried. A 5xx answer, 408/425/429, a timeout or a connection
    error raises ``ConnectorCallError``, a Step failure: reads and idempotent writes run
    again (with the same key), other writes end ``outcome_unknown``.

    Concurrency: one short-lived ``httpx.AsyncClient`` per call; nothing survives a call.

    """

    def __init__(
        self,
        name: str,
        base_url: str,
        operations: Sequence[ConnectorOperation],
        plans: Mapping[str, _Plan],
        *,
        credentials: SecretProvider | None,
        timeout: float,
        max_response_bytes: int,
        headers: Mapping[str, str],
    ) -> None:
        self._name = name
        self.base_url = base_url.rstrip("/")
        self._operations = tuple(operations)
        self._plans = dict(plans)
        self._secrets = credentials
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.headers = dict(headers)

    @classmethod
    def from_document(
        cls,
        document: Mapping[str, Any] | str | bytes,
        *,
        base_url: str | None = None,
        credentials: SecretProvider | None = None,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        headers: Mapping[str, str] | None = None,
    ) -> OpenAPIConnector:
        """Build a Connector from an OpenAPI 3 document.

        Args:
            document: the parsed document, or its JSON text.
            base_url: where the API lives (``http`` or ``https``); None uses the first
                ``servers`` URL of the document, which must then be absolute.
            credentials: resolves the security schemes' secrets on the Worker
                (``EnvSecrets``, ``FileSecrets``, ``CallableSecrets``); a
                ``ConnectorToolSource`` refuses to offer an operation with a security
                requirement when it is None.
            name: the Connector's name (default: the document's ``info.title``).
            timeout: seconds per HTTP call (default 30); a timeout is a Step failure.
            max_response_bytes: most bytes of a response body the model sees (1 MiB).
            headers: extra headers sent on every call (not secrets: they are not scrubbed).

        Raises:
            ConnectorManifestError: the document is not OpenAPI 3, an operation cannot be
                turned into a tool (message names it), or an argument is out of range.

        """
        doc = _load(document)
        if timeout <= 0:
            raise ConnectorManifestError("timeout must be positive")
        if max_response_bytes <= 0:
            raise ConnectorManifestError("max_response_bytes must be positive")
        info = doc.get("info")
        title = info.get("title") if isinstance(info, Mapping) else None
        connector_name = name or str(title or "openapi")
        url = base_url if base_url is not None else _first_server(doc)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConnectorManifestError(f"base_url {url!r} must be an absolute http(s) URL")
        resolver = _Resolver(doc)
        schemes = _security_schemes(doc, resolver)
        document_security = doc.get("security")
        document_keys = doc.get(IDEMPOTENCY_EXTENSION) is True
        paths = doc.get("paths")
        if not isinstance(paths, Mapping) or not paths:
            raise ConnectorManifestError("the OpenAPI document has no paths")
        operations: list[ConnectorOperation] = []
        plans: dict[str, _Plan] = {}
        for path, item in paths.items():
            if not isinstance(path, str) or not path.startswith("/"):
                raise ConnectorManifestError(f"path {path!r} must start with '/'")
            item = resolver.deref(item, f"paths.{path}")
            if not isinstance(item, Mapping):
                raise ConnectorManifestError(f"path {path!r} must be an object")
            shared = item.get("parameters") or []
            for method in _METHODS:
                spec = item.get(method)
                if spec is None:
                    continue
                where = f"{method.upper()} {path}"
                if not isinstance(spec, Mapping):
                    raise ConnectorManifestError(f"{where}: the operation must be an object")
                operation, plan = _operation(
                    where,
                    method,
                    path,
                    spec,
                    shared,
                    resolver,
                    schemes,
                    document_security,
                    document_keys,
                )
                if operation.name in plans:
                    raise ConnectorManifestError(
                        f"{where}: operation name {operation.name!r} is used twice"
                    )
                operations.append(operation)
                plans[operation.name] = plan
        if not operations:
            raise ConnectorManifestError("the OpenAPI document has no operations")
        return cls(
            connector_name,
            url,
            operations,
            plans,
            credentials=credentials,
            timeout=timeout,
            max_response_bytes=max_response_bytes,
            headers=headers or {},
        )

    @property
    def name(self) -> str:
        """The Connector's name."""
        return self._name

    @property
    def operations(self) -> Sequence[ConnectorOperation]:
        """Every operation of the document, in document order."""
        return self._operations

    @property
    def secrets(self) -> SecretProvider | None:
        """The secret provider given as ``credentials``."""
        return self._secrets

    async def invoke(
        self,
        operation: ConnectorOperation,
        arguments: Mapping[str, Any],
        *,
        credentials: ConnectorSecret | None,
        idempotency_key: str,
    ) -> str:
        """Send one HTTP request for ``operation``; see the class for the outcomes."""
        plan = self._plans.get(operation.name)
        if plan is None:
            raise ToolExecutionError(f"{self._name!r} has no operation {operation.name!r}")
        path, query, headers, body = self._request(
            plan, operation, arguments, credentials, idempotency_key
        )
        where = f"{plan.method} {plan.path}"
        status, reason, text = await self._send(where, plan.method, path, query, headers, body)
        if 200 <= status < 300:
            return text or f"HTTP {status} {reason}".rstrip()
        summary = f"HTTP {status} {reason}".rstrip()
        detail = text[:_MAX_ERROR_BODY_CHARS]
        message = f"{where}: {summary}" + (f": {detail}" if detail else "")
        if 400 <= status < 500 and status not in _RETRYABLE_CLIENT_STATUSES:
            raise ToolExecutionError(message)
        raise ConnectorCallError(message)

    def _request(
        self,
        plan: _Plan,
        operation: ConnectorOperation,
        arguments: Mapping[str, Any],
        credentials: ConnectorSecret | None,
        idempotency_key: str,
    ) -> tuple[str, dict[str, str | list[str]], dict[str, str], bytes | None]:
        path = plan.path
        query: dict[str, str | list[str]] = {}
        headers = dict(self.headers)
        for parameter, location in plan.parameters:
            if parameter not in arguments:
                continue
            raw = arguments[parameter]
            if location == "query" and isinstance(raw, list | tuple):
                query[parameter] = [_text(item) for item in raw]  # name=a&name=b
                continue
            value = _text(raw)
            if location == "path":
                path = path.replace("{" + parameter + "}", quote(value, safe=""))
            elif location == "query":
                query[parameter] = value
            else:
                headers[parameter] = value
        missing = re.findall(r"\{([^}]+)\}", path)
        if missing:
            raise ToolExecutionError(f"{operation.name}: missing path argument {missing[0]!r}")
        if operation.sends_idempotency_key:
            headers[IDEMPOTENCY_KEY_HEADER] = idempotency_key
        if plan.auth is not None:
            if credentials is None:
                raise ToolExecutionError(f"{operation.name}: no credentials were resolved")
            plan.auth.apply(headers, credentials)
        body: bytes | None = None
        if plan.has_body and "body" in arguments:
            body = json.dumps(arguments["body"]).encode()
            headers["Content-Type"] = "application/json"
        return path, query, headers, body

    async def _send(
        self,
        where: str,
        method: str,
        path: str,
        query: Mapping[str, str | list[str]],
        headers: Mapping[str, str],
        body: bytes | None,
    ) -> tuple[int, str, str]:
        try:
            async with (
                httpx.AsyncClient(timeout=self.timeout) as client,
                client.stream(
                    method, self.base_url + path, params=query, headers=headers, content=body
                ) as response,
            ):
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > self.max_response_bytes:
                        break
                status = response.status_code
                reason = response.reason_phrase
                encoding = response.encoding or "utf-8"
        except httpx.TimeoutException:
            raise ConnectorCallError(
                f"{where}: no answer within {self.timeout}s (timeout)"
            ) from None
        except httpx.HTTPError as exc:
            # The message of an httpx error never carries headers; drop the chain anyway.
            raise ConnectorCallError(f"{where}: {type(exc).__name__}: {exc}") from None
        text = bytes(data[: self.max_response_bytes]).decode(encoding, errors="replace")
        if len(data) > self.max_response_bytes:
            text += f"\n[cut at max_response_bytes={self.max_response_bytes}]"
        return status, reason, text

    def __repr__(self) -> str:
        return f"OpenAPIConnector({self._name!r}, {self.base_url!r})"


# --------------------------------------------------------------------------- parsing


def _load(document: Mapping[str, Any] | str | bytes) -> Mapping[str, Any]:
    if isinstance(document, str | bytes):
        try:
            document = json.loads(document)
        except ValueError as exc:
            raise ConnectorManifestError(f"the OpenAPI document is not valid JSON: {exc}") from None
    if not isinstance(document, Mapping):
        raise ConnectorManifestError("the OpenAPI document must be a JSON object")
    version = document.get("openapi")
    if not isinstance(version, str) or not re.match(r"^3\.[01](\.\d+)?$", version):
        found = document.get("openapi", document.get("swagger"))
        raise ConnectorManifestError(
            f"only OpenAPI 3.0 and 3.1 documents are supported (the 'openapi' field is {found!r})"
        )
    return document


def _first_server(doc: Mapping[str, Any]) -> str:
    servers = doc.get("servers")
    if isinstance(servers, list) and servers and isinstance(servers[0], Mapping):
        url = servers[0].get("url")
        if isinstance(url, str):
            return url
    raise ConnectorManifestError("pass base_url: the document has no servers URL")


class _Resolver:
    """Inlines local ``$ref`` s (``#/...``); remote and recursive ones are errors."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc

    def lookup(self, ref: str, where: str) -> Any:
        if not ref.startswith("#/"):
            raise ConnectorManifestError(f"{where}: only local $ref values are supported: {ref!r}")
        node: Any = self.doc
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise ConnectorManifestError(f"{where}: $ref {ref!r} points nowhere")
            node = node[part]
        return node

    def deref(self, node: Any, where: str) -> Any:
        seen: list[str] = []
        while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen:
                raise ConnectorManifestError(f"{where}: $ref {ref!r} refers to itself")
            seen.append(ref)
            node = self.lookup(ref, where)
        return node

    def schema(self, node: Any, where: str, stack: tuple[str, ...] = ()) -> Any:
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str):
                if ref in stack:
                    raise ConnectorManifestError(
                        f"{where}: recursive schema {ref!r} cannot become a tool schema"
                    )
                if len(stack) > 32:
                    raise ConnectorManifestError(f"{where}: schema nesting exceeds 32 $ref levels")
                return self.schema(self.lookup(ref, where), where, (*stack, ref))
            return {key: self.schema(value, where, stack) for key, value in node.items()}
        if isinstance(node, list):
            return [self.schema(value, where, stack) for value in node]
        return node


def _security_schemes(doc: Mapping[str, Any], resolver: _Resolver) -> dict[str, Any]:
    components = doc.get("components")
    schemes = components.get("securitySchemes") if isinstance(components, Mapping) else None
    if schemes is None:
        return {}
    if not isinstance(schemes, Mapping):
        raise ConnectorManifestError("components.securitySchemes must be an object")
    return {
        str(key): resolver.deref(value, f"securitySchemes.{key}") for key, value in schemes.items()
    }


def _auth(where: str, scheme_name: str, scheme: Any) -> _Auth:
    if not isinstance(scheme, Mapping):
        raise ConnectorManifestError(f"{where}: security scheme {scheme_name!r} is not defined")
    kind = scheme.get("type")
    if kind == "http":
        http_scheme = str(scheme.get("scheme", "")).lower()
        if http_scheme in ("bearer", "basic"):
            return _Auth(http_scheme)
        raise ConnectorManifestError(
            f"{where}: HTTP security scheme {http_scheme!r} of {scheme_name!r} is not "
            "supported (use bearer or basic)"
        )
    if kind == "apiKey":
        location = scheme.get("in")
        header = scheme.get("name")
        if location == "header" and isinstance(header, str) and header:
            return _Auth("header", header)
        raise ConnectorManifestError(
            f"{where}: apiKey scheme {scheme_name!r} must be sent in a header (a key in the "
            f"query or a cookie would appear in URLs and logs; it is in {location!r})"
        )
    raise ConnectorManifestError(
        f"{where}: security scheme type {kind!r} of {scheme_name!r} is not supported "
        "(use http bearer, http basic or apiKey in a header)"
    )


def _credentials(
    where: str, requirements: Any, schemes: Mapping[str, Any]
) -> tuple[str | None, _Auth | None]:
    if requirements is None or requirements == []:
        return None, None
    if not isinstance(requirements, list) or not all(isinstance(r, Mapping) for r in requirements):
        raise ConnectorManifestError(f"{where}: security must be a list of objects")
    first = requirements[0]
    if not first:  # {} means "no credentials needed"
        return None, None
    if len(first) > 1:
        raise ConnectorManifestError(
            f"{where}: a security requirement combining {sorted(first)} is not supported "
            "(one scheme per operation)"
        )
    scheme_name = str(next(iter(first)))
    return scheme_name, _auth(where, scheme_name, schemes.get(scheme_name))


def _default_name(method: str, path: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", path)
    return "_".join([method, *words])[:64]


def _operation(
    where: str,
    method: str,
    path: str,
    spec: Mapping[str, Any],
    shared: Any,
    resolver: _Resolver,
    schemes: Mapping[str, Any],
    document_security: Any,
    document_keys: bool,
) -> tuple[ConnectorOperation, _Plan]:
    name = spec.get("operationId") or _default_name(method, path)
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9_-]{1,64}$", name):
        raise ConnectorManifestError(
            f"{where}: operationId {name!r} is not a valid tool name "
            "(1 to 64 letters, digits, '_' or '-')"
        )
    parameters = _parameters(where, spec, shared, resolver)
    honours_keys = document_keys or spec.get(IDEMPOTENCY_EXTENSION) is True
    properties: dict[str, Any] = {}
    required: list[str] = []
    plan_parameters: list[tuple[str, str]] = []
    for (pname, location), parameter in parameters.items():
        if location == "header" and pname.lower() == IDEMPOTENCY_KEY_HEADER.lower():
            honours_keys = True  # the session supplies it; the model never sets it
            continue
        if location == "header" and pname.lower() in ("authorization", "content-type", "accept"):
            raise ConnectorManifestError(
                f"{where}: header parameter {pname!r} is set by the Connector"
            )
        if pname in properties or pname == "body":
            raise ConnectorManifestError(
                f"{where}: parameter name {pname!r} is used twice (or is 'body', which "
                "holds the request body)"
            )
        if location == "path" and "{" + pname + "}" not in path:
            raise ConnectorManifestError(f"{where}: path parameter {pname!r} is not in the path")
        schema = resolver.schema(parameter.get("schema", {"type": "string"}), where)
        if not isinstance(schema, dict):
            raise ConnectorManifestError(f"{where}: parameter {pname!r} has a bad schema")
        description = parameter.get("description")
        if isinstance(description, str) and "description" not in schema:
            schema = {**schema, "description": description}
        properties[pname] = schema
        if location == "path" or parameter.get("required") is True:
            required.append(pname)
        plan_parameters.append((pname, location))
    for placeholder in re.findall(r"\{([^}]+)\}", path):
        if (placeholder, "path") not in parameters:
            raise ConnectorManifestError(
                f"{where}: path placeholder {{{placeholder}}} has no path parameter"
            )
    has_body = False
    body_schema = _request_body(where, spec.get("requestBody"), resolver)
    if body_schema is not None:
        schema, body_required = body_schema
        properties["body"] = schema
        if body_required:
            required.append("body")
        has_body = True
    input_schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        input_schema["required"] = required
    effect = _effect(where, method, spec.get(EFFECT_EXTENSION), honours_keys)
    reference, auth = _credentials(
        where, spec["security"] if "security" in spec else document_security, schemes
    )
    summary = spec.get("summary")
    detail = spec.get("description")
    text = " ".join(str(part) for part in (summary, detail) if isinstance(part, str) and part)
    operation = ConnectorOperation(
        name=name,
        description=text or f"{method.upper()} {path}",
        input_schema=input_schema,
        effect=effect,
        credentials=reference,
        sends_idempotency_key=honours_keys,
    )
    return operation, _Plan(method.upper(), path, plan_parameters, has_body, auth)


def _parameters(
    where: str, spec: Mapping[str, Any], shared: Any, resolver: _Resolver
) -> dict[tuple[str, str], Mapping[str, Any]]:
    parameters: dict[tuple[str, str], Mapping[str, Any]] = {}
    for group, label in ((shared, "path item"), (spec.get("parameters") or [], "operation")):
        if not isinstance(group, list):
            raise ConnectorManifestError(f"{where}: {label} parameters must be a list")
        for raw in group:
            parameter = resolver.deref(raw, where)
            if not isinstance(parameter, Mapping) or not isinstance(parameter.get("name"), str):
                raise ConnectorManifestError(f"{where}: every parameter needs a name")
            location = parameter.get("in")
            if location == "cookie":
                raise ConnectorManifestError(
                    f"{where}: cookie parameter {parameter['name']!r} is not supported"
                )
            if location not in _PARAMETER_LOCATIONS:
                raise ConnectorManifestError(
                    f"{where}: parameter {parameter['name']!r} has location {location!r} "
                    "(use path, query or header)"
                )
            # An operation's parameter overrides the path item's one of the same name.
            parameters[(parameter["name"], location)] = parameter
    return parameters


def _request_body(where: str, raw_body: Any, resolver: _Resolver) -> tuple[Any, bool] | None:
    if raw_body is None:
        return None
    request_body = resolver.deref(raw_body, where)
    content = request_body.get("content") if isinstance(request_body, Mapping) else None
    if not isinstance(content, Mapping) or not content:
        raise ConnectorManifestError(f"{where}: requestBody needs content")
    media = content.get("application/json")
    if not isinstance(media, Mapping):
        raise ConnectorManifestError(
            f"{where}: only application/json request bodies are supported "
            f"(found {', '.join(map(str, content))})"
        )
    schema = resolver.schema(media.get("schema", {}), where)
    return schema, isinstance(request_body, Mapping) and request_body.get("required") is True


def _effect(where: str, method: str, declared: Any, honours_keys: bool) -> ToolEffect:
    if declared is not None:
        try:
            return ToolEffect(declared)
        except ValueError:
            allowed = ", ".join(effect.value for effect in ToolEffect)
            raise ConnectorManifestError(
                f"{where}: {EFFECT_EXTENSION} {declared!r} is not one of {allowed}"
            ) from None
    if method in ("get", "head", "options"):
        return ToolEffect.READ
    if method in ("put", "delete"):
        return ToolEffect.IDEMPOTENT_WRITE
    if method in ("post", "patch"):
        return ToolEffect.IDEMPOTENT_WRITE if honours_keys else ToolEffect.NON_IDEMPOTENT_WRITE
    return ToolEffect.UNCLASSIFIED


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))
