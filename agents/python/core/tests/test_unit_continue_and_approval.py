"""Unit rules of ContinueTurn validation and of the framework's approval decision."""

from __future__ import annotations

import pytest
from dex_agents import (
    MAX_CONTINUE_REASON_LENGTH,
    AgentSessionOptions,
    AgentUsage,
    ContinueTurn,
    InvalidRunnerOutputError,
    ToolEffect,
    ToolPolicy,
    is_approval_required,
)
from dex_agents._text import validate_outcome


def needs_approval(
    options: AgentSessionOptions,
    tool: str,
    framework: bool | None,
    effect: ToolEffect | None = None,
) -> bool:
    policy = options.resolve_tool_policy(tool, effect, framework_requires_approval=framework)
    return is_approval_required(policy)


def test_without_a_framework_decision_the_policy_is_unchanged() -> None:
    explicit = ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, framework_may_waive_approval=True)
    options = AgentSessionOptions(tool_policies={"refund": explicit})
    assert options.resolve_tool_policy("refund") is explicit
    assert options.resolve_tool_policy("refund", framework_requires_approval=None) is explicit
    assert options.resolve_tool_policy("read", ToolEffect.READ) == ToolPolicy(ToolEffect.READ)


def test_a_framework_true_adds_an_approval_to_any_policy() -> None:
    options = AgentSessionOptions(
        tool_policies={
            "search": ToolPolicy(ToolEffect.READ),
            "note": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE, requires_approval=False),
            "wire": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, min_approvals=2),
        }
    )
    assert needs_approval(options, "search", True)
    assert needs_approval(options, "note", True)  # even an explicit False
    assert needs_approval(options, "unlisted", True, ToolEffect.READ)
    resolved = options.resolve_tool_policy("wire", framework_requires_approval=True)
    assert resolved.min_approvals == 2 and is_approval_required(resolved)
    # The rest of the policy stays as it was.
    assert options.resolve_tool_policy("note", framework_requires_approval=True) == ToolPolicy(
        ToolEffect.IDEMPOTENT_WRITE, requires_approval=True
    )


def test_a_framework_false_waives_the_default_only_without_an_explicit_policy() -> None:
    options = AgentSessionOptions(
        tool_policies={"refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)},
        default_tool_effect=ToolEffect.UNCLASSIFIED,
    )
    # No explicit policy: the framework's "no approval" wins over the effect default.
    assert not needs_approval(options, "unlisted", False)
    assert not needs_approval(options, "write", False, ToolEffect.NON_IDEMPOTENT_WRITE)
    resolved = options.resolve_tool_policy(
        "write", ToolEffect.NON_IDEMPOTENT_WRITE, framework_requires_approval=False
    )
    assert resolved.effect is ToolEffect.NON_IDEMPOTENT_WRITE  # still one attempt
    # An explicit policy that did not opt in keeps its default approval.
    assert needs_approval(options, "refund", False)


def test_an_explicit_policy_opts_in_to_being_waived() -> None:
    options = AgentSessionOptions(
        tool_policies={
            "waivable": ToolPolicy(
                ToolEffect.NON_IDEMPOTENT_WRITE, framework_may_waive_approval=True
            ),
            "forced": ToolPolicy(
                ToolEffect.READ, requires_approval=True, framework_may_waive_approval=True
            ),
            "quorum": ToolPolicy(
                ToolEffect.NON_IDEMPOTENT_WRITE, min_approvals=3, framework_may_waive_approval=True
            ),
        }
    )
    assert not needs_approval(options, "waivable", False)
    assert needs_approval(options, "waivable", None)
    assert needs_approval(options, "waivable", True)
    # An explicit requires_approval=True is never waived, nor are several approvers.
    assert needs_approval(options, "forced", False)
    quorum = options.resolve_tool_policy("quorum", framework_requires_approval=False)
    assert quorum.min_approvals == 3 and is_approval_required(quorum)


def test_a_framework_decision_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="framework_requires_approval"):
        AgentSessionOptions().resolve_tool_policy(
            "x",
            framework_requires_approval="yes",  # type: ignore[arg-type]
        )


def test_the_model_call_limit_must_be_a_positive_int() -> None:
    assert AgentSessionOptions().max_model_calls_per_turn == 50
    with pytest.raises(ValueError, match="max_model_calls_per_turn"):
        AgentSessionOptions(max_model_calls_per_turn=0)
    with pytest.raises(TypeError, match="max_model_calls_per_turn"):
        AgentSessionOptions(max_model_calls_per_turn=2.5)  # type: ignore[arg-type]


def test_continue_turn_shape_and_validation() -> None:
    usage = AgentUsage(requests=1)
    outcome = ContinueTurn("state", usage, "handoff")
    assert (outcome.framework_run_state, outcome.usage, outcome.reason) == (
        "state",
        usage,
        "handoff",
    )
    assert ContinueTurn("state") == ContinueTurn("state", None, "")
    assert validate_outcome(outcome) is outcome
    with pytest.raises(InvalidRunnerOutputError, match="framework_run_state is empty"):
        validate_outcome(ContinueTurn(""))
    too_long = "x" * (MAX_CONTINUE_REASON_LENGTH + 1)
    with pytest.raises(InvalidRunnerOutputError, match="MAX_CONTINUE_REASON_LENGTH"):
        validate_outcome(ContinueTurn("state", None, too_long))
    with pytest.raises(InvalidRunnerOutputError, match="reason must be a str"):
        validate_outcome(ContinueTurn("state", None, 3))  # type: ignore[arg-type]
    with pytest.raises(InvalidRunnerOutputError, match="usage"):
        validate_outcome(ContinueTurn("state", {"requests": 1}))  # type: ignore[arg-type]
