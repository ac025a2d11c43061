"""A small order-processing Flow: four Steps, a Timer, a Channel fed by an RPC, an Attribute.

    ReserveStock ──▶ ChargePayment ──▶ CoolingOff ──▶ AwaitShipment ──▶ completed
                                       (Timer wait)   (waits for a message on the
                                                       "shipments" Channel, which the
                                                       confirm_shipment RPC publishes)

Every Step writes the ``status`` Attribute; the ``status`` RPC reads it.

Two environment variables serve the demo (``run.py``), and do nothing when unset:

* ``HELLO_JOURNAL``: a file where each Step appends one line when it starts and one when it
  finishes, so the demo can count how often each Step really ran.
* ``HELLO_GATE_DIR``: a folder; the first time ChargePayment runs it creates
  ``charge.reached`` there and then blocks until ``charge.released`` appears, so the demo can
  kill the Worker at exactly that point (in the middle of the Step).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import dex

COOLING_OFF = timedelta(seconds=0.5)


@dataclass(frozen=True, kw_only=True)
class Order:
    order_id: str
    item: str
    quantity: int
    amount_cents: int


STATUS = dex.Attribute("status", str)
SHIPMENTS = dex.Channel("shipments", str)  # tracking numbers


def journal(ctx: dex.Context, event: str) -> None:
    path = os.environ.get("HELLO_JOURNAL")
    if path:
        line = f"{ctx.step_type} {event} {ctx.step_execution_id} {ctx.attempt} {os.getpid()}\n"
        with open(path, "a") as f:
            f.write(line)


def kill_point(name: str) -> None:
    """Block forever the first time this point is reached, if the demo asked for it."""
    gate_dir = os.environ.get("HELLO_GATE_DIR")
    if not gate_dir:
        return
    reached = Path(gate_dir) / f"{name}.reached"
    released = Path(gate_dir) / f"{name}.released"
    if reached.exists():
        return  # a replacement Worker: go on
    reached.touch()
    while not released.exists():
        time.sleep(0.01)


class ReserveStock(dex.Step[Order]):
    def execute(self, ctx: dex.Context, order: Order) -> dex.StepDecision:
        journal(ctx, "started")
        STATUS.set(ctx, f"reserved {order.quantity} x {order.item}")
        journal(ctx, "finished")
        return dex.StepDecision.go_to(ChargePayment, order)


class ChargePayment(dex.Step[Order]):
    def execute(self, ctx: dex.Context, order: Order) -> dex.StepDecision:
        journal(ctx, "started")
        kill_point("charge")  # the demo SIGKILLs the first Worker here
        STATUS.set(ctx, f"charged {order.amount_cents / 100:.2f}")
        journal(ctx, "finished")
        return dex.StepDecision.go_to(CoolingOff, order)


class CoolingOff(dex.Step[Order]):
    def wait_for(self, ctx: dex.Context, order: Order) -> dex.Wait:
        journal(ctx, "waiting")
        return dex.Wait.until(dex.Timer.by_duration(COOLING_OFF))

    def execute(self, ctx: dex.Context, order: Order) -> dex.StepDecision:
        journal(ctx, "started")
        STATUS.set(ctx, "ready to ship")
        journal(ctx, "finished")
        return dex.StepDecision.go_to(AwaitShipment, order)


class AwaitShipment(dex.Step[Order]):
    def wait_for(self, ctx: dex.Context, order: Order) -> dex.Wait:
        journal(ctx, "waiting")
        return dex.Wait.until(SHIPMENTS.for_one())

    def execute(self, ctx: dex.Context, order: Order) -> dex.StepDecision:
        journal(ctx, "started")
        (tracking,) = SHIPMENTS.results(ctx)
        STATUS.set(ctx, f"shipped ({tracking})")
        journal(ctx, "finished")
        return dex.StepDecision.graceful_complete(f"order {order.order_id} shipped: {tracking}")


class OrderFlow(dex.Flow[Order]):
    def get_steps(self) -> dex.StepList[Order]:
        return dex.StepList.start_step(ReserveStock()).other_steps(
            ChargePayment(), CoolingOff(), AwaitShipment()
        )

    def get_persistence_schema(self) -> dex.PersistenceSchema:
        return dex.PersistenceSchema.of(STATUS, SHIPMENTS)

    @dex.rpc(is_transactional=True)
    def confirm_shipment(self, ctx: dex.Context, tracking: str) -> bool:
        """Called by the warehouse: hand the tracking number to AwaitShipment."""
        SHIPMENTS.publish(ctx, tracking)
        return True

    @dex.rpc
    def status(self, ctx: dex.Context) -> str:
        return STATUS.get(ctx) or "new"


ORDER_FLOW = OrderFlow()
"""The registered instance: Client calls take this very object."""


def registry() -> dex.Registry:
    return dex.Registry([ORDER_FLOW])
