from __future__ import annotations

import dataclasses

from dex_agents import AgentState, persistence
from dex_agents._text import message_sequence_key
from dex_agents._turn_steps import MAX_PRELOADED_MESSAGES, RunModel, first_model_call


def loaded_sequences(state: AgentState) -> list[int]:
    movement = first_model_call(state)
    assert movement.step is RunModel
    if movement.options is None:
        return []
    loads = movement.options.execute_load_attribute_map_instances
    assert all(load.name == persistence.AgentMessages.name for load in loads)
    return [int(load.key) for load in loads]


def test_the_first_model_call_loads_the_messages_stored_since_the_last_one() -> None:
    state = AgentState(message_count=6, model_message_count=3)
    assert loaded_sequences(state) == [4, 5, 6]
    assert [message_sequence_key(n) for n in (4, 5, 6)] == [
        load.key
        for load in (
            first_model_call(state).options or RunModel.options()
        ).execute_load_attribute_map_instances
    ]


def test_the_loads_keep_the_seeds_options_of_run_model() -> None:
    options = first_model_call(AgentState(message_count=1)).options
    assert options is not None
    assert dataclasses.replace(options, execute_load_attribute_map_instances=()) == (
        RunModel.options()
    )
    assert options.execute_failure_step is not None
    assert options.execute_failure_step.__name__ == "RecordTurnFailure"


def test_a_long_gap_loads_only_the_newest_messages() -> None:
    state = AgentState(message_count=500, model_message_count=0)
    expected = list(range(500 - MAX_PRELOADED_MESSAGES + 1, 501))
    assert loaded_sequences(state) == expected


def test_nothing_new_schedules_run_model_with_its_own_options() -> None:
    movement = first_model_call(AgentState(message_count=9, model_message_count=9))
    assert movement.options is None
