"""HTML building blocks: every value is escaped here, so no page builds markup by hand.

Pages are plain Python string templates. ``h`` escapes text and attribute values; ``Safe``
marks markup this module (or a page) built from escaped parts, so it is not escaped twice.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Iterable
from urllib.parse import urlencode

__all__ = [
    "LARGE_VALUE",
    "Safe",
    "duration",
    "h",
    "json_block",
    "layout",
    "link",
    "pretty_json",
    "value_block",
    "when",
]


class Safe(str):
    """Markup built from escaped parts; ``h`` passes it through unchanged."""

    __slots__ = ()


def h(value: object) -> Safe:
    """Escape ``value`` for HTML text and quoted attribute values (``Safe`` stays as is)."""
    if isinstance(value, Safe):
        return value
    return Safe(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[object], sep: str = "") -> Safe:
    """Concatenate escaped parts."""
    return Safe(sep.join(h(p) for p in parts))


def tag(element: str, content: object = "", /, **attrs: object) -> Safe:
    """``<name attrs>content</name>``; ``class_`` stands for ``class``; None drops an attribute."""
    rendered = "".join(
        f' {k.rstrip("_").replace("_", "-")}="{h(v)}"' for k, v in attrs.items() if v is not None
    )
    if element in ("input", "br", "meta"):
        return Safe(f"<{element}{rendered}>")
    return Safe(f"<{element}{rendered}>{h(content)}</{element}>")


def link(href: str, text: object, **query: object) -> Safe:
    """An ``<a>`` to ``href`` with the non-empty ``query`` parameters."""
    q = {k: str(v) for k, v in query.items() if v not in (None, "")}
    return tag("a", text, href=href + ("?" + urlencode(q) if q else ""))


def pretty_json(raw: bytes | str | None) -> str:
    """Indent a JSON document for reading; text that is not JSON comes back unchanged."""
    if raw is None:
        return "null"
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text


def json_block(raw: bytes | str | None) -> Safe:
    """A ``<pre>`` holding pretty-printed JSON, escaped."""
    return tag("pre", pretty_json(raw), class_="json")


LARGE_VALUE = 4096
"""Characters of a value shown in line; a longer value is cut and loads whole on demand."""


def value_block(raw: bytes | str | None, href: str, **query: object) -> Safe:
    """``json_block``, cut at ``LARGE_VALUE`` characters with a link to the whole value."""
    text = pretty_json(raw)
    if len(text) <= LARGE_VALUE:
        return tag("pre", text, class_="json")
    size = len(raw) if raw is not None else 0
    return Safe(
        str(tag("pre", text[:LARGE_VALUE] + "\n…", class_="json truncated"))
        + str(
            tag(
                "p",
                link(href, f"Load the whole value ({size:,} bytes)", **query),
                class_="large-value",
            )
        )
    )


def duration(seconds: float) -> str:
    """A duration as short text: ``850 ms``, ``12.3 s``, ``4 min 5 s``, ``2 h 3 min``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def when(ts: float | None) -> Safe:
    """A Unix time as UTC text in a ``<time>`` element (empty for None)."""
    if ts is None:
        return Safe("")
    t = dt.datetime.fromtimestamp(ts, dt.UTC)
    return tag("time", t.strftime("%Y-%m-%d %H:%M:%S UTC"), datetime=t.isoformat())


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
header{background:#1d232a;color:#fff;padding:.6em 1.2em;display:flex;gap:1.4em;
 align-items:center}
header a{color:#cfe3ff;text-decoration:none}header strong{font-size:1.1em}
main{padding:1em 1.4em;max-width:1200px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border-bottom:1px solid #e3e6ea;padding:.35em .6em;text-align:left;vertical-align:top}
th{background:#eef1f4}
pre{background:#f0f2f5;padding:.5em;overflow:auto;max-height:24em;margin:.2em 0;
 white-space:pre-wrap;word-break:break-word}
.status{font-weight:600}.status-running{color:#0a6}.status-failed{color:#c22}
.status-canceled,.status-terminated{color:#a60}
.notice{background:#e8f4ff;border:1px solid #9cc8f2;padding:.6em;margin:.6em 0}
.error{background:#fdeceb;border:1px solid #eea39c;padding:.6em;margin:.6em 0}
form.inline{display:inline}
section{background:#fff;border:1px solid #e3e6ea;padding:.6em 1em;margin:.8em 0}
.msg{border-left:3px solid #9aa5b1;padding:.3em .8em;margin:.4em 0;white-space:pre-wrap}
.msg-user{border-color:#2b7bd6}.msg-assistant{border-color:#0a6}.msg-tool{border-color:#a60}
label{margin-right:.8em}
pre.truncated{border-bottom:2px dashed #9aa5b1}
.msg-note{border-color:#a3a;background:#fbf4fb}
.note-label{font-weight:600;color:#838}
.countdown{font-weight:600}.countdown.soon{color:#c22}
.filters-error{margin:.4em 0}
.graph-wrap{overflow:auto;border:1px solid #e3e6ea;background:#fbfcfd}
svg.graph text{font:12px system-ui,sans-serif;fill:#1d232a}
svg.graph .box{fill:#fff;stroke:#9aa5b1;stroke-width:1.2}
svg.graph .idle .box{fill:#f3f4f6;stroke-dasharray:3 3}
svg.graph .next .box{fill:#fff8e1;stroke:#d89b00;stroke-width:2}
svg.graph .active .box{fill:#e6f6ee;stroke:#0a6;stroke-width:2.5}
svg.graph .start .box{stroke-width:2}
svg.graph .name{font-weight:600;font-size:11.5px}
svg.graph .phase{fill:#eef1f4;stroke:#c7ced6}
svg.graph .phase.wait-for{fill:#eaf1fb}
svg.graph .phase.on{fill:#0a6;stroke:#075}
svg.graph .phase.on+.phase-label{fill:#fff;font-weight:600}
svg.graph .phase-label{font-size:11px}
svg.graph .badge{text-anchor:end;font-size:11px;font-weight:600;fill:#075}
svg.graph .next .badge{fill:#a67300}
svg.graph .edge{fill:none;stroke:#6b7785;stroke-width:1.4}
svg.graph .edge.failure{stroke:#c22;stroke-dasharray:5 4}
svg.graph .edge.learned{stroke:#d89b00;stroke-dasharray:1.5 3}
svg.graph .edge-label{font-size:11px;font-weight:600;fill:#444}
svg.graph marker path{fill:#6b7785}
svg.graph .start-dot{fill:#1d232a}
.key{display:inline-block;padding:0 .5em;border:2px solid}
.key-active{background:#e6f6ee;border-color:#0a6}.key-next{background:#fff8e1;border-color:#d89b00}
#graph-steps li.active{font-weight:600}
.live{border-color:#7a5cd6;background:#faf8ff}.live-note{color:#556;font-size:.9em}
"""


def layout(
    title: str, body: object, *, signed_in: bool = True, sign_out: Safe | None = None
) -> Safe:
    """The page frame: navigation, then ``body`` (already built from escaped parts)."""
    nav = (
        Safe(
            '<a href="/ui/flows">Flows</a><a href="/ui/sessions">Agent sessions</a>'
            '<a href="/ui/approvals">Approvals</a>'
        )
        if signed_in
        else Safe("")
    )
    return Safe(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{h(title)} · Dex Web</title>"
        '<link rel=stylesheet href="/ui/static/dex-web.css">'
        '<script src="/ui/static/dex-live.js" defer></script></head><body>'
        f"<header><strong>Dex Web</strong>{nav}{sign_out or ''}</header>"
        f"<main><h1>{h(title)}</h1>{h(body)}</main></body></html>"
    )


CSS = _CSS
