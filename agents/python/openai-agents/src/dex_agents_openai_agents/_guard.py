"""A fail-safe around the agent's model: one model call per step, and its usage."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelProvider, ModelResponse, RunConfig, Usage
from agents.items import TResponseStreamEvent
from dex_agents import AgentUsage
from openai.types.responses import ResponseCompletedEvent, ResponseUsage


class SecondModelCallError(RuntimeError):
    """The SDK tried a second model call within one RunModel step.

    The adapter stops each step after its model call (before tools, and at a handoff),
    so this is a fail-safe against SDK features that loop on their own; the attempt fails
    instead of making calls a retry would repeat unseen.
    """


class CallBudget:
    """Counts the model calls of one step and keeps the usage of the call that finished."""

    def __init__(self) -> None:
        self.calls = 0
        self.finished = 0
        self._usage = AgentUsage()

    def start(self) -> None:
        # A provider-level retry of a call that never finished is still the same call.
        if self.finished:
            raise SecondModelCallError(
                "the SDK started a second model call in one RunModel step; the adapter "
                "stops at tool calls and handoffs, so this SDK feature loops on its own "
                "and is not supported"
            )
        self.calls += 1

    def finish(self, usage: Usage | ResponseUsage | None) -> None:
        self.finished += 1
        if usage is not None:
            self._usage = AgentUsage(
                requests=1,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
            )
        else:
            self._usage = AgentUsage(requests=1)

    def usage(self) -> AgentUsage:
        """Usage of this step's model call (zero when the SDK made none)."""
        return self._usage if self.finished else AgentUsage()

    def guard_model(self, model: str | Model | None) -> Model | None:
        """Wrap a model instance; None for a name (the provider wraps those)."""
        return OneCallModel(model, self) if isinstance(model, Model) else None


class OneCallModel(Model):
    """Delegates to the real model, counting calls and taking usage from each response."""

    def __init__(self, inner: Model, budget: CallBudget) -> None:
        self.inner = inner
        self.budget = budget

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.budget.start()
        response = await self.inner.get_response(*args, **kwargs)
        self.budget.finish(response.usage)
        return response

    async def stream_response(
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        self.budget.start()
        async for event in self.inner.stream_response(*args, **kwargs):
            if isinstance(event, ResponseCompletedEvent):
                self.budget.finish(event.response.usage)
            yield event

    def get_retry_advice(self, request: Any) -> Any:
        return self.inner.get_retry_advice(request)


class _GuardedProvider(ModelProvider):
    def __init__(self, inner: ModelProvider, budget: CallBudget) -> None:
        self.inner = inner
        self.budget = budget

    def get_model(self, model_name: str | None) -> Model:
        return OneCallModel(self.inner.get_model(model_name), self.budget)


def guarded_run_config(run_config: RunConfig, budget: CallBudget) -> RunConfig:
    """Return ``run_config`` with whatever model the SDK will use wrapped in the guard.

    A model instance on an agent is wrapped on that agent's per-step copy
    (:meth:`CallBudget.guard_model`); a model name, on the run config or on an agent, is
    resolved through the provider, which is wrapped here.
    """
    if isinstance(run_config.model, Model):
        return dataclasses.replace(run_config, model=OneCallModel(run_config.model, budget))
    return dataclasses.replace(
        run_config, model_provider=_GuardedProvider(run_config.model_provider, budget)
    )
