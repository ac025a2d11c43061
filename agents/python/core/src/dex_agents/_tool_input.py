"""Questions a running tool asks a person (MCP elicitation), and their recorded answers.

A tool Step cannot stay open while a person thinks it over for days, and the connection
the question came in on does not survive a Worker restart. So a question ends the Step:
the call waits on a durable interrupt of kind ``question``, and once it is answered the
call runs again from the start with every answer recorded so far, which the tool source
replays to the same questions. Only calls whose effect may repeat (``READ`` and
``IDEMPOTENT_WRITE``) can ask; a single-attempt call that asks is recorded ``failed``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import msgspec

SINGLE_ATTEMPT_QUESTION_ERROR = (
    "The tool asked a person a question, but only a tool whose effect may repeat (read or "
    "idempotent_write) can wait for an answer: answering means running the call again."
)


class InterruptKind(StrEnum):
    """What a pending interrupt waits for (``AgentInterrupt.kind``)."""

    APPROVAL = "approval"
    QUESTION = "question"


class ToolQuestion(msgspec.Struct, frozen=True, kw_only=True):
    """A question a tool asked, as a pending ``question`` interrupt shows it.

    Attributes:
        key: the source's identity of the question; the answer is replayed to the
            question with the same key when the call runs again.
        message: what to show the person.
        requested_schema: JSON Schema (an ``object`` of primitive fields) the answer
            must follow, or None for a question without a form (a URL to visit).
        url: the page to send the person to, for URL questions.

    """

    key: str
    message: str
    requested_schema: dict[str, Any] | None = None
    url: str | None = None


class ToolInputAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded answer to a ``ToolQuestion`` (``AgentToolCall.answers``).

    Attributes:
        key: the question's key.
        action: ``"accept"`` (with ``content``) or ``"decline"``.
        content: the person's answer when accepted.

    """

    key: str
    action: str
    content: dict[str, Any] | None = None


class ToolInputRequired(Exception):
    """Raise from a tool (or a tool source) that needs a person's answer to go on.

    The call's Step ends and the session raises a ``question`` interrupt; when someone
    answers it with ``resolve_interrupt(..., approved=True, answer={...})`` (or declines
    with ``approved=False``), the call runs again with
    ``DeferredToolExecution.answers`` holding every answer so far, in order. Raise it only
    before the call changed anything it cannot change again: the call repeats.
    """

    def __init__(self, question: ToolQuestion) -> None:
        super().__init__(question.message)
        self.question = question
