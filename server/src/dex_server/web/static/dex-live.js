// Dex Web live updates. Pages are complete without this file; it only keeps them fresh.
//
// - /ui/session: follows the session's AgentEvents Stream (Server-Sent Events) and shows
//   the live text of the turn, grouped by (turn_id, step_execution_id, attempt): per Step
//   execution only the highest attempt seen is kept. At turn_completed / turn_failed the
//   live text of that turn goes and the stored messages are fetched in its place.
// - /ui/flow: follows the run's history and appends new events to the timeline.
// - /ui/flows, /ui/sessions, /ui/approvals: poll /ui/live/version (answered 304 while
//   nothing changed) and refresh when it changed.
//
// Every value from a Flow is inserted with textContent, never as markup.
(function () {
  "use strict";

  var POLL_MS = 3000;
  var REFRESH_DELAY_MS = 300;
  var main = document.querySelector("main");
  if (!main || !window.fetch) {
    return;
  }
  var params = new URLSearchParams(location.search);
  var path = location.pathname;

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // ------------------------------------------------------------ refreshing a page

  // A part of the page the person is using (typing, an open dialog) is not replaced.
  function busy(node) {
    if (node.contains(document.activeElement) && document.activeElement !== document.body) {
      return true;
    }
    if (node.matches("details[open]") || node.querySelector("details[open] form")) return true;
    // text typed (a value the page was not rendered with)
    var fields = node.querySelectorAll("textarea, input[type=text], input:not([type])");
    for (var i = 0; i < fields.length; i++) {
      if (fields[i].value !== fields[i].defaultValue) return true;
    }
    return false;
  }

  function parts(root) {
    return Array.prototype.filter.call(root.children, function (c) {
      return !c.hasAttribute("data-live-own");
    });
  }

  var chain = Promise.resolve();
  var refreshTimer = null;

  // Fetch this page again and swap in its parts; `keep` names parts to leave alone.
  // Refreshes run one after another; the returned promise settles when this one is done.
  function refresh(keep) {
    chain = chain.then(function () {
      return swap(keep);
    });
    return chain;
  }

  function swap(keep) {
    return fetch(location.href, { credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok || (r.headers.get("content-type") || "").indexOf("text/html") !== 0) {
          return null;
        }
        return r.text();
      })
      .then(function (text) {
        if (text === null) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        if (!fresh) return;
        var old = parts(main);
        var neu = parts(fresh);
        if (old.length !== neu.length) {
          if (old.some(busy)) return; // later, when the person is done
          var anchor = old.length ? old[0] : null;
          neu.forEach(function (n) {
            main.insertBefore(document.adoptNode(n), anchor);
          });
          old.forEach(function (o) {
            o.remove();
          });
        } else {
          for (var i = 0; i < old.length; i++) {
            if (keep && keep(old[i])) continue;
            if (busy(old[i])) continue;
            if (old[i].isEqualNode(neu[i])) continue;
            old[i].replaceWith(document.adoptNode(neu[i]));
          }
        }
        document.dispatchEvent(new CustomEvent("dex:refreshed"));
      })
      .catch(function () {});
  }

  function soon(keep) {
    if (refreshTimer !== null) return;
    refreshTimer = setTimeout(function () {
      refreshTimer = null;
      refresh(keep);
    }, REFRESH_DELAY_MS);
  }

  // ------------------------------------------------------------ polling the version

  var polling = false;

  function pollVersion() {
    if (polling) return;
    polling = true;
    var etag = null;
    function tick() {
      if (document.hidden) return; // a background tab costs nothing
      var headers = {};
      if (etag) headers["if-none-match"] = etag;
      fetch("/ui/live/version", { credentials: "same-origin", headers: headers, cache: "no-store" })
        .then(function (r) {
          if (r.status !== 200) return;
          var tag = r.headers.get("etag");
          if (etag !== null && tag !== etag) refresh();
          etag = tag;
        })
        .catch(function () {});
    }
    tick();
    setInterval(tick, POLL_MS);
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden) tick();
    });
  }

  // ------------------------------------------------------------ live text of a session

  function liveSession(flowId) {
    var section = el("section", "live-text");
    section.id = "live-text";
    section.setAttribute("data-live-own", "");
    section.setAttribute("aria-live", "polite");
    section.hidden = true;
    section.appendChild(el("h2", null, "Live"));
    function place() {
      var conversation = document.getElementById("conversation");
      if (conversation) {
        conversation.after(section);
      } else {
        main.appendChild(section);
      }
    }
    place();
    document.addEventListener("dex:refreshed", place);

    // step_execution_id -> {turn, attempt, node, text}
    var groups = new Map();

    function group(ev) {
      var g = groups.get(ev.step_execution_id);
      if (g && ev.attempt < g.attempt) return null; // a lower attempt's late text: dropped
      if (!g || ev.attempt > g.attempt) {
        if (!g) {
          g = { turn: ev.turn_id, node: el("div", "msg msg-assistant live") };
          groups.set(ev.step_execution_id, g);
          section.appendChild(g.node);
        }
        // a higher attempt replaces what the lower one had written
        g.attempt = ev.attempt;
        g.node.textContent = "";
        g.label = el("small", "live-label");
        g.node.appendChild(g.label);
        g.node.appendChild(document.createTextNode("\n"));
        g.text = document.createTextNode("");
        g.node.appendChild(g.text);
        g.node.setAttribute("data-turn", ev.turn_id);
        g.node.setAttribute("data-step-execution", ev.step_execution_id);
        g.node.setAttribute("data-attempt", String(ev.attempt));
      }
      g.label.textContent =
        ev.turn_id + " · live · attempt " + ev.attempt + " of " + ev.step_execution_id;
      section.hidden = false;
      return g;
    }

    function dropTurn(turn) {
      groups.forEach(function (g, key) {
        if (g.turn === turn) {
          g.node.remove();
          groups.delete(key);
        }
      });
      section.hidden = groups.size === 0;
    }

    function onEvent(ev) {
      var data = ev.data || {};
      switch (ev.type) {
        case "text_delta":
        case "reasoning_delta": {
          var g = group(ev);
          if (g) g.text.appendData(String(data.text || ""));
          break;
        }
        case "tool_call_started":
        case "tool_call_finished": {
          var t = group(ev);
          if (t) {
            var what = ev.type === "tool_call_started" ? "started" : String(data.status || "done");
            t.node.appendChild(el("div", "live-note", "tool " + String(data.tool_name) + ": " + what));
          }
          soon();
          break;
        }
        case "turn_completed":
        case "turn_failed":
          // the stored messages replace the live text of the turn
          refresh().then(function () {
            dropTurn(ev.turn_id);
          });
          break;
        default:
          soon();
      }
    }

    var url =
      "/ui/live/stream?stream=AgentEvents&start=turn&id=" + encodeURIComponent(flowId);
    follow(url, "message", function (msg) {
      onEvent(msg.value);
    });
  }

  // ------------------------------------------------------------ history of a run

  function liveHistory(flowId) {
    var timeline = document.getElementById("timeline");
    if (!timeline) return;
    var list = timeline.querySelector("ol");
    var later = timeline.querySelector("a[href*='after=']");
    if (!list || later) {
      pollVersion(); // an older page of the history: just keep the rest fresh
      return;
    }
    var items = list.querySelectorAll("li[id^='event-']");
    var last = items.length ? items[items.length - 1].id.slice("event-".length) : "0";
    var url = "/ui/live/history?id=" + encodeURIComponent(flowId) + "&after=" + last;
    follow(url, "history", function (e) {
      if (document.getElementById("event-" + e.event_id)) return;
      var item = el("li");
      item.id = "event-" + e.event_id;
      item.setAttribute("data-live", "");
      var details = el("details");
      var summary = el("summary", null, "#" + e.event_id + " ");
      summary.appendChild(el("strong", null, e.type));
      details.appendChild(summary);
      details.appendChild(el("pre", "json", JSON.stringify(e.payload, null, 2)));
      item.appendChild(details);
      list.appendChild(item);
      // the rest of the page (status, state panel) follows; the timeline keeps its items
      soon(function (part) {
        return part.id === "timeline";
      });
    });
  }

  // ------------------------------------------------------------ one EventSource

  function follow(url, name, handle) {
    if (!window.EventSource) {
      pollVersion();
      return;
    }
    var source = new EventSource(url);
    source.addEventListener(name, function (m) {
      var value;
      try {
        value = JSON.parse(m.data);
      } catch (err) {
        return;
      }
      handle(value);
    });
    source.addEventListener("end", function () {
      source.close();
      refresh();
    });
    source.addEventListener("error", function () {
      // closed for good (refused, e.g. over the connection limit): poll instead
      if (source.readyState === EventSource.CLOSED) pollVersion();
    });
  }

  // ------------------------------------------------------------ which page is this

  var id = params.get("id");
  if (path === "/ui/session" && id) {
    liveSession(id);
  } else if (path === "/ui/flow" && id) {
    liveHistory(id);
  } else if (path === "/ui/flows" || path === "/ui/sessions" || path === "/ui/approvals") {
    pollVersion();
  }
})();
