"""The Step graph of a run: built from the Flow type's spec and the run's history, drawn as SVG.

The spec names every Step type (and whether it has a ``wait_for``), the start Step and the
failure routes; the decisions themselves live in user code, so the edges between Steps are
the movements this run made (each Step event names the execution it came from) plus the
executions active now. Next Steps are the ones an active Step moved to before in this run,
and its failure route.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from dex._protocol import ActiveStepWire, FlowSpec

from dex_server.web._html import Safe, h, join

START = "__start__"
_STEP_EVENTS = (
    "StepWaitForCompleted",
    "StepWaitForFailed",
    "StepExecuteCompleted",
    "StepExecuteFailed",
)
_WAIT_FOR_PHASES = ("queued_wait_for", "running_wait_for", "waiting")
_NODE_W, _NODE_H, _GAP_X, _GAP_Y, _PAD = 184, 62, 46, 30, 12


@dataclass
class Node:
    step_type: str
    has_wait_for: bool = False
    is_start: bool = False
    declared: bool = True
    runs: int = 0
    active_phases: list[str] = field(default_factory=list)
    next: bool = False

    @property
    def active(self) -> bool:
        return bool(self.active_phases)


@dataclass
class Edge:
    source: str  # a Step type, START, or "__rpc/<name>"
    target: str
    count: int = 0
    fan_out: int = 1  # most executions of ``target`` one source execution started
    failure_route: bool = False
    learned: bool = False  # a move other runs of the Flow type made, not this one


@dataclass
class Graph:
    nodes: dict[str, Node]
    edges: list[Edge]
    truncated: bool = False


def build(
    spec: FlowSpec | None,
    step_events: Iterable[tuple[str, bytes]],
    active: list[ActiveStepWire],
    *,
    truncated: bool = False,
    learned: Iterable[tuple[str, str]] = (),
) -> Graph:
    """The graph of one run from its spec, its Step events ``(type, payload)`` and live steps.

    ``learned`` are moves ``(source, target)`` other runs of the Flow type made: an active
    Step this run has not moved from yet gets its next Steps from them.
    """
    nodes: dict[str, Node] = {}
    if spec is not None:
        for s in spec.steps:
            nodes[s.step_type] = Node(
                s.step_type, has_wait_for=s.has_wait_for, is_start=s.step_type == spec.start_step
            )
    type_of, parent_of = _executions(step_events, active)
    for st in type_of.values():
        node = nodes.setdefault(st, Node(st, declared=False))
        node.runs += 1
    edges = _edges(type_of, parent_of)
    if spec is not None:
        seen = {(e.source, e.target) for e in edges}
        for s in spec.steps:
            route = s.options.execute_failure_step
            if route and (s.step_type, route) not in seen and route in nodes:
                edges.append(Edge(s.step_type, route, failure_route=True))
    for a in active:
        nodes[a.step_type].active_phases.append(a.phase)
    active_types = {a.step_type for a in active}
    moved = {e.source for e in edges if not e.failure_route}
    seen = {(e.source, e.target) for e in edges}
    for src, dst in dict.fromkeys(learned):
        if src in active_types and src not in moved and dst in nodes and (src, dst) not in seen:
            edges.append(Edge(src, dst, learned=True))
    for e in edges:
        if e.source in active_types and e.target in nodes:
            nodes[e.target].next = True
    return Graph(nodes=nodes, edges=edges, truncated=truncated)


def moves(step_events: Iterable[tuple[str, bytes]]) -> list[tuple[str, str]]:
    """The ``(source, target)`` Step type moves of a run's Step events."""
    type_of, parent_of = _executions(step_events, [])
    return [(e.source, e.target) for e in _edges(type_of, parent_of)]


def unmoved_active(g: Graph) -> bool:
    """Whether an active Step of ``g`` has not moved anywhere in this run yet."""
    moved = {e.source for e in g.edges if not e.failure_route}
    return any(n.active and n.step_type not in moved for n in g.nodes.values())


def _executions(
    step_events: Iterable[tuple[str, bytes]], active: list[ActiveStepWire]
) -> tuple[dict[str, str], dict[str, str]]:
    """Each execution's Step type, and the execution (or start, or RPC) it came from."""
    type_of: dict[str, str] = {}
    parent_of: dict[str, str] = {}
    for kind, payload in step_events:
        if kind not in _STEP_EVENTS:
            continue
        try:
            ctx = json.loads(payload).get("context") or {}
        except (ValueError, AttributeError):
            continue
        eid, st = str(ctx.get("stepExecutionId", "")), str(ctx.get("stepType", ""))
        if eid and st:
            type_of[eid] = st
            parent_of[eid] = str(ctx.get("fromStepExecutionId", ""))
    for a in active:
        type_of[a.step_execution_id] = a.step_type
        parent_of[a.step_execution_id] = a.from_step_execution_id
    return type_of, parent_of


def _edges(type_of: dict[str, str], parent_of: dict[str, str]) -> list[Edge]:
    # (source type, target type) -> {source execution: children of that type}
    children: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for eid, st in type_of.items():
        parent = parent_of.get(eid, "")
        if parent == START or parent.startswith("__rpc/"):
            src = parent
        elif parent in type_of:
            src = type_of[parent]
        else:
            continue
        children[(src, st)][parent] += 1
    return [
        Edge(src, dst, count=sum(per.values()), fan_out=max(per.values()))
        for (src, dst), per in children.items()
    ]


def _layers(g: Graph) -> list[list[str]]:
    """Columns by distance from the start over this run's edges; Steps never run come last."""
    starts = [n.step_type for n in g.nodes.values() if n.is_start] or [
        e.target for e in g.edges if e.source == START
    ]
    depth: dict[str, int] = {}
    _spread(g, depth, starts, 0)
    # Steps reached only from RPCs sit beside the start
    _spread(g, depth, [e.target for e in g.edges if e.source.startswith("__rpc/")], 1)
    # Steps this run never reached come after everything, their failure routes beside them
    later = max(depth.values(), default=-1) + 1
    unreached = [n for n in g.nodes if n not in depth]
    targets = {e.target for e in g.edges if e.source in unreached and e.source != e.target}
    _spread(g, depth, [n for n in unreached if n not in targets], later)
    _spread(g, depth, [n for n in g.nodes if n not in depth], later)
    out: dict[int, list[str]] = defaultdict(list)
    for name in g.nodes:
        out[depth[name]].append(name)
    return [out[k] for k in sorted(out)]


def _spread(g: Graph, depth: dict[str, int], roots: list[str], at: int) -> None:
    frontier = [r for r in dict.fromkeys(roots) if r not in depth and r in g.nodes]
    for r in frontier:
        depth[r] = at
    while frontier:
        nxt: list[str] = []
        for src in frontier:
            for e in g.edges:
                if e.source == src and e.target in g.nodes and e.target not in depth:
                    depth[e.target] = depth[src] + 1
                    nxt.append(e.target)
        frontier = nxt


def _phase_label(n: Node) -> str:
    if not n.active_phases:
        return ""
    phases = sorted(set(n.active_phases))
    many = f" ×{len(n.active_phases)}" if len(n.active_phases) > 1 else ""
    return ", ".join(p.replace("_", " ") for p in phases) + many


def render(g: Graph) -> Safe:
    """The graph as inline SVG (styled by the stylesheet), then the same facts as a list."""
    layers = _layers(g)
    pos: dict[str, tuple[int, int]] = {}
    for col, names in enumerate(layers):
        for row, name in enumerate(names):
            pos[name] = (
                _PAD + col * (_NODE_W + _GAP_X),
                _PAD + 22 + row * (_NODE_H + _GAP_Y),
            )
    width = _PAD * 2 + max(1, len(layers)) * (_NODE_W + _GAP_X) - _GAP_X
    height = _PAD * 2 + 22 + max((len(c) for c in layers), default=1) * (_NODE_H + _GAP_Y) + 30
    edges_svg: list[str] = []
    for e in g.edges:
        if e.target not in pos or (e.source not in pos and e.source != START):
            continue
        tx, ty = pos[e.target]
        if e.source == START:
            sx, sy = tx - _GAP_X + 8, ty + _NODE_H // 2
            edges_svg.append(f'<circle class=start-dot cx="{sx - 6}" cy="{sy}" r="6"/>')
        else:
            x0, y0 = pos[e.source]
            sx, sy = x0 + _NODE_W, y0 + _NODE_H // 2
        ex, ey = tx, ty + _NODE_H // 2
        cls = "edge failure" if e.failure_route else ("edge learned" if e.learned else "edge")
        if e.source != START and ex <= sx:
            # a loop back (or a move within a column): arc under the boxes
            drop = max(sy, ey) + _NODE_H // 2 + 14
            d = f"M{sx - _NODE_W // 2} {sy + _NODE_H // 2} C{sx - _NODE_W // 2} {drop} "
            d += f"{ex + _NODE_W // 2} {drop} {ex + _NODE_W // 2} {ey + _NODE_H // 2}"
            lx, ly = (sx + ex) // 2, drop - 4
        else:
            mid = (sx + ex) // 2
            d = f"M{sx} {sy} C{mid} {sy} {mid} {ey} {ex - 2} {ey}"
            lx, ly = mid, (sy + ey) // 2 - 4
        label = f"×{e.fan_out}" if e.fan_out > 1 and not e.failure_route else ""
        if e.learned:
            label = "other runs"
        edges_svg.append(
            f'<path class="{cls}" d="{d}" marker-end="url(#arrow)"'
            f' data-from="{h(e.source)}" data-to="{h(e.target)}"/>'
        )
        if label:
            edges_svg.append(f'<text class=edge-label x="{lx}" y="{ly}">{h(label)}</text>')
    nodes_svg: list[str] = []
    for name, n in g.nodes.items():
        x, y = pos[name]
        classes = " ".join(
            c
            for c, on in (
                ("node", True),
                ("active", n.active),
                ("next", n.next and not n.active),
                ("start", n.is_start),
                ("idle", not n.runs),
            )
            if on
        )
        half = _NODE_W // 2
        wait_active = any(p in _WAIT_FOR_PHASES for p in n.active_phases)
        exec_active = any(p not in _WAIT_FOR_PHASES for p in n.active_phases)
        parts = [
            f'<g class="{classes}" data-step="{h(name)}">',
            f"<title>{h(name)}{' (active: ' + _phase_label(n) + ')' if n.active else ''}</title>",
            f'<rect class=box x="{x}" y="{y}" width="{_NODE_W}" height="{_NODE_H}" rx="6"/>',
            f'<text class=name x="{x + 8}" y="{y + 18}">{h(_short(name))}</text>',
        ]
        if n.has_wait_for:
            parts.append(
                f'<rect class="phase wait-for{" on" if wait_active else ""}" x="{x + 6}"'
                f' y="{y + 28}" width="{half - 9}" height="22" rx="3"/>'
                f'<text class=phase-label x="{x + 12}" y="{y + 43}">wait_for</text>'
            )
        ex_x = x + half + 3 if n.has_wait_for else x + 6
        ex_w = half - 9 if n.has_wait_for else _NODE_W - 12
        parts.append(
            f'<rect class="phase execute{" on" if exec_active else ""}" x="{ex_x}"'
            f' y="{y + 28}" width="{ex_w}" height="22" rx="3"/>'
            f'<text class=phase-label x="{ex_x + 6}" y="{y + 43}">execute</text>'
        )
        tag_text = "active" if n.active else ("next" if n.next else "")
        if n.active and len(n.active_phases) > 1:
            tag_text += f" ×{len(n.active_phases)}"
        if tag_text:
            parts.append(
                f'<text class=badge x="{x + _NODE_W - 4}" y="{y - 5}">{h(tag_text)}</text>'
            )
        parts.append("</g>")
        nodes_svg.append("".join(parts))
    svg = (
        f'<svg id=graph-svg class=graph role=img aria-label="Step graph" width="{width}"'
        f' height="{height}" viewBox="0 0 {width} {height}">'
        '<defs><marker id=arrow viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"'
        ' markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z"/></marker></defs>'
        + "".join(edges_svg)
        + "".join(nodes_svg)
        + "</svg>"
    )
    return Safe(
        "<section id=step-graph><h2>Step graph</h2>"
        '<p class=legend><span class="key key-active">active</span>'
        ' <span class="key key-next">next</span>'
        " Boxes are the Flow type's Steps, split into <code>wait_for</code> and"
        " <code>execute</code>; arrows are the moves this run made (×N: one execution started"
        " N in parallel), dashed arrows failure routes. Next: where an active Step moved"
        " before in this run, or, if it has not moved yet, in recent runs of the Flow type"
        " (dotted arrows).</p>"
        + (
            "<p class=notice>The graph shows the first part of a long history only.</p>"
            if g.truncated
            else ""
        )
        + f"<div class=graph-wrap>{svg}</div>{_facts(g)}</section>"
    )


def _short(name: str, limit: int = 25) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _facts(g: Graph) -> Safe:
    items = []
    for name, n in g.nodes.items():
        bits = ["start Step" if n.is_start else "", "wait_for + execute" if n.has_wait_for else ""]
        if not n.declared:
            bits.append("not in the registered spec")
        bits.append(f"{n.runs} execution(s) in this run")
        if n.active:
            bits.append(f"active: {_phase_label(n)}")
        elif n.next:
            bits.append("next")
        outs = [
            f"{e.target}{' (on failure)' if e.failure_route else ''}"
            + (" (in other runs)" if e.learned else "")
            + (f" ×{e.fan_out} in parallel" if e.fan_out > 1 else "")
            for e in g.edges
            if e.source == name
        ]
        if outs:
            bits.append("→ " + ", ".join(outs))
        cls = "active" if n.active else ("next" if n.next else None)
        items.append(
            Safe(
                f'<li data-step="{h(name)}"{f" class={cls}" if cls else ""}>'
                f"<strong>{h(name)}</strong>: {h('; '.join(b for b in bits if b))}</li>"
            )
        )
    return Safe(
        "<details class=graph-facts><summary>The graph as a list</summary>"
        f"<ul id=graph-steps>{join(items)}</ul></details>"
    )
