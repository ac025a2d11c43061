"""Flows for on-demand state reads: ``AttributeMap.load_range`` and ``load_keys``."""

from __future__ import annotations

import msgspec
from dex import AttributeMap, Context, Flow, PersistenceSchema, Step, StepDecision, StepList, rpc
from dex.errors import AttributeMapNotLoadedError


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One immutable log entry (frozen: decoded once per Worker and shared)."""

    seq: int
    text: str


LOG = AttributeMap("read_log", Entry)
NOTES = AttributeMap("read_notes", str)
BIG = "b" * 5000  # above the blob threshold: read through the blob cache


def key(n: int) -> str:
    return f"{n:04d}"


def _observe(context: Context, name: str, value: object) -> None:
    NOTES.set(context, name, repr(value))


class FillLog(Step[int]):
    """Appends ``input`` entries (entry 3 is large) and goes on to read them."""

    async def execute(self, context: Context, input: int) -> StepDecision:
        for n in range(1, input + 1):
            LOG.set(context, key(n), Entry(seq=n, text=BIG if n == 3 else f"t{n}"))
        return StepDecision.go_to(ReadLog, input)


class ReadLog(Step[int]):
    """Reads ranges and keys on demand and records what it saw in ``read_notes``."""

    async def execute(self, context: Context, input: int) -> StepDecision:
        try:
            LOG.get(context, key(1))
        except AttributeMapNotLoadedError:
            _observe(context, "before_load", "not-loaded")
        LOG.set(context, key(2), Entry(seq=2, text="staged"))
        rows = await LOG.load_range(context, key(2), key(5))
        _observe(context, "range", [(k, e.seq, len(e.text)) for k, e in rows])
        _observe(context, "get_staged", LOG.get(context, key(2)))
        _observe(context, "get_loaded", LOG.get(context, key(4)))
        head = await LOG.load_range(context, limit=2)
        _observe(context, "head", [k for k, _ in head])
        tail = await LOG.load_range(context, key(input - 1))
        _observe(context, "tail", [k for k, _ in tail])
        again = await LOG.load_range(context, key(3), key(4))
        _observe(context, "shared", again[0][1] is rows[1][1])
        picked = await LOG.load_keys(context, [key(1), "9999"])
        _observe(context, "keys", {k: None if v is None else v.seq for k, v in picked.items()})
        _observe(context, "get_unset", LOG.get(context, "9999"))
        try:
            LOG.get(context, key(input))  # in the tail range, so loaded
            LOG.get(context, "8888")
        except AttributeMapNotLoadedError:
            _observe(context, "unloaded", "not-loaded")
        return StepDecision.graceful_complete(len(rows))


class ReadFlow(Flow[int]):
    """Fills a log, then reads it back on demand; RPCs read pages of it."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(FillLog()).other_steps(ReadLog())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(LOG, NOTES)

    @rpc(load_attribute_maps=(NOTES,))
    async def notes(self, context: Context) -> dict[str, str]:
        return {k: NOTES.get(context, k) or "" for k in NOTES.get_all_instance_keys(context)}

    @rpc
    async def page(self, context: Context, input: str) -> list[int]:
        rows = await LOG.load_range(context, input, limit=3)
        return [entry.seq for _, entry in rows]


READ_FLOW = ReadFlow()
FLOWS = [READ_FLOW]
