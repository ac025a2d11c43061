"""The CLI's session transcript: stored with each message, replayed into a session store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)
from dex_agents import AgentMessage, FrameworkMessage, MessageRole

RUN_STATE_FORMAT = "dex-claude-agent-sdk/1"
ENTRIES_KEY = "transcript_entries"


class TranscriptStore:
    """An in-memory ``SessionStore`` for one model step.

    It starts with the transcript rebuilt from storage, so ``resume`` materializes the
    whole conversation in a fresh CLI process, and it collects what the CLI appends.
    Subagent transcripts (keys with a ``subpath``) are kept apart and not replayed.
    """

    def __init__(self, entries: Sequence[SessionStoreEntry]) -> None:
        self.initial: list[SessionStoreEntry] = list(entries)
        self.appended: list[SessionStoreEntry] = []

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        if not key.get("subpath"):
            self.appended.extend(entries)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        if key.get("subpath"):
            return None
        merged = [*self.initial, *self.appended]
        return merged or None

    # The step's store holds one session and no subagent transcripts.
    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        return []

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        return []

    async def delete(self, key: SessionKey) -> None:
        return None

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        return []


def entries_of(message: AgentMessage) -> list[SessionStoreEntry]:
    """Transcript entries one stored message carries (none for plain user messages)."""
    item = message.framework_item
    if isinstance(item, dict):
        entries = item.get(ENTRIES_KEY)
        if isinstance(entries, list):
            return list(entries)
    return []


def transcript_of(messages: Sequence[AgentMessage]) -> list[SessionStoreEntry]:
    """The CLI transcript of every stored message, in sequence order."""
    return [entry for message in messages for entry in entries_of(message)]


def unsent_user_text(messages: Sequence[AgentMessage]) -> str:
    """User texts stored after the last transcript entry, joined by blank lines.

    That is this turn's message plus any note the session stored before it (a failed,
    steered or cancelled turn's note), which the CLI has not seen yet.
    """
    pending: list[str] = []
    for message in reversed(messages):
        if entries_of(message):
            break
        if message.role is MessageRole.USER and message.text:
            pending.append(message.text)
    return "\n\n".join(reversed(pending))


def recorded_session_id(entries: Sequence[SessionStoreEntry]) -> str | None:
    """The CLI session ID the transcript's last entries were written under, if any."""
    for entry in reversed(entries):
        session = entry.get("sessionId")
        if isinstance(session, str) and session:
            return session
    return None


def deferral_last(
    entries: Sequence[SessionStoreEntry], tool_use_id: str
) -> list[SessionStoreEntry]:
    """Move the CLI's record of the deferred call to the end of a step's entries.

    When one response holds several calls, the CLI writes the deferral record and then
    the other calls' results. Resuming from a transcript that ends in a tool result, the
    CLI treats the turn as cut short: it answers the deferred call with a "result missing"
    error and adds a synthetic reply before it runs the call. Ending on the deferral
    record (its parent is unchanged) lets the resume hand the call over cleanly.

    The CLI writes a response's tool calls as one entry each, and may record the deferral
    before the later calls' entries (the hook runs while the response is still being
    written): those entries then hang off the deferral record, and moving it would cut
    them from the chain of parents the CLI resumes along. The record is first put back
    where it lands otherwise, after the response's last entry (each call's result keeps
    its own parent, the call).
    """
    deferrals = [entry for entry in entries if _is_deferral(entry, tool_use_id)]
    kept = [entry for entry in entries if not _is_deferral(entry, tool_use_id)]
    if len(deferrals) == 1:
        return _after_response(kept, deferrals[0])
    return [*kept, *deferrals]


def _after_response(
    kept: list[SessionStoreEntry], deferral: SessionStoreEntry
) -> list[SessionStoreEntry]:
    """``kept`` then ``deferral``, linked as if it was written after its response's end.

    Changes no link when no entry of the response hangs off the deferral record; entries
    whose link changes are copies.
    """
    mark = deferral.get("uuid")
    index = {id(entry): at for at, entry in enumerate(kept)}
    first = next(
        (e for e in kept if e.get("parentUuid") == mark and e.get("type") == "assistant"), None
    )
    if mark is None or first is None:
        return [*kept, deferral]
    out = list(kept)
    out[index[id(first)]] = _linked(first, deferral.get("parentUuid"))
    last = first
    while True:
        nxt = next(
            (
                e
                for e in kept
                if e.get("parentUuid") == last.get("uuid") and e.get("type") == "assistant"
            ),
            None,
        )
        if nxt is None:
            break
        last = nxt
    return [*out, _linked(deferral, last.get("uuid"))]


def _linked(entry: SessionStoreEntry, parent: object) -> SessionStoreEntry:
    changed: dict[str, Any] = dict(entry)
    changed["parentUuid"] = parent
    return cast(SessionStoreEntry, changed)


def with_tool_input(
    entries: Sequence[SessionStoreEntry], tool_use_id: str, arguments: dict[str, Any]
) -> list[SessionStoreEntry]:
    """Entries with one call's input replaced: its ``tool_use`` block and deferral record."""
    out: list[SessionStoreEntry] = []
    for entry in entries:
        changed: dict[str, Any] = dict(entry)
        message = changed.get("message")
        attachment = changed.get("attachment")
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            changed["message"] = {
                **message,
                "content": [
                    {**block, "input": arguments} if _is_tool_use(block, tool_use_id) else block
                    for block in message["content"]
                ],
            }
        elif isinstance(attachment, dict) and _is_deferral(entry, tool_use_id):
            changed["attachment"] = {**attachment, "toolInput": arguments}
        out.append(cast(SessionStoreEntry, changed))
    return out


def _is_tool_use(block: object, tool_use_id: str) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and block.get("id") == tool_use_id
    )


def _is_deferral(entry: SessionStoreEntry, tool_use_id: str) -> bool:
    attachment = entry.get("attachment")
    return (
        entry.get("type") == "attachment"
        and isinstance(attachment, dict)
        and attachment.get("type") == "hook_deferred_tool"
        and attachment.get("toolUseID") == tool_use_id
    )


def _content_blocks(entry: SessionStoreEntry) -> list[dict[str, Any]]:
    message = entry.get("message")
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def _display(entry: SessionStoreEntry) -> tuple[MessageRole, str] | None:
    kind = entry.get("type")
    if kind not in ("assistant", "user") or entry.get("isSidechain"):
        return None
    lines: list[str] = []
    results = False
    for block in _content_blocks(entry):
        if block.get("type") == "text" and block.get("text"):
            lines.append(str(block["text"]))
        elif block.get("type") == "thinking" and block.get("thinking"):
            lines.append(f"[thinking] {block['thinking']}")
        elif block.get("type") == "tool_use":
            arguments = json.dumps(block.get("input", {}), sort_keys=True)
            lines.append(f"[tool call] {block.get('name')}({arguments})")
        elif block.get("type") == "tool_result":
            results = True
            status = "error" if block.get("is_error") else "success"
            lines.append(f"[{status}] {_result_text(block.get('content'))}")
    if not lines:
        return None
    if kind == "assistant":
        return MessageRole.ASSISTANT, "\n".join(lines)
    return (MessageRole.TOOL if results else MessageRole.USER), "\n".join(lines)


def _message_id(entry: SessionStoreEntry) -> object:
    message = entry.get("message")
    return message.get("id") if isinstance(message, dict) else None


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def to_framework_messages(entries: Sequence[SessionStoreEntry]) -> list[FrameworkMessage]:
    """Group a turn's transcript entries into stored messages.

    Each displayable entry (assistant output, tool results) starts a message; the entries
    around it (metadata, attachments) travel with the message before them, so
    concatenating every message's entries gives the transcript back unchanged. The
    turn's own user prompt entry is not displayed again: the session stored it already.
    """
    groups: list[tuple[MessageRole, str, list[SessionStoreEntry]]] = []
    leading: list[SessionStoreEntry] = []
    last_id: object = None
    for entry in entries:
        shown = _display(entry)
        message_id = _message_id(entry)
        if shown is not None and shown[0] is not MessageRole.USER:
            if groups and shown[0] is MessageRole.ASSISTANT and message_id == last_id:
                # The CLI writes one entry per content block of a response: one message.
                role, text, group = groups[-1]
                groups[-1] = (role, f"{text}\n{shown[1]}" if text else shown[1], group)
                group.append(entry)
            else:
                groups.append((shown[0], shown[1], [*leading, entry]))
                leading = []
            last_id = message_id if shown[0] is MessageRole.ASSISTANT else None
        elif groups:
            groups[-1][2].append(entry)
        else:
            leading.append(entry)
    if leading:
        # A turn with no displayable output still keeps its entries.
        groups.append((MessageRole.ASSISTANT, "", leading))
    return [
        FrameworkMessage(role=role, framework_item={ENTRIES_KEY: group}, text=text)
        for role, text, group in groups
    ]


@dataclass(frozen=True, kw_only=True)
class RunState:
    """What continues a turn after its tool Step.

    Attributes:
        entries: the transcript entries this turn appended so far.
        deferred: the tool call the CLI stopped at (its ``tool_use`` ID).
        builtin: whether that call is a CLI built-in deferred only for its approval.

    """

    entries: list[SessionStoreEntry]
    deferred: str
    builtin: bool

    def dump(self) -> str:
        """Encode as a JSON string (never empty)."""
        payload = {
            "format": RUN_STATE_FORMAT,
            "deferred": self.deferred,
            "builtin": self.builtin,
            "entries": self.entries,
        }
        return json.dumps(payload, separators=(",", ":"))

    @classmethod
    def load(cls, raw: str) -> RunState:
        """Decode a string from :meth:`dump`.

        Raises:
            ValueError: the string is not a run state of this adapter's format.

        """
        payload = json.loads(raw)
        if not isinstance(payload, dict) or payload.get("format") != RUN_STATE_FORMAT:
            raise ValueError(f"not a {RUN_STATE_FORMAT} run state")
        return cls(
            entries=list(payload["entries"]),
            deferred=str(payload["deferred"]),
            builtin=bool(payload["builtin"]),
        )
