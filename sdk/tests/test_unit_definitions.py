from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from dex import (
    AsyncContext,
    Attribute,
    AttributeMap,
    Channel,
    ChannelMap,
    Context,
    Flow,
    FlowDefinitionError,
    PersistenceSchema,
    Registry,
    RetryPolicy,
    RPCResult,
    Step,
    StepDecision,
    StepDurability,
    StepList,
    StepOptions,
    Stream,
    WaitForFailurePolicy,
    rpc,
)
from dex._protocol import LoadSpec, RetryPolicySpec
from dex._rpc import rpc_info
from dex._spec import flow_spec, options_spec


@dataclass
class Order:
    id: str


class Opaque:
    pass


Total = Attribute("Total", int)
Carts = AttributeMap("Carts", Order)
Inbox = Channel("Inbox", str)
Replies = ChannelMap("Replies", str)
Events = Stream("Events", str, stream_capacity_bytes=1000)


class Start(Step[Order]):
    def execute(self, context: Context, input: Order) -> StepDecision:
        return StepDecision.go_to(Recover, input)


class Recover(Step[Order]):
    def execute(self, context: Context, input: Order) -> StepDecision:
        return StepDecision.dead_end()


class AsyncStep(Step[None]):
    async def execute(self, context: AsyncContext, input: None) -> StepDecision:
        return StepDecision.dead_end()


class Waiting(Step[int]):
    def wait_for(self, context: Context, input: int) -> Any:
        raise AssertionError

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.dead_end()


class Configured(Step[int]):
    def get_step_type(self) -> str:
        return "Custom"

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_method_timeout=timedelta(minutes=15),
            heartbeat_timeout=120,
            execute_retry=RetryPolicy(maximum_attempts=3, total_duration=timedelta(minutes=30)),
            wait_for_failure=WaitForFailurePolicy.PROCEED,
            wait_for_durability=StepDurability.SYNC,
            execute_durability=StepDurability.ASYNC,
            execute_lock_attributes=(Total.lock(), Carts.lock("a/b")),
            execute_load_attribute_maps=(Carts,),
            execute_load_attribute_map_instances=(Carts.load("k 1"),),
            execute_load_channels=(Inbox,),
            wait_for_load_channel_maps=(Replies,),
            wait_for_load_channel_map_instances=(Replies.load("x"),),
        ).on_execute_failure_proceed_to(Recover, StepOptions(execute_method_timeout=5))

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.dead_end()


class Shop(Flow[Order]):
    def get_steps(self) -> StepList[Order]:
        return StepList.start_step(Start()).other_steps(Recover, Waiting(), Configured())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Total, Carts, Inbox, Replies, Events)

    @rpc
    def status(self, context: Context) -> int:
        return 1

    @rpc(name="add", timeout=5, lock_attributes=(Total.lock(),), load_attribute_maps=(Carts,))
    def add_item(self, context: Context, item: Order) -> RPCResult[list[int]]:
        return RPCResult([1])

    @rpc(is_transactional=True)
    async def send(self, context: AsyncContext, text: str) -> bool | None:
        return True


def make_flow(
    steps: StepList[Any] | None = None, schema: PersistenceSchema | None = None, name: str = "F"
) -> Flow[Any]:
    class F(Flow[Any]):
        def get_flow_type(self) -> str:
            return name

        def get_steps(self) -> StepList[Any]:
            return steps or StepList.empty()

        def get_persistence_schema(self) -> PersistenceSchema:
            return schema or PersistenceSchema.of()

    return F()


def test_flow_spec_of_a_full_flow() -> None:
    shop = Shop()
    reg = Registry([shop], allow_async_handlers=True)
    assert reg.flows == (shop,)
    assert reg.get_flow("Shop") is shop
    assert reg.has_async_handlers
    assert reg.start_input_type(shop) is Order
    (spec,) = reg.flow_specs()
    assert spec == flow_spec(shop)
    assert spec.flow_type == "Shop"
    assert spec.start_step == "Start"
    assert [s.step_type for s in spec.steps] == ["Start", "Recover", "Waiting", "Custom"]
    assert [s.has_wait_for for s in spec.steps] == [False, False, True, False]
    assert [(d.name, d.kind, d.stream_capacity_bytes) for d in spec.state] == [
        ("Total", "attribute", None),
        ("Carts", "attribute_map", None),
        ("Inbox", "channel", None),
        ("Replies", "channel_map", None),
        ("Events", "stream", 1000),
    ]
    rpcs = {r.name: r for r in spec.rpcs}
    assert set(rpcs) == {"status", "add", "send"}
    assert not rpcs["status"].has_input and not rpcs["status"].is_transactional
    assert rpcs["add"].is_transactional and rpcs["add"].locks == ["Total"]
    assert rpcs["add"].timeout_s == 5 and rpcs["add"].loads.attribute_maps == ["Carts"]
    assert rpcs["send"].is_transactional and rpcs["send"].has_input


def test_step_options_spec() -> None:
    spec = flow_spec(Shop())
    o = next(s for s in spec.steps if s.step_type == "Custom").options
    assert o.execute_timeout_s == 900 and o.wait_for_timeout_s == 7200
    assert o.heartbeat_timeout_s == 120
    assert o.execute_retry == RetryPolicySpec(maximum_attempts=3, total_duration_s=1800)
    assert o.wait_for_retry == RetryPolicySpec()
    assert o.wait_for_failure_proceed
    assert o.execute_failure_step == "Recover"
    assert o.execute_failure_options is not None
    assert o.execute_failure_options.execute_timeout_s == 5
    assert (o.wait_for_durability, o.execute_durability) == ("sync", "async")
    assert o.execute_locks == ["Total", "Carts/a%2Fb"]
    assert o.execute_loads == LoadSpec(
        attribute_maps=["Carts"], attribute_map_instances=["Carts/k%201"], channels=["Inbox"]
    )
    assert o.wait_for_loads == LoadSpec(
        channel_maps=["Replies"], channel_map_instances=["Replies/x"]
    )
    default = next(s for s in spec.steps if s.step_type == "Start").options
    assert default.heartbeat_timeout_s is None and default.execute_timeout_s == 7200


def test_loads_shared_between_methods_and_failure_options_are_each_checked_and_kept() -> None:
    entry = Registry([Shop()], allow_async_handlers=True).flow_entry("Shop")
    carts = AttributeMap("Carts", int)
    inbox = Channel("Inbox", str)
    shared = (carts.load("k 1"),)
    failure = StepOptions(
        wait_for_load_attribute_map_instances=shared,
        execute_load_attribute_map_instances=(carts.load("other"),),
    )
    o = StepOptions(
        wait_for_load_attribute_map_instances=shared,
        execute_load_attribute_map_instances=shared,
        execute_load_channels=(inbox,),
    ).on_execute_failure_proceed_to(Recover, failure)
    spec = options_spec(o, entry, "x")
    assert spec.wait_for_loads == LoadSpec(attribute_map_instances=["Carts/k%201"])
    assert spec.execute_loads == LoadSpec(
        attribute_map_instances=["Carts/k%201"], channels=["Inbox"]
    )
    assert spec.execute_failure_options is not None
    assert spec.execute_failure_options.wait_for_loads == LoadSpec(
        attribute_map_instances=["Carts/k%201"]
    )
    assert spec.execute_failure_options.execute_loads == LoadSpec(
        attribute_map_instances=["Carts/other"]
    )
    # an undeclared map is refused wherever it appears, also when the tuple repeats
    undeclared = (AttributeMap("Nope", int).load("k"),)
    bad = StepOptions().on_execute_failure_proceed_to(
        Recover,
        StepOptions(
            wait_for_load_attribute_map_instances=undeclared,
            execute_load_attribute_map_instances=undeclared,
        ),
    )
    with pytest.raises(FlowDefinitionError, match="Nope"):
        options_spec(bad, entry, "x")


def test_wait_for_inline_is_keyword_only_refuses_state_and_reaches_the_spec() -> None:
    inline = StepOptions(wait_for_inline=True, wait_for_durability=StepDurability.SYNC)
    assert not StepOptions().wait_for_inline
    spec = flow_spec(Shop())
    entry = Registry([Shop()], allow_async_handlers=True).flow_entry(spec.flow_type)
    assert options_spec(inline, entry, "x").wait_for_inline
    assert not options_spec(StepOptions(), entry, "x").wait_for_inline
    inbox = Channel("Inbox", str)
    total = Attribute("Total", int)
    for state in (
        {"wait_for_lock_attributes": (total.lock(),)},
        {"wait_for_load_channels": (inbox,)},
    ):
        with pytest.raises(ValueError, match="wait_for_inline needs a wait_for without locks"):
            StepOptions(wait_for_inline=True, **state)
    # locks and loads of execute are its own business
    StepOptions(wait_for_inline=True, execute_load_channels=(inbox,))


def test_execute_inline_needs_the_same_maps_on_both_methods_and_nothing_else() -> None:
    carts = AttributeMap("Carts", int)
    both: dict[str, Any] = {
        "wait_for_load_attribute_maps": (carts,),
        "execute_load_attribute_maps": (carts,),
    }
    assert not StepOptions().execute_inline
    spec = flow_spec(Shop())
    entry = Registry([Shop()], allow_async_handlers=True).flow_entry(spec.flow_type)
    assert options_spec(StepOptions(execute_inline=True, **both), entry, "x").execute_inline
    assert not options_spec(StepOptions(**both), entry, "x").execute_inline
    inbox = Channel("Inbox", str)
    total = Attribute("Total", int)
    states: tuple[dict[str, Any], ...] = (
        {"execute_load_attribute_maps": (carts,)},  # wait_for would not bring the map
        {"wait_for_load_attribute_maps": (carts,)},
        {**both, "execute_lock_attributes": (total.lock(),)},
        {**both, "wait_for_lock_attributes": (total.lock(),)},
        {**both, "execute_load_channels": (inbox,)},
        {**both, "execute_load_attribute_map_instances": (carts.load("k"),)},
    )
    for state in states:
        with pytest.raises(ValueError, match="execute_inline needs both methods without locks"):
            StepOptions(execute_inline=True, **state)


def test_retry_policy_zero_means_default() -> None:
    from dex._spec import retry_spec

    assert retry_spec(RetryPolicy(initial_interval=0, maximum_attempts=0)) == RetryPolicySpec()
    with pytest.raises(ValueError):
        RetryPolicy(initial_interval=-1)
    with pytest.raises(ValueError):
        StepOptions(heartbeat_timeout=0)


def test_step_list_forms() -> None:
    assert StepList.empty() == StepList(()) and list(StepList.empty()) == []
    no_start = StepList[Any].without_start_step(Recover)
    assert no_start.start is None and isinstance(no_start.steps[0], Recover)
    reg = Registry([make_flow(no_start)])
    assert reg.flow_specs()[0].start_step is None
    assert reg.start_input_type(reg.flows[0]) is type(None)
    with pytest.raises(FlowDefinitionError):
        StepList.start_step(object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PersistenceSchema.of(Total, Attribute("Total", str)), "declared twice"),
        (lambda: Attribute("", int), "non-empty"),
        (lambda: Channel("a/b", int), "without '/'"),
        (lambda: Stream("s", str, stream_capacity_bytes=0), "positive"),
        (lambda: PersistenceSchema.of("nope"), "not a state declaration"),  # type: ignore[arg-type]
    ],
)
def test_schema_validation(build: Any, message: str) -> None:
    with pytest.raises(FlowDefinitionError, match=message):
        build()


class NoExecute(Step[int]):
    pass


class AsyncGen(Step[int]):
    async def execute(self, context: Context, input: int) -> Any:
        yield 1


class BadInput(Step[Opaque]):
    def execute(self, context: Context, input: Opaque) -> StepDecision:
        return StepDecision.dead_end()


class LocksUndeclared(Step[int]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_lock_attributes=(Attribute("Other", int).lock(),))

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.dead_end()


class LoadsWrongKind(Step[int]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_load_attribute_maps=(AttributeMap("Total", int),))

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.dead_end()


class RouteOutside(Step[int]):
    def get_step_options(self) -> StepOptions:
        return StepOptions().on_execute_failure_proceed_to(Start)

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.dead_end()


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (StepList.start_step(Recover).other_steps(Recover), "appears twice"),
        (StepList.without_start_step(NoExecute), "execute\\(\\) is not overridden"),
        (StepList.without_start_step(AsyncGen), "async generator"),
        (StepList.without_start_step(AsyncStep), "allow_async_handlers=True"),
        (StepList.without_start_step(BadInput), "Opaque"),
        (StepList.without_start_step(LocksUndeclared), "lock"),
        (StepList.without_start_step(LoadsWrongKind), "load_attribute_maps"),
        (StepList.without_start_step(RouteOutside), "failure route"),
    ],
)
def test_step_validation(steps: StepList[Any], message: str) -> None:
    schema = PersistenceSchema.of(Total)
    with pytest.raises(FlowDefinitionError, match=message):
        Registry([make_flow(steps, schema)])


def test_flow_validation() -> None:
    with pytest.raises(FlowDefinitionError, match="registered twice"):
        Registry([make_flow(name="X"), make_flow(name="X")])
    with pytest.raises(FlowDefinitionError, match="invalid Flow type"):
        Registry([make_flow(name="")])
    with pytest.raises(FlowDefinitionError, match="not a Flow"):
        Registry([object()])  # type: ignore[list-item]
    with pytest.raises(FlowDefinitionError, match="Opaque"):
        Registry([make_flow(schema=PersistenceSchema.of(Attribute("o", Opaque)))])


class BadRpcArity(Flow[None]):
    @rpc
    def r(self) -> None:
        return None


class BadRpcAsync(Flow[None]):
    @rpc
    async def r(self, context: AsyncContext) -> None:
        return None


class BadRpcType(Flow[None]):
    @rpc
    def r(self, context: Context, x: Opaque) -> None:
        return None


class BadRpcLock(Flow[None]):
    @rpc(lock_attributes=(Total.lock(),))
    def r(self, context: Context) -> None:
        return None


class DupRpc(Flow[None]):
    @rpc(name="same")
    def a(self, context: Context) -> None:
        return None

    @rpc(name="same")
    def b(self, context: Context) -> None:
        return None


@pytest.mark.parametrize(
    ("flow", "message"),
    [
        (BadRpcArity(), "signature"),
        (BadRpcAsync(), "allow_async_handlers"),
        (BadRpcType(), "Opaque"),
        (BadRpcLock(), "lock"),
        (DupRpc(), "used twice"),
    ],
)
def test_rpc_validation(flow: Flow[Any], message: str) -> None:
    with pytest.raises(FlowDefinitionError, match=message):
        Registry([flow])


def test_rpc_info_gives_bound_rpc() -> None:
    shop = Shop()
    info = rpc_info(shop.add_item)
    assert info.flow is shop and info.name == "add"
    assert info.input_type is Order and info.output_type == list[int]
    assert info.spec.locks == ["Total"]
    plain = rpc_info(shop.status)
    assert plain.input_type is None and plain.output_type is int
    assert rpc_info(shop.send).output_type == bool | None
    with pytest.raises(FlowDefinitionError):
        rpc_info(Shop.status)
    with pytest.raises(FlowDefinitionError):
        rpc_info(shop.get_steps)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"backoff_coefficient": float("nan")},
        {"backoff_coefficient": float("inf")},
        {"initial_interval": float("nan")},
        {"maximum_interval": float("inf")},
        {"total_duration": float("nan")},
    ],
)
def test_retry_policy_rejects_non_finite_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="finite"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
