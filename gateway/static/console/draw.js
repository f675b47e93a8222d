// The console's pictures: time series (uPlot), a task's timeline (bars on a time axis), a
// workflow run's step graph (laid out by dagre, drawn as SVG) and a correlation id's message
// sequence (lifelines and arrows). Text goes into SVG as text nodes only.
"use strict";
(function () {
  const C = window.HermesConsole, el = C.el;
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = {accent: "#6ea8fe", ok: "#5dd39e", warn: "#f0b35e", bad: "#ef6b6b", dim: "#8b93a1", line: "#262a33", violet: "#b197fc"};
  const STATUS_FILL = {success: "#173528", answered: "#173528", failed: "#3a1d22", running: "#1b2a44",
    pending: "#22262f", skipped: "#22262f", cancelled: "#2c2c2c", timeout: "#3a1d22"};
  const STATUS_STROKE = {success: COLORS.ok, answered: COLORS.ok, failed: COLORS.bad, running: COLORS.accent,
    pending: COLORS.dim, skipped: COLORS.dim, cancelled: COLORS.dim, timeout: COLORS.bad};

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    for (const child of children) if (child) node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    return node;
  }
  const text = (x, y, value, attrs) => svg("text", {x, y, ...(attrs || {})}, String(value));
  const title = (value) => svg("title", {}, String(value));
  function arrowHead(id, color) {
    return svg("marker", {id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse"},
      svg("path", {d: "M0,0 L10,5 L0,10 z", fill: color}));
  }
  const widthOf = (box, fallback) => Math.max(280, Math.floor((box && box.clientWidth) || fallback || 600));

  // --- time series ---------------------------------------------------------------------
  // chart(title, times, [{label, values, color, scale?}], {yLabel}) -> a panel whose uPlot
  // is made once it is in the page (it needs the panel's width).
  C.chart = function (name, times, series, opts) {
    const holder = el("div", {class: "chart", "data-chart": name}, el("div", {class: "title", text: name}));
    const plot = el("div");
    holder.appendChild(plot);
    // Made once the panel is in the page (the page is built aside, then shown).
    const draw = (tries) => {
      if (!holder.isConnected) { if (tries < 120) requestAnimationFrame(() => draw(tries + 1)); return; }
      const axis = {stroke: COLORS.dim, grid: {stroke: COLORS.line, width: 1}, ticks: {stroke: COLORS.line}};
      const scales = {x: {time: true}};
      const axes = [axis, {...axis, size: 48}];
      if (series.some((s) => s.scale === "right")) {
        scales.right = {auto: true};
        axes.push({...axis, scale: "right", side: 1, grid: {show: false}, size: 48});
      }
      const bars = Math.max(1, series.filter((s) => s.bars).length);
      let seen = 0;
      const order = series.map((s) => (s.bars ? seen++ : 0));
      const made = new uPlot({
        width: widthOf(holder, 400) - 4, height: 150, scales, axes,
        cursor: {drag: {x: false, y: false}}, legend: {show: true},
        series: [{}, ...series.map((s, i) => ({label: s.label, stroke: s.color, width: s.bars ? 1 : 2, scale: s.scale || "y",
          fill: s.bars ? s.color + "aa" : undefined, spanGaps: false, points: {show: false},
          // Counts per minute as bars, each next series' narrower inside the one before (all
          // stay visible); rates and latencies as lines.
          paths: s.bars ? uPlot.paths.bars({size: [0.9 - 0.6 * (order[i] / bars), 40]}) : undefined}))],
        ...(opts || {}),
      }, [times, ...series.map((s) => s.values)], plot);
      holder.dataset.drawn = "true";
      const resize = () => { if (holder.isConnected) made.setSize({width: widthOf(holder, 400) - 4, height: 150}); else window.removeEventListener("resize", resize); };
      window.addEventListener("resize", resize);
    };
    requestAnimationFrame(() => draw(0));
    return holder;
  };

  // --- a task's timeline ------------------------------------------------------------------
  // Bars from the task's events: waiting in the queue, each model call, each tool call, a
  // wait for an approval or an answer, each delivery of its reply.
  C.bars = function (task, events) {
    const bars = [], open = {};
    let started = null;
    for (const e of events) {
      const at = e.timestamp, p = e.payload || {};
      switch (e.type) {
        case "AGENT_STARTED":
          if (started === null) { started = at; if (task.created_at && at - task.created_at > 0.001) bars.push({lane: "queue", start: task.created_at, end: at, label: "queued"}); }
          if (open.wait) { bars.push({...open.wait, end: at}); delete open.wait; }
          break;
        case "MODEL_CALLED":
          bars.push({lane: "model", start: at - (p.seconds || 0), end: at, label: (p.model || "model") + (p.ok ? "" : " ✗ " + (p.error || "")),
            detail: (p.prompt_tokens || 0) + " + " + (p.completion_tokens || 0) + " tokens", bad: !p.ok});
          break;
        case "TOOL_STARTED": open["tool:" + p.call_id] = {lane: "tools", start: at, label: p.tool}; break;
        case "TOOL_FINISHED": case "TOOL_ERROR": {
          const begun = open["tool:" + p.call_id];
          delete open["tool:" + p.call_id];
          bars.push({lane: "tools", start: begun ? begun.start : at - (p.seconds || 0), end: at, label: p.tool + (e.type === "TOOL_ERROR" ? " ✗" : ""),
            detail: e.type === "TOOL_ERROR" ? p.message : "", bad: e.type === "TOOL_ERROR"});
          break;
        }
        case "HUMAN_CONFIRM_REQUIRED":
          for (const [key, bar] of Object.entries(open)) if (key.startsWith("tool:") && bar.label === p.tool_name) delete open[key];
          open.wait = {lane: "person", start: at, label: "approval of " + p.tool_name, warn: true};
          break;
        case "HUMAN_CONFIRM_RESOLVED":
          if (open.wait) { bars.push({...open.wait, end: at, label: open.wait.label + (p.approved ? " ✓ " : " ✗ ") + (p.by || "")}); delete open.wait; }
          break;
        case "ASK_USER": open.wait = {lane: "person", start: at, label: "question", warn: true}; break;
        case "REPLY_DELIVERED": case "REPLY_UNDELIVERABLE":
          bars.push({lane: "delivery", start: at - (p.seconds || 0), end: at, label: (p.kind || "reply") + " → " + (p.channel || ""),
            detail: e.type === "REPLY_UNDELIVERABLE" ? "dead letter: " + (p.reason || "") : (p.attempts || 1) + " attempt(s)", bad: e.type === "REPLY_UNDELIVERABLE"});
          break;
        default:
      }
    }
    const now = Date.now() / 1000;
    if (open.wait) bars.push({...open.wait, end: now, label: open.wait.label + " (waiting)"});
    for (const [key, bar] of Object.entries(open)) if (key.startsWith("tool:")) bars.push({...bar, end: now, label: bar.label + " (running)"});
    return bars;
  };
  C.timeline = function (task, events, boxWidth) {
    const bars = C.bars(task, events);
    const lanes = ["queue", "model", "tools", "person", "delivery"].filter((l) => bars.some((b) => b.lane === l));
    if (!bars.length) return el("p", {class: "dim", text: "No steps recorded for this task yet."});
    const t0 = Math.min(...bars.map((b) => b.start)), t1 = Math.max(...bars.map((b) => b.end), t0 + 0.001);
    const width = Math.max(boxWidth || 600, 320), left = 70, right = 14, row = 30, top = 24;
    const height = top + lanes.length * row + 26;
    const x = (t) => left + (t - t0) / (t1 - t0) * (width - left - right);
    const drawing = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "timeline of the task", class: "timeline"});
    lanes.forEach((lane, i) => {
      drawing.appendChild(text(6, top + i * row + 19, lane, {class: "dimtext"}));
      drawing.appendChild(svg("line", {x1: left, x2: width - right, y1: top + i * row + row, y2: top + i * row + row, stroke: COLORS.line}));
    });
    for (let i = 0; i <= 4; i++) {
      const t = t0 + (t1 - t0) * i / 4, tx = x(t);
      drawing.appendChild(svg("line", {x1: tx, x2: tx, y1: top - 4, y2: height - 22, stroke: COLORS.line, "stroke-dasharray": "2,3"}));
      drawing.appendChild(text(tx, height - 8, "+" + C.fmt.dur(t - t0), {class: "dimtext", "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle"}));
    }
    for (const bar of bars) {
      const i = lanes.indexOf(bar.lane), bx = x(bar.start), bw = Math.max(2, x(bar.end) - bx);
      const color = bar.bad ? COLORS.bad : bar.warn ? COLORS.warn : bar.lane === "model" ? COLORS.violet : bar.lane === "delivery" ? COLORS.ok : COLORS.accent;
      const g = svg("g", {class: "bar", "data-lane": bar.lane},
        title(`${bar.label}: ${C.fmt.dur(bar.end - bar.start)}${bar.detail ? " — " + bar.detail : ""}`),
        svg("rect", {x: bx, y: top + i * row + 6, width: bw, height: row - 12, rx: 3, fill: color, "fill-opacity": 0.85}));
      if (bw > 60) g.appendChild(text(bx + 4, top + i * row + 19, bar.label.slice(0, Math.floor(bw / 7)), {fill: "#0b0d12"}));
      drawing.appendChild(g);
    }
    return el("div", {class: "drawing", "data-drawing": "timeline"}, drawing);
  };

  // --- a workflow run's step graph -----------------------------------------------------------
  C.stepGraph = function (run, boxWidth) {
    const steps = run.steps || [];
    const graph = new dagre.graphlib.Graph();
    const narrow = (boxWidth || 800) < 600;
    graph.setGraph({rankdir: narrow ? "TB" : "LR", nodesep: 18, ranksep: 46, marginx: 12, marginy: 12});
    graph.setDefaultEdgeLabel(() => ({}));
    for (const step of steps) graph.setNode(step.id, {width: 170, height: 58});
    for (const step of steps) for (const need of step.needs || []) if (graph.hasNode(need)) graph.setEdge(need, step.id);
    dagre.layout(graph);
    const size = graph.graph();
    const drawing = svg("svg", {width: Math.ceil(size.width), height: Math.ceil(size.height), role: "img", "aria-label": "step graph of the run", class: "graph"},
      svg("defs", {}, arrowHead("hermes-arrow", COLORS.dim)));
    for (const edge of graph.edges()) {
      const points = graph.edge(edge).points;
      drawing.appendChild(svg("path", {d: "M" + points.map((p) => p.x + "," + p.y).join(" L"), fill: "none", stroke: COLORS.dim, "stroke-width": 1.5, "marker-end": "url(#hermes-arrow)"}));
    }
    for (const step of steps) {
      const node = graph.node(step.id), x = node.x - node.width / 2, y = node.y - node.height / 2;
      const took = step.started_at && step.finished_at ? C.fmt.dur(step.finished_at - step.started_at) : step.status === "running" && step.started_at ? "running " + C.fmt.dur(Date.now() / 1000 - step.started_at) : "";
      drawing.appendChild(svg("g", {class: "step", "data-step": step.id, "data-status": step.status},
        title(`${step.id}: ${step.status}${step.agent ? " by " + step.agent : ""}${step.error_code ? " (" + step.error_code + ")" : ""}${step.reason ? " — " + step.reason : ""}`),
        svg("rect", {x, y, width: node.width, height: node.height, rx: 8, fill: STATUS_FILL[step.status] || "#22262f", stroke: STATUS_STROKE[step.status] || COLORS.dim, "stroke-width": 1.5}),
        text(x + 10, y + 18, step.id, {"font-weight": 600}),
        text(x + 10, y + 34, (step.agent || "—").slice(0, 24), {class: "dimtext"}),
        text(x + 10, y + 50, step.status + (took ? " · " + took : ""), {fill: STATUS_STROKE[step.status] || COLORS.dim})));
    }
    return el("div", {class: "drawing", "data-drawing": "graph"}, drawing);
  };

  // --- a correlation id's message sequence ---------------------------------------------------
  function receiverOf(hop) {
    if (hop.receiver_id) return hop.receiver_id;
    const subject = hop.subject || "";
    for (const prefix of ["reply.", "task.request.", "dead.", "log.", "tool.kept."]) if (subject.startsWith(prefix)) return prefix === "log." ? "(log)" : subject.slice(prefix.length);
    return "(" + hop.stream + ")";
  }
  function labelOf(hop) {
    const body = hop.body || {};
    const what = body.intent || body.status || body.event_type || body.tool_name || "";
    return (hop.type || hop.stream) + (what ? ": " + what : "");
  }
  // A long name (a workflow step's sender id) keeps its start and its end.
  const short = (name) => name.length > 24 ? name.slice(0, 9) + "…" + name.slice(-13) : name;
  C.sequence = function (hops) {
    if (!hops.length) return el("p", {class: "dim", text: "No message carried this correlation id."});
    const names = [];
    for (const hop of hops) for (const who of [hop.sender_id || "(unknown)", receiverOf(hop)]) if (!names.includes(who)) names.push(who);
    const col = 150, left = 84, top = 40, row = 34;
    const width = left + names.length * col, height = top + hops.length * row + 20;
    const cx = (name) => left + names.indexOf(name) * col + col / 2;
    const drawing = svg("svg", {width, height, role: "img", "aria-label": "message sequence", class: "sequence"},
      svg("defs", {}, arrowHead("hermes-seq", COLORS.accent), arrowHead("hermes-seq-bad", COLORS.bad)));
    for (const name of names) {
      drawing.appendChild(svg("g", {}, title(name), text(cx(name), 16, short(name), {"text-anchor": "middle", "font-weight": 600})));
      drawing.appendChild(svg("line", {x1: cx(name), x2: cx(name), y1: 24, y2: height - 8, stroke: COLORS.line, "stroke-width": 2}));
    }
    const first = hops[0].at;
    hops.forEach((hop, i) => {
      const y = top + i * row + 14, from = cx(hop.sender_id || "(unknown)"), to = cx(receiverOf(hop));
      const bad = hop.stream === "HMP_DEAD" || (hop.body && hop.body.status === "failed");
      drawing.appendChild(text(4, y + 4, "+" + C.fmt.dur(hop.at - first), {class: "dimtext"}));
      const g = svg("g", {class: "hop", "data-type": hop.type || ""}, title(`${C.fmt.time(hop.at)} ${hop.subject}\n${JSON.stringify(hop.body).slice(0, 400)}`));
      if (from === to) {
        g.appendChild(svg("path", {d: `M${from},${y} h30 v10 h-26`, fill: "none", stroke: bad ? COLORS.bad : COLORS.accent, "marker-end": `url(#${bad ? "hermes-seq-bad" : "hermes-seq"})`}));
      } else {
        g.appendChild(svg("line", {x1: from, x2: to, y1: y, y2: y, stroke: bad ? COLORS.bad : COLORS.accent, "stroke-width": 1.5, "marker-end": `url(#${bad ? "hermes-seq-bad" : "hermes-seq"})`}));
      }
      g.appendChild(text((from + to) / 2, y - 5, labelOf(hop).slice(0, 40), {"text-anchor": "middle"}));
      drawing.appendChild(g);
    });
    return el("div", {class: "drawing", "data-drawing": "sequence"}, drawing);
  };
})();
