// The console's reading pages: the overview (the system now, charts of the last hour, the
// live feed), conversations (search, one conversation, one task's timeline), the audit
// log, usage and budgets.
"use strict";
(function () {
  const C = window.HermesConsole, el = C.el, fmt = C.fmt;
  const boxWidth = () => Math.max(300, document.getElementById("main").clientWidth - 60);

  // The live feed: what the event stream said lately, newest first.
  const feed = [];
  C.listeners.push((kind, data) => { feed.unshift({kind, ...data}); feed.length = Math.min(feed.length, 40); });
  function feedLine(item) {
    const when = fmt.clock(item.at);
    if (item.kind === "task") {
      return el("li", {}, when, " ", C.chip(item.status), " ", C.link("#/task/" + item.task_id, item.task_id.slice(0, 10)),
        " in ", C.link("#/conversation/" + encodeURIComponent(item.conversation_id), item.conversation_id), item.tool ? " · " + item.tool : "");
    }
    if (item.kind === "dead_letter") return el("li", {}, when, " ", C.chip("dead"), " reply to ", item.conversation_id || "?", ": ", item.reason || "");
    const who = item.actor || item.decided_by || item.requester || "";
    return el("li", {}, when, " ", C.chip(item.outcome || item.decision || item.type), " ", item.type || "audit",
      item.tool ? " " + item.tool : "", item.action ? " " + item.action : "", who ? " by " + who : "");
  }

  function kpi(label, value, tone, id) {
    const wordy = String(value).length > 12;
    return el("div", {class: "kpi " + (tone || "") + (wordy ? " wordy" : ""), "data-kpi": id}, el("div", {class: "v", text: value}), el("div", {class: "l", text: label}));
  }
  function taskRow(t) {
    return [C.link("#/task/" + t.task_id, t.task_id.slice(0, 10)), C.chip(t.status),
      C.link("#/conversation/" + encodeURIComponent(t.conversation_id), t.conversation_id),
      t.user_id, el("span", {class: "wrap", text: (t.instruction || "").slice(0, 120)}), fmt.ago(t.updated_at)];
  }

  C.register("overview", {nav: 1, title: "Overview", async render(box) {
    const [now, series] = await Promise.all([C.get("/agent/console/overview"), C.get("/agent/console/series?minutes=60")]);
    const t = now.tasks, oldest = now.queue.oldest;
    box.append(el("h1", {text: "Overview"}));
    box.append(el("div", {class: "grid"},
      kpi("running", fmt.num(t.running), t.running ? "ok" : "", "running"),
      kpi("queued", fmt.num(t.queued), t.queued ? "warn" : "", "queued"),
      kpi("waiting for approval", fmt.num(t.awaiting_approval), t.awaiting_approval ? "warn" : "", "awaiting_approval"),
      kpi("failed, last hour", fmt.num(t.failed_last_hour), t.failed_last_hour ? "bad" : "", "failed"),
      kpi("oldest queued", oldest ? fmt.dur(oldest.age_seconds) : "none", oldest && oldest.age_seconds > 60 ? "warn" : "", "oldest"),
      kpi("model calls in flight", fmt.num(now.model.in_flight) + (now.model.waiting ? " (+" + now.model.waiting + " waiting)" : ""), "", "in_flight"),
      kpi("model latency, mean 1 h", fmt.dur(now.model.mean_seconds_last_hour), "", "latency"),
      kpi("error rate, last hour", fmt.pct(now.error_rate_last_hour), now.error_rate_last_hour > 0.05 ? "bad" : "", "error_rate"),
      kpi("approvals pending", fmt.num(now.approvals_pending), now.approvals_pending ? "warn" : "", "approvals"),
      kpi("dead letters", fmt.num(now.dead_letters), now.dead_letters ? "warn" : "", "dead_letters")));
    const xs = series.times;
    box.append(el("div", {class: "cols"},
      C.panel("", C.chart("Tasks per minute", xs, [
        {label: "queued", values: series.queued, color: "#6ea8fe", bars: true},
        {label: "answered", values: series.answered, color: "#5dd39e", bars: true},
        {label: "failed", values: series.failed, color: "#ef6b6b", bars: true}])),
      C.panel("", C.chart("Model calls per minute, mean latency (s)", xs, [
        {label: "calls", values: series.model_calls, color: "#b197fc", bars: true},
        {label: "mean s", values: series.model_mean_seconds, color: "#f0b35e", scale: "right"}])),
      C.panel("", C.chart("Queue: conversations waiting, oldest (s)", xs, [
        {label: "waiting", values: series.waiting, color: "#6ea8fe"},
        {label: "oldest s", values: series.oldest_seconds, color: "#f0b35e", scale: "right"}])),
      C.panel("", C.chart("Errors per minute", xs, [
        {label: "error rate", values: series.error_rate, color: "#ef6b6b", scale: "right"},
        {label: "tool errors", values: series.tool_errors, color: "#f0b35e", bars: true},
        {label: "dead letters", values: series.dead_letters, color: "#b197fc", bars: true}]))));
    const channels = Object.entries(now.by_channel);
    const cols = ["running", "queued", "awaiting_approval", "asked_user", "answered_last_hour", "failed_last_hour", "limit_last_hour", "invalid_last_hour", "cancelled_last_hour"];
    const shown = cols.filter((c) => channels.some(([, v]) => v[c]));
    box.append(el("div", {class: "cols"},
      C.panel("By channel", C.table(["channel", ...shown.map((c) => c.replace(/_/g, " ") + "#")],
        channels.map(([name, v]) => [name, ...shown.map((c) => fmt.num(v[c] || 0))]), {empty: "No tasks in the last hour."})),
      C.panel("Serving processes", C.table(["process", "conversations#", "model calls#", "seen"],
        now.processes.map((p) => [p.name, fmt.num(p.active), fmt.num(p.in_flight) + (p.model_waiting ? " +" + p.model_waiting : ""), fmt.dur(p.age_seconds) + " ago"]),
        {empty: "No process has reported yet."}),
      el("p", {class: "dim small", text: "model: " + (now.model_name || "not configured") + " · hub: " + now.hub}))));
    box.append(el("div", {class: "cols"},
      C.panel("Recent tasks", C.table(["task", "status", "conversation", "user", "asked", "changed"], now.recent_tasks.map(taskRow))),
      C.panel("Live", feed.length ? el("ul", {class: "feed", id: "feed"}, feed.map(feedLine)) : el("p", {class: "dim", text: "What happens from now on shows here."}))));
  }});

  C.register("conversations", {nav: 2, title: "Conversations", async render(box, route) {
    const q = route.query.get("q") || "";
    const found = await C.get("/agent/console/conversations?q=" + encodeURIComponent(q));
    box.append(el("h1", {text: "Conversations"}));
    box.append(el("form", {class: "filters", role: "search", onsubmit: (e) => { e.preventDefault(); C.go("#/conversations?q=" + encodeURIComponent(e.target.elements.q.value.trim())); }},
      el("label", {}, "id, channel or user", el("input", {name: "q", value: q, placeholder: "e.g. slack, api:local, U123"})),
      el("button", {type: "submit", text: "Search"})));
    box.append(C.panel(q ? "Matching “" + q + "”" : "Most recently active", C.table(["conversation", "channel", "users", "last active"],
      found.conversations.map((c) => [C.link("#/conversation/" + encodeURIComponent(c.conversation_id), c.conversation_id), c.channel,
        (c.users || []).join(", ") || "—", fmt.ago(c.last_active)]), {empty: "No conversation matches."})));
  }});

  C.register("conversation", {title: "Conversation", async render(box, route) {
    const data = await C.get("/agent/console/conversations/" + encodeURIComponent(route.arg));
    box.append(el("h1", {}, "Conversation ", el("span", {class: "mono", text: data.conversation_id})));
    const log = el("div");
    for (const t of data.tasks) {
      log.append(el("div", {class: "bubble user", text: t.instruction}));
      const failed = ["failed", "limit", "invalid", "cancelled"].includes(t.status);
      log.append(el("div", {class: "bubble bot" + (failed ? " error" : "")},
        el("div", {class: "buttons small"}, C.chip(t.status), el("span", {class: "dim", text: fmt.time(t.updated_at) + " · " + t.user_id}), C.link("#/task/" + t.task_id, "timeline →")),
        t.text || (t.status === "awaiting_approval" ? "waiting for an approval" : "")));
    }
    box.append(C.panel("Messages and tasks (" + data.tasks.length + ")", data.tasks.length ? log : el("p", {class: "dim", text: "No task is kept for this conversation."})));
    box.append(C.panel("Files", C.table(["name", "bytes#", "who", "task", "when"], data.files.map((f) => [f.name, fmt.num(f.bytes), f.kind === "sent" ? "sent by a person" : "made by a tool",
      f.task_id ? C.link("#/task/" + f.task_id, f.task_id.slice(0, 10)) : "—", fmt.time(f.modified)]), {empty: "No files were sent or made here."})));
  }});

  C.register("task", {title: "Task", async render(box, route) {
    const data = await C.get("/agent/console/tasks/" + encodeURIComponent(route.arg));
    const t = data.task;
    box.append(el("h1", {}, "Task ", el("span", {class: "mono", text: t.task_id}), " ", C.chip(t.status)));
    box.append(el("div", {class: "grid"},
      kpi("conversation", t.conversation_id), kpi("user", t.user_id), kpi("asked", fmt.time(t.created_at)),
      kpi("wall time", fmt.dur(t.wall_time)), kpi("rounds", fmt.num(t.rounds)), kpi("model calls", fmt.num(t.model_calls)), kpi("tokens", fmt.num(t.tokens))));
    const trace = el("p", {class: "small"}, "trace id ", el("code", {text: data.trace_id}),
      data.trace_url ? el("span", {}, " · ", el("a", {href: data.trace_url, target: "_blank", rel: "noopener noreferrer", text: "open the trace"})) : el("span", {class: "dim", text: " · set HERMES_TRACE_URL to link a tracing UI"}));
    box.append(C.panel("Timeline", trace, C.timeline(t, data.events, boxWidth())));
    box.append(C.panel("Request and answer", el("div", {class: "bubble user", text: t.instruction}),
      el("div", {class: "bubble bot" + (t.error ? " error" : ""), text: t.text || t.error || "—"}),
      el("p", {}, C.link("#/conversation/" + encodeURIComponent(t.conversation_id), "the whole conversation →"),
        t.status === "awaiting_approval" ? el("span", {}, " · ", C.link("#/approvals", "decide its approval →")) : "")));
    const first = data.events.length ? data.events[0].timestamp : 0;
    box.append(C.panel("", el("details", {}, el("summary", {text: "Events (" + data.events.length + ")"}),
      C.table(["at", "type", "what"], data.events.map((e) => ["+" + fmt.dur(e.timestamp - first), e.type,
        el("span", {class: "mono wrap", text: JSON.stringify(e.payload).slice(0, 300)})])))));
  }});

  const OUTCOMES = ["", "ok", "error", "approved", "rejected", "expired", "done", "sent", "dead", "discarded", "cancelled", "stopping"];
  const toUnix = (value) => value ? String(Math.floor(new Date(value).getTime() / 1000)) : "";
  C.register("audit", {nav: 6, title: "Audit", async render(box, route) {
    const q = route.query, params = new URLSearchParams({limit: "200"});
    for (const name of ["actor", "tool", "outcome", "since", "until"]) if (q.get(name)) params.set(name, q.get(name));
    const data = await C.get("/agent/audit?" + params);
    const local = (ts) => ts ? new Date(ts * 1000 - new Date().getTimezoneOffset() * 60000).toISOString().slice(0, 16) : "";
    box.append(el("h1", {text: "Audit log"}));
    box.append(el("form", {class: "filters", onsubmit: (e) => {
      e.preventDefault();
      const f = e.target.elements, next = new URLSearchParams();
      for (const [name, value] of [["actor", f.actor.value.trim()], ["tool", f.tool.value.trim()], ["outcome", f.outcome.value], ["since", toUnix(f.since.value)], ["until", toUnix(f.until.value)]]) if (value) next.set(name, value);
      C.go("#/audit?" + next);
    }},
      el("label", {}, "actor", el("input", {name: "actor", value: q.get("actor") || "", placeholder: "who"})),
      el("label", {}, "tool", el("input", {name: "tool", value: q.get("tool") || ""})),
      el("label", {}, "outcome", el("select", {name: "outcome"}, OUTCOMES.map((o) => el("option", {value: o, selected: o === (q.get("outcome") || ""), text: o || "any"})))),
      el("label", {}, "since", el("input", {name: "since", type: "datetime-local", value: local(Number(q.get("since")))})),
      el("label", {}, "until", el("input", {name: "until", type: "datetime-local", value: local(Number(q.get("until")))})),
      el("button", {type: "submit", text: "Filter"})));
    box.append(C.panel(C.count(data.count, "entry", "entries") + ", newest first", C.table(["when", "what", "outcome", "who", "key", "conversation", "details"],
      data.entries.map((e) => [fmt.time(e.ts), [e.type, e.tool, e.action, e.job_id].filter(Boolean).join(" "), C.chip(e.outcome),
        e.actor || e.decided_by || e.requester || "—", e.principal || "—", e.conversation_id || "—",
        el("details", {}, el("summary", {text: "show"}), el("pre", {text: fmt.json(e)}))]), {empty: "No entry matches."})));
  }});

  function bars(rows, unit) {
    const top = Math.max(1, ...rows.map((r) => r.tokens));
    return C.table(["name", "tokens#", ""], rows.map((r) => [r.name, fmt.num(r.tokens),
      el("div", {class: "bar"}, el("div", {style: `width:${Math.round(r.tokens / top * 100)}%`}))]), {empty: "No " + unit + " yet."});
  }
  // Budgets, where this gateway has them (its OpenAPI description lists GET /agent/usage).
  async function budgets(usage) {
    const spec = await fetch("/openapi.json").then((r) => r.json()).catch(() => ({}));
    if (!(spec.paths || {})["/agent/usage"]) {
      return el("p", {class: "dim", id: "no-budgets", text: "Budgets are not configured on this gateway (it has no budgets: GET /agent/usage is not served); the tokens above are what was used, with no limit."});
    }
    const ask = async (scope, id) => {
      try { return await C.get("/agent/usage?scope=" + scope + (id ? "&id=" + encodeURIComponent(id) : "")); } catch (err) { return {budgets: []}; }
    };
    const global = await ask("global");
    const asked = [global, ...await Promise.all([...usage.user.slice(0, 8).map((u) => ask("user", u.name)), ...usage.channel.slice(0, 5).map((c) => ask("channel", c.name))])];
    const seen = new Set(), rows = [];
    for (const answer of asked) for (const b of answer.budgets || []) {
      const key = b.rule + "|" + b.subject;
      if (seen.has(key)) continue;
      seen.add(key);
      const share = b.tokens ? (b.used_tokens + b.reserved_tokens) / b.tokens : b.usd ? (b.used_usd + b.reserved_usd) / b.usd : 0;
      const used = b.tokens ? fmt.num(b.used_tokens) + " / " + fmt.num(b.tokens) + " tokens"
        : b.usd ? "$" + (b.used_usd || 0).toFixed(2) + " / $" + b.usd.toFixed(2) : (b.exempt ? "exempt" : "—");
      rows.push([b.scope + " " + (b.subject || "all"), b.window, used,
        el("div", {class: "bar " + (share > 0.9 ? "bad" : share > 0.75 ? "warn" : "")}, el("div", {style: `width:${Math.min(100, Math.round(share * 100))}%`})), fmt.until(b.resets_at)]);
    }
    if (!rows.length) return el("p", {class: "dim", id: "no-budgets", text: "No budget is configured (HERMES_BUDGETS), so nothing is limited."});
    return C.table(["budget", "window", "used", "", "resets"], rows);
  }
  C.register("usage", {nav: 7, title: "Usage", async render(box, route) {
    const days = route.query.get("days") || "1";
    const usage = await C.get("/agent/console/usage?days=" + encodeURIComponent(days));
    box.append(el("h1", {text: "Usage and budgets"}));
    box.append(el("div", {class: "buttons"}, ["1", "7"].map((d) => el("a", {class: "button" + (d === days ? "" : " secondary"), href: "#/usage?days=" + d, text: d === "1" ? "today" : "7 days"}))));
    box.append(el("div", {class: "cols"}, C.panel("Tokens by user", bars(usage.user, "users")), C.panel("Tokens by channel", bars(usage.channel, "channels")),
      C.panel("Tokens by model", bars(usage.model, "models"))));
    box.append(C.panel("Budgets", await budgets(usage)));
  }});
})();
