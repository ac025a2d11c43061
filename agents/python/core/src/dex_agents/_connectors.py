"""Connectors: manifests of operations offered to the model as tools.

A Connector lists operations, each with a name, a JSON input schema, an effect class and a
credentials reference, and runs one operation at a time. ``ConnectorToolSource`` offers
the operations the application picks as a ``ToolSource``: each call runs in its own tool
Step, where the source resolves the operation's credentials on the Worker through the
Connector's secret provider and hands the Connector the call's idempotency key.

Secret values live only in memory on the Worker while a call runs. They are wrapped in
``ConnectorSecret`` (whose ``repr`` and ``str`` hide the value) and scrubbed from every
output and error message a Connector produces, so they never reach history, Streams,
events or logs.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import msgspec

from dex_agents._enums import ToolEffect
from dex_agents._runner import DeferredToolExecution, ToolExecutionError
from dex_agents._tool_sources import SourceTool

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_REDACTED = "[redacted]"


class ConnectorManifestError(ValueError):
    """A Connector manifest or OpenAPI document is invalid, or a pick names no operation.

    Raised when a Connector or ``ConnectorToolSource`` is built, never during a call; the
    message names the operation and the field at fault.
    """


class ConnectorSecretError(LookupError):
    """A secret provider has no value for a credentials reference.

    The message names the reference and where the provider looked, never a value.
    """


class ConnectorSecret:
    """A resolved secret value; ``repr`` and ``str`` never show it.

    Read the value with :meth:`reveal` at the last moment (when building the request
    header) and never log or return it.
    """

    __slots__ = ("_forms", "_reference", "_value")

    def __init__(self, reference: str, value: str) -> None:
        self._reference = reference
        self._value = value
        # The value as a JSON string body would quote it is scrubbed too.
        self._forms = [value, json.dumps(value)[1:-1]]

    @property
    def reference(self) -> str:
        """The credentials reference this value was resolved for."""
        return self._reference

    def reveal(self) -> str:
        """Return the secret value."""
        return self._value

    def hide(self, form: str) -> None:
        """Scrub ``form`` as well: an encoding of the value a Connector sends (base64)."""
        if form and form not in self._forms:
            self._forms.append(form)

    def redact(self, text: str) -> str:
        """Return ``text`` with the value and its hidden forms replaced by ``[redacted]``."""
        for form in sorted(self._forms, key=len, reverse=True):
            if form:
                text = text.replace(form, _REDACTED)
        return text

    def __repr__(self) -> str:
        return f"ConnectorSecret({self._reference!r}, '***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a ConnectorSecret cannot be pickled or serialized")


@runtime_checkable
class SecretProvider(Protocol):
    """Where a Connector's credentials come from, on the Worker.

    ``EnvSecrets``, ``FileSecrets`` and ``CallableSecrets`` implement it. ``resolve`` runs
    inside each tool Step that needs credentials (possibly concurrently with itself), so a
    rotated secret is picked up by the next call without a restart.
    """

    async def resolve(self, reference: str) -> str:
        """Return the secret value for ``reference``.

        Raises:
            ConnectorSecretError: the provider has no value for ``reference``.

        """
        ...


class EnvSecrets:
    """Secrets from the Worker's environment.

    ``reference`` ``bearerAuth`` with ``prefix="BILLING_"`` reads ``BILLING_BEARERAUTH``:
    the reference is upper-cased and every character other than a letter, a digit or ``_``
    becomes ``_``. ``names`` maps a reference to an exact variable name instead.

    Args:
        prefix: put before the derived variable name (default ``""``).
        names: explicit variable names by reference; they win over the derived name.

    """

    def __init__(self, prefix: str = "", *, names: Mapping[str, str] | None = None) -> None:
        self.prefix = prefix
        self.names = dict(names or {})

    def variable_name(self, reference: str) -> str:
        """The environment variable read for ``reference``."""
        explicit = self.names.get(reference)
        if explicit is not None:
            return explicit
        return self.prefix + re.sub(r"[^A-Z0-9_]", "_", reference.upper())

    async def resolve(self, reference: str) -> str:
        """Read the variable; empty or unset raises ``ConnectorSecretError``."""
        name = self.variable_name(reference)
        value = os.environ.get(name)
        if not value:
            raise ConnectorSecretError(
                f"no secret for credentials {reference!r}: environment variable {name} is not set"
            )
        return value

    def __repr__(self) -> str:
        return f"EnvSecrets(prefix={self.prefix!r})"


class FileSecrets:
    """Secrets from files in one directory, one file per reference (Kubernetes style).

    ``reference`` ``bearerAuth`` reads ``<directory>/bearerAuth``; one trailing newline is
    dropped. A reference must be a plain file name (no ``/``, not ``.`` or ``..``).

    Args:
        directory: the directory holding the files; it need not exist yet.

    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    async def resolve(self, reference: str) -> str:
        """Read the file; a missing or empty file raises ``ConnectorSecretError``."""
        if not reference or "/" in reference or "\\" in reference or reference in (".", ".."):
            raise ConnectorSecretError(
                f"credentials reference {reference!r} is not a plain file name"
            )
        path = self.directory / reference
        try:
            value = path.read_text(encoding="utf-8")
        except OSError:
            raise ConnectorSecretError(
                f"no secret for credentials {reference!r}: cannot read {path}"
            ) from None
        if value.endswith("\n"):
            value = value[:-1]
        if not value:
            raise ConnectorSecretError(f"no secret for credentials {reference!r}: {path} is empty")
        return value

    def __repr__(self) -> str:
        return f"FileSecrets({str(self.directory)!r})"


class CallableSecrets:
    """Secrets from a function: ``fn(reference)`` returns the value (may be async).

    Use it for a vault or a cloud secret manager. Return None or ``""`` when there is no
    value; any exception the function raises becomes a ``ConnectorSecretError`` without
    the original message (which might quote a secret).
    """

    def __init__(self, fn: Callable[[str], str | None | Awaitable[str | None]]) -> None:
        self.fn = fn

    async def resolve(self, reference: str) -> str:
        """Call the function; no value or an error raises ``ConnectorSecretError``."""
        try:
            value = self.fn(reference)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            raise ConnectorSecretError(
                f"the secret function failed for credentials {reference!r} ({type(exc).__name__})"
            ) from None
        if not isinstance(value, str) or not value:
            raise ConnectorSecretError(f"no secret for credentials {reference!r}")
        return value

    def __repr__(self) -> str:
        return f"CallableSecrets({getattr(self.fn, '__qualname__', 'fn')})"


class ConnectorOperation(msgspec.Struct, frozen=True):
    """One operation of a Connector's manifest.

    Attributes:
        name: the tool name the model calls it by (``[A-Za-z0-9_-]{1,64}``).
        description: what the model reads about it.
        input_schema: JSON Schema of the arguments (an ``object`` schema).
        effect: what a repeat would do; sets the default tool policy.
        credentials: the reference a ``SecretProvider`` resolves for this operation, or
            None when it needs no credentials.
        sends_idempotency_key: whether the call's idempotency key is sent to the service.

    """

    name: str
    description: str
    input_schema: dict[str, Any]
    effect: ToolEffect
    credentials: str | None = None
    sends_idempotency_key: bool = False


@runtime_checkable
class Connector(Protocol):
    """A manifest of operations plus the code that runs them (``OpenAPIConnector``).

    ``invoke`` runs inside a tool Step on the Worker, possibly concurrently with itself
    and again after a crash; it must not keep connections between calls.
    """

    @property
    def name(self) -> str:
        """The Connector's name (for messages)."""
        ...

    @property
    def operations(self) -> Sequence[ConnectorOperation]:
        """Every operation of the manifest, in a stable order."""
        ...

    @property
    def secrets(self) -> SecretProvider | None:
        """Resolves the operations' credentials references; None if none need any."""
        ...

    async def invoke(
        self,
        operation: ConnectorOperation,
        arguments: Mapping[str, Any],
        *,
        credentials: ConnectorSecret | None,
        idempotency_key: str,
    ) -> str:
        """Run one operation and return its output as the model should see it.

        Raises:
            ToolExecutionError: a definite failure the model should see (not retried).
            Exception: any other error is a Step failure and follows the effect's rules.

        """
        ...


class ConnectorToolSource:
    """Offers a Connector's operations to an agent as tools (a ``ToolSource``).

    Pass it to an adapter's ``source_tools(source)`` to give the framework native tools.
    Each tool call runs in its own tool Step: the source resolves the operation's
    credentials there, on the Worker, through ``connector.secrets``, and passes the call's
    idempotency key (the same on every attempt) to the Connector. The operation's effect
    is framework metadata: an explicit ``AgentSessionOptions.tool_policies`` entry wins.

    Args:
        connector: the Connector, for example ``OpenAPIConnector.from_document(...)``.
        operations: the operation names to offer, in this order; None (default) offers
            every operation of the manifest.

    Raises:
        ConnectorManifestError: ``operations`` is empty, repeats a name or names an
            operation the Connector does not have; or an operation's name is not a valid
            tool name; or an operation needs credentials and the Connector has no secret
            provider.

    Errors during a call: a missing secret or arguments that do not fit the schema are
    model-visible failures (nothing was sent); the Connector decides the rest. Every
    output and error message is scrubbed of the resolved secret value.

    Concurrency: stateless after construction; safe to call from concurrent Steps.

    """

    def __init__(self, connector: Connector, operations: Sequence[str] | None = None) -> None:
        by_name: dict[str, ConnectorOperation] = {}
        for operation in connector.operations:
            if not _TOOL_NAME.match(operation.name):
                raise ConnectorManifestError(
                    f"connector {connector.name!r}: operation name {operation.name!r} is not "
                    "a valid tool name (1 to 64 letters, digits, '_' or '-')"
                )
            if operation.name in by_name:
                raise ConnectorManifestError(
                    f"connector {connector.name!r}: operation {operation.name!r} appears twice"
                )
            by_name[operation.name] = operation
        if operations is None:
            picked = list(by_name.values())
        else:
            if isinstance(operations, str):
                raise ConnectorManifestError("operations must be a list of names, not a string")
            names = list(operations)
            if not names:
                raise ConnectorManifestError(
                    f"connector {connector.name!r}: operations is empty (pass None for all)"
                )
            unknown = [name for name in names if name not in by_name]
            if unknown:
                raise ConnectorManifestError(
                    f"connector {connector.name!r} has no operation {unknown[0]!r}; "
                    f"its operations are: {', '.join(sorted(by_name)) or '(none)'}"
                )
            repeated = sorted({name for name in names if names.count(name) > 1})
            if repeated:
                raise ConnectorManifestError(f"operations names {repeated[0]!r} twice")
            picked = [by_name[name] for name in names]
        for operation in picked:
            if operation.credentials is not None and connector.secrets is None:
                raise ConnectorManifestError(
                    f"connector {connector.name!r}: operation {operation.name!r} needs "
                    f"credentials {operation.credentials!r} but the connector has no secret "
                    "provider (pass credentials=EnvSecrets(...), FileSecrets(...) or "
                    "CallableSecrets(...))"
                )
        self.connector = connector
        self._operations = {operation.name: operation for operation in picked}
        self._tools = tuple(
            SourceTool(
                name=operation.name,
                description=operation.description,
                input_schema=operation.input_schema,
                effect=operation.effect,
            )
            for operation in picked
        )

    @property
    def tools(self) -> Sequence[SourceTool]:
        """The offered tools, without awaiting (what ``list_tools`` returns)."""
        return self._tools

    @property
    def operations(self) -> Mapping[str, ConnectorOperation]:
        """The offered operations by name."""
        return dict(self._operations)

    async def list_tools(self) -> Sequence[SourceTool]:
        """Return the offered operations as tools, in the order they were picked."""
        return self._tools

    async def call_tool(
        self, tool: SourceTool, arguments: Mapping[str, Any], call: DeferredToolExecution
    ) -> str:
        """Run one operation with its credentials and the call's idempotency key.

        Raises:
            ToolExecutionError: unknown tool, arguments that do not fit, a missing secret,
                or a definite failure reported by the Connector.
            Exception: a Step failure from the Connector (scrubbed of the secret).

        """
        operation = self._operations.get(tool.name)
        if operation is None:
            raise ToolExecutionError(
                f"connector {self.connector.name!r} does not offer {tool.name!r} here"
            )
        if not isinstance(arguments, Mapping):
            raise ToolExecutionError(f"{tool.name}: the arguments must be a JSON object")
        problem = check_arguments(operation.input_schema, arguments)
        if problem is not None:
            raise ToolExecutionError(f"{tool.name}: {problem}")
        secret: ConnectorSecret | None = None
        if operation.credentials is not None:
            provider = self.connector.secrets
            if provider is None:  # checked at construction; kept for a mutable Connector
                raise ToolExecutionError(f"{tool.name}: no secret provider is configured")
            try:
                value = await provider.resolve(operation.credentials)
            except ConnectorSecretError as exc:
                raise ToolExecutionError(f"{tool.name}: {exc}") from None
            secret = ConnectorSecret(operation.credentials, value)
        try:
            output = await self.connector.invoke(
                operation, arguments, credentials=secret, idempotency_key=call.idempotency_key
            )
        except ToolExecutionError as exc:
            if secret is None:
                raise
            raise ToolExecutionError(secret.redact(exc.message)) from None
        except Exception as exc:
            if secret is None:
                raise
            # The original exception (and its traceback's locals) may quote the secret.
            raise ConnectorCallError(f"{type(exc).__name__}: {secret.redact(str(exc))}") from None
        return output if secret is None else secret.redact(output)

    def __repr__(self) -> str:
        return f"ConnectorToolSource({self.connector.name!r}, {list(self._operations)!r})"


class ConnectorCallError(RuntimeError):
    """A Connector call failed in a way that may have had an effect (a Step failure).

    The session retries the call or records ``outcome_unknown``, by the effect's rules.
    """


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict, Mapping),
    "array": (list, tuple),
    "null": (type(None),),
}


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Return why ``arguments`` do not fit the top level of an ``object`` schema, or None.

    Checks required properties, unknown properties (when ``additionalProperties`` is
    false) and the JSON type of each known property; deeper checks are the service's.
    """
    properties = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in arguments:
            return f"missing required argument {name!r}"
    if schema.get("additionalProperties") is False:
        for name in arguments:
            if name not in properties:
                known = ", ".join(sorted(properties)) or "(none)"
                return f"unknown argument {name!r}; the arguments are: {known}"
    for name, value in arguments.items():
        declared = properties.get(name)
        if not isinstance(declared, Mapping) or "type" not in declared:
            continue
        kinds = declared["type"] if isinstance(declared["type"], list) else [declared["type"]]
        allowed: tuple[type, ...] = ()
        for kind in kinds:
            allowed += _JSON_TYPES.get(str(kind), (object,))
        is_bool = isinstance(value, bool)
        if not isinstance(value, allowed) or (is_bool and "boolean" not in kinds):
            return f"argument {name!r} must be of type {' or '.join(map(str, kinds))}"
    return None
