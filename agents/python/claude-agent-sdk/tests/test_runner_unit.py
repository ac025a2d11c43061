from __future__ import annotations

from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions, ToolAnnotations, create_sdk_mcp_server, tool
from dex_agents import AgentMessage, MessageRole, ToolEffect

from dex_agents_claude_agent_sdk import ClaudeAgentRunner, cli_session_id, tool_effect
from dex_agents_claude_agent_sdk._transcript import (
    RunState,
    deferral_last,
    recorded_session_id,
    to_framework_messages,
    transcript_of,
    unsent_user_text,
    with_tool_input,
)


@tool("echo", "Echo.", {"text": str}, annotations=ToolAnnotations(readOnlyHint=True))
async def echo(args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": args["text"]}]}


@tool("save", "Save.", {"text": str}, annotations=ToolAnnotations(idempotentHint=True))
async def save(args: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "saved"}]}


def stored(sequence: int, role: MessageRole, item: Any, text: str) -> AgentMessage:
    return AgentMessage(
        sequence=sequence, turn_id="turn-1", role=role, framework_item=item, text=text
    )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (ClaudeAgentOptions(resume="abc"), "resume is set by the runner"),
        (ClaudeAgentOptions(session_id="abc"), "session_id is set by the runner"),
        (ClaudeAgentOptions(continue_conversation=True), "continue_conversation"),
        (
            ClaudeAgentOptions(mcp_servers={"dex": create_sdk_mcp_server("dex")}),
            "'dex' is already in options.mcp_servers",
        ),
    ],
)
def test_options_the_runner_owns_are_refused(options: ClaudeAgentOptions, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ClaudeAgentRunner(options, tools=[echo])


def test_two_tools_of_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="two custom tools are named 'echo'"):
        ClaudeAgentRunner(ClaudeAgentOptions(), tools=[echo, echo])


def test_effects_come_from_mcp_annotations() -> None:
    assert tool_effect(echo) is ToolEffect.READ
    assert tool_effect(save) is ToolEffect.IDEMPOTENT_WRITE
    runner = ClaudeAgentRunner(ClaudeAgentOptions(), tools=[echo], server_name="desk")
    assert runner.custom_tool_name("mcp__desk__echo") == "echo"
    assert runner.custom_tool_name("mcp__other__echo") is None
    assert runner.custom_tool_name("Bash") is None
    assert cli_session_id("s1") == cli_session_id("s1") != cli_session_id("s2")


def test_transcript_entries_round_trip_through_stored_messages() -> None:
    entries: list[Any] = [
        {"type": "queue-operation", "operation": "enqueue"},
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "refund it"}},
        {"type": "attachment", "uuid": "a1"},
        {
            "type": "assistant",
            "uuid": "m1",
            "message": {"id": "msg_1", "content": [{"type": "text", "text": "On it."}]},
        },
        {
            "type": "assistant",
            "uuid": "m2",
            "message": {
                "id": "msg_1",
                "content": [{"type": "tool_use", "id": "t1", "name": "echo", "input": {}}],
            },
        },
        {
            "type": "user",
            "uuid": "r1",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
        },
        {"type": "last-prompt"},
    ]
    messages = to_framework_messages(entries)
    assert [m.role for m in messages] == [MessageRole.ASSISTANT, MessageRole.TOOL]
    assert messages[0].text == "On it.\n[tool call] echo({})"
    assert messages[1].text == "[success] x"
    runner = ClaudeAgentRunner(ClaudeAgentOptions())
    user = runner.build_user_message("refund it")
    rows = [stored(0, MessageRole.USER, user.framework_item, user.text)]
    rows += [stored(i + 1, m.role, m.framework_item, m.text) for i, m in enumerate(messages)]
    assert transcript_of(rows) == entries
    # Texts stored after the last transcript line are what the CLI has not seen yet.
    note = stored(3, MessageRole.USER, {"prompt": "[Dex] note"}, "[Dex] note")
    again = stored(4, MessageRole.USER, {"prompt": "next"}, "next")
    assert unsent_user_text([*rows, note, again]) == "[Dex] note\n\nnext"


def test_run_state_round_trips_and_refuses_other_formats() -> None:
    state = RunState(entries=[{"type": "user"}], deferred="toolu_1", builtin=False)
    assert RunState.load(state.dump()) == state
    with pytest.raises(ValueError, match="not a dex-claude-agent-sdk/1 run state"):
        RunState.load('{"format": "other"}')


def test_the_deferral_record_ends_a_deferred_steps_entries() -> None:
    deferral: Any = {
        "type": "attachment",
        "uuid": "d1",
        "parentUuid": "m2",
        "attachment": {"type": "hook_deferred_tool", "toolUseID": "t1"},
    }
    other: Any = {
        "type": "attachment",
        "uuid": "d0",
        "attachment": {"type": "hook_deferred_tool", "toolUseID": "t0"},
    }
    refusal: Any = {"type": "user", "uuid": "r2", "parentUuid": "m2"}
    moved = deferral_last([other, deferral, refusal], "t1")
    assert moved == [other, refusal, deferral]
    assert deferral_last([refusal, deferral], "t1") == [refusal, deferral]


def _chain(entries: list[Any]) -> list[str]:
    """The uuids from the last entry back along parentUuid, as the CLI resumes."""
    by_uuid = {e["uuid"]: e for e in entries}
    out, at = [], entries[-1]
    while at is not None:
        out.append(at["uuid"])
        at = by_uuid.get(at.get("parentUuid"))
    return out


def test_a_deferral_recorded_inside_its_response_moves_to_the_response_end() -> None:
    def entry(kind: str, uuid: str, parent: str) -> Any:
        return {"type": kind, "uuid": uuid, "parentUuid": parent}

    deferral: Any = {
        **entry("attachment", "d0", "u0"),
        "attachment": {"type": "hook_deferred_tool", "toolUseID": "t0"},
    }
    # as the CLI wrote them when its hook ran before the response's second call was out
    written = [
        entry("user", "q", "prev"),
        entry("assistant", "u0", "q"),
        deferral,
        entry("assistant", "u1", "d0"),
        entry("user", "r1", "u1"),
    ]
    moved: list[Any] = deferral_last(written, "t0")
    # the shape of the CLI's usual order: every call's entry on the chain, each result
    # under its call, the record after the response's last call and last in the list
    assert [e["uuid"] for e in moved] == ["q", "u0", "u1", "r1", "d0"]
    assert {e["uuid"]: e["parentUuid"] for e in moved} == {
        "q": "prev",
        "u0": "q",
        "u1": "u0",
        "r1": "u1",
        "d0": "u1",
    }
    assert _chain(moved) == ["d0", "u1", "u0", "q"]
    assert written[3]["parentUuid"] == "d0" and deferral["parentUuid"] == "u0"  # copies
    # the order the CLI usually writes comes out the same
    usual = [
        entry("user", "q", "prev"),
        entry("assistant", "u0", "q"),
        entry("assistant", "u1", "u0"),
        {**deferral, "parentUuid": "u1"},
        entry("user", "r1", "u1"),
    ]
    assert deferral_last(usual, "t0") == moved


def test_a_retried_first_step_starts_under_a_session_id_of_its_own() -> None:
    assert cli_session_id("s1", 1) == cli_session_id("s1")
    assert cli_session_id("s1", 2) not in (cli_session_id("s1"), cli_session_id("s1", 3))
    entries: Any = [{"type": "user", "sessionId": "a"}, {"type": "last-prompt"}]
    assert recorded_session_id(entries) == "a"
    assert recorded_session_id([]) is None


def test_an_edited_call_is_rewritten_where_the_transcript_holds_it() -> None:
    entries: Any = [
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "x"},
                    {"type": "tool_use", "id": "t1", "input": {"a": 1}},
                    {"type": "tool_use", "id": "t2", "input": {"a": 2}},
                ]
            },
        },
        {"type": "attachment", "attachment": {"type": "hook_deferred_tool", "toolUseID": "t1"}},
    ]
    out: Any = with_tool_input(entries, "t1", {"a": 9})
    assert [b.get("input") for b in out[0]["message"]["content"]] == [None, {"a": 9}, {"a": 2}]
    assert out[1]["attachment"]["toolInput"] == {"a": 9}
    assert entries[0]["message"]["content"][1]["input"] == {"a": 1}  # the input is not changed
