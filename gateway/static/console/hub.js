// The console's hub pages (with HERMES_HUB): the live agents, the workflow runs, one run
// drawn as its step graph, and a correlation id replayed as a message sequence.
"use strict";
(function () {
  const C = window.HermesConsole, el = C.el, fmt = C.fmt;
  const boxWidth = () => Math.max(300, document.getElementById("main").clientWidth - 60);

  function load(percent) {
    const tone = percent > 80 ? "bad" : percent > 50 ? "warn" : "";
    return el("div", {class: "buttons"}, el("div", {class: "bar " + tone, style: "width:80px"}, el("div", {style: `width:${Math.round(percent)}%`})),
      el("span", {class: "small", text: Math.round(percent) + "%"}));
  }
  async function orOff(call) {
    try { return await call(); } catch (err) {
      if (err.status === 409) return null;
      throw err;
    }
  }

  C.register("hub", {nav: 8, title: "Hub", async render(box) {
    box.append(el("h1", {text: "Hub"}));
    const status = await C.get("/agent/status");
    const agents = status.hub === "off" ? null : await orOff(() => C.get("/agent/hub/agents"));
    if (agents === null) {
      box.append(C.panel("", el("p", {id: "hub-off", class: "dim", text: "The agent hub is off on this gateway (HERMES_HUB=true turns it on)."})));
      return;
    }
    const runs = await C.get("/agent/workflow-runs?limit=30");
    box.append(C.panel("Live agents (" + agents.agents.length + ")", C.table(["agent", "capabilities", "load", "copies#", "version", "heartbeat"],
      agents.agents.map((a) => [el("b", {text: a.agent_id}), el("span", {class: "buttons"}, a.capabilities.map((c) => el("span", {class: "chip", text: c}))),
        load(a.load_percent), fmt.num(a.copies), a.version, fmt.dur(a.heartbeat_age) + " ago"]), {empty: "No agent is live on the hub."})));
    box.append(C.panel("Workflow runs", C.table(["run", "workflow", "status", "steps", "started", "took"],
      runs.runs.map((r) => [C.link("#/run/" + encodeURIComponent(r.run_id), r.run_id), r.workflow_id + " v" + r.version, C.chip(r.status),
        el("span", {class: "buttons"}, r.steps.map((s) => C.chip(s.status))), fmt.time(r.created_at),
        r.finished_at ? fmt.dur(r.finished_at - r.created_at) : "—"]), {empty: "No workflow has run yet."})));
    box.append(C.panel("Replay a correlation id", el("form", {class: "filters", onsubmit: (e) => {
      e.preventDefault();
      const id = e.target.elements.correlation.value.trim();
      if (id) C.go("#/messages/" + encodeURIComponent(id));
    }}, el("label", {}, "correlation id", el("input", {name: "correlation", placeholder: "from a run, a log line or a task"})),
    el("button", {type: "submit", text: "Show the messages"}))));
  }});

  C.register("run", {title: "Workflow run", async render(box, route) {
    const run = await C.get("/agent/workflow-runs/" + encodeURIComponent(route.arg));
    box.append(el("h1", {}, "Run ", el("span", {class: "mono", text: run.run_id}), " ", C.chip(run.status)));
    box.append(el("p", {class: "small"}, run.workflow_id + " version " + run.version + " · started " + fmt.time(run.created_at) +
      (run.finished_at ? " · took " + fmt.dur(run.finished_at - run.created_at) : "") + " · ",
    C.link("#/messages/" + encodeURIComponent(run.correlation_id), "its messages →")));
    box.append(C.panel("Steps", C.stepGraph(run, boxWidth())));
    box.append(C.panel("", C.table(["step", "status", "agent", "took", "waits for", "why"],
      run.steps.map((s) => [s.id, C.chip(s.status), s.agent || "—", s.started_at && s.finished_at ? fmt.dur(s.finished_at - s.started_at) : "—",
        (s.needs || []).join(", ") || "—", s.reason || s.error_code || ""]))));
    box.append(C.panel("", el("details", {}, el("summary", {text: "The run's document"}), el("pre", {text: fmt.json(run.document)}))));
  }});

  C.register("messages", {title: "Messages", async render(box, route) {
    const data = await C.get("/agent/hub/messages?correlation_id=" + encodeURIComponent(route.arg));
    box.append(el("h1", {}, "Messages of ", el("span", {class: "mono", text: data.correlation_id})));
    box.append(C.panel("Who sent what to whom", C.sequence(data.messages)));
    const first = data.messages.length ? data.messages[0].at : 0;
    box.append(C.panel("", C.table(["at", "type", "from", "to", "subject", ""], data.messages.map((m) => ["+" + fmt.dur(m.at - first), m.type || m.stream,
      m.sender_id || "—", m.receiver_id || "—", el("span", {class: "mono", text: m.subject}),
      el("details", {}, el("summary", {text: "body"}), el("pre", {text: fmt.json(m.body)}))]), {empty: "No message carried this correlation id."})));
  }});
})();
