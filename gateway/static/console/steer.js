// The console's steering pages: approvals (approve or reject as the console's user; the
// approver rules apply), schedules (pause, resume, run now, delete) and dead letters
// (redeliver, discard). Every action is the API's, audited with who did it.
"use strict";
(function () {
  const C = window.HermesConsole, el = C.el, fmt = C.fmt;

  // A button that does ``action`` once (disabled meanwhile) and says how it went; with
  // ``confirm``, the first click only asks "Sure?" on the same button.
  function act(label, cls, action, done, confirm) {
    const button = el("button", {class: cls, text: label, type: "button"});
    let armed = false;
    button.addEventListener("click", async () => {
      if (confirm && !armed) {
        armed = true; button.textContent = "Sure? " + label;
        setTimeout(() => { armed = false; button.textContent = label; }, 4000);
        return;
      }
      button.disabled = true;
      try {
        const said = await action();
        C.toast(done ? done(said) : label + ": done", "ok");
      } catch (err) {
        C.toast(label + ": " + err.message, "bad");
      } finally {
        button.disabled = false;
        C.render();
      }
    });
    return button;
  }
  const careful = (label, action, done) => act(label, "danger", action, done, true);

  C.register("approvals", {nav: 3, title: "Approvals", async render(box) {
    const [pending, decided] = await Promise.all([C.get("/agent/approvals?status=pending&limit=100"), C.get("/agent/approvals?status=decided&limit=50")]);
    box.append(el("h1", {text: "Approvals"}));
    const cards = pending.approvals.map((a) => {
      const decide = (approved) => async () => {
        const note = document.querySelector(`input[name="note-${CSS.escape(a.id)}"]`);
        return C.post("/agent/approvals/" + encodeURIComponent(a.id), {approved, note: note ? note.value : ""});
      };
      return el("div", {class: "card approval", "data-approval": a.id},
        el("div", {class: "head"}, el("b", {text: a.tool}), C.chip(a.status),
          el("span", {class: "dim small", text: "asked by " + (a.requester_name || a.requester) + " · " + fmt.ago(a.created_at) + " · expires " + fmt.until(a.expires_at)})),
        a.reason ? el("p", {class: "small", text: a.reason}) : null,
        el("pre", {text: fmt.json(a.arguments)}),
        el("p", {class: "small dim"}, "task ", C.link("#/task/" + a.task_id, a.task_id), " in ",
          C.link("#/conversation/" + encodeURIComponent(a.conversation_id), a.conversation_id)),
        el("div", {class: "buttons"},
          el("input", {name: "note-" + a.id, placeholder: "note (optional)", maxlength: 500, "aria-label": "note"}),
          act("Approve", "", decide(true), (r) => r.message || "Approved"),
          act("Reject", "secondary", decide(false), (r) => r.message || "Rejected")));
    });
    box.append(C.panel("Waiting (" + pending.approvals.length + ")", cards.length ? el("div", {}, cards) : el("p", {class: "dim", text: "Nothing waits for a decision."})));
    box.append(C.panel("Decided lately", C.table(["tool", "decision", "by", "when", "asked by", "task"],
      decided.approvals.map((a) => [a.tool, C.chip(a.status), a.decided_by || "—", fmt.time(a.decided_at), a.requester_name || a.requester,
        C.link("#/task/" + a.task_id, (a.task_id || "").slice(0, 10))]), {empty: "No approval was decided lately."})));
  }});

  function trigger(t) {
    if (t.cron) return "cron " + t.cron + (t.timezone ? " " + t.timezone : "");
    if (t.every) return "every " + fmt.dur(t.every);
    return "at " + t.at;
  }
  C.register("schedules", {nav: 4, title: "Schedules", async render(box) {
    const data = await C.get("/agent/schedules");
    box.append(el("h1", {text: "Schedules"}));
    const path = (job, action) => "/agent/schedules/" + encodeURIComponent(job.id) + (action ? "/" + action : "");
    box.append(C.panel(C.count(data.jobs.length, "scheduled job", "scheduled jobs") + ", by next run", C.table(["job", "when", "next run", "last run", "last outcome", "runs as", ""],
      data.jobs.map((job) => [el("span", {}, el("b", {text: job.name}), el("br"), el("span", {class: "dim mono", text: job.id})),
        trigger(job.trigger), job.paused ? C.chip("paused") : fmt.until(job.next_run_at),
        job.last_run ? el("span", {}, fmt.time(job.last_run.at), " ", C.link("#/task/" + job.last_run.task_id, "task")) : "never",
        C.chip(job.last_outcome || (job.last_run ? "forgotten" : "—")), job.run_as,
        el("div", {class: "buttons", "data-job": job.id},
          job.paused ? act("Resume", "", () => C.post(path(job, "resume")), () => "Resumed " + job.id)
            : act("Pause", "secondary", () => C.post(path(job, "pause")), () => "Paused " + job.id),
          act("Run now", "secondary", () => C.post(path(job, "run")), (r) => "Started task " + r.task_id),
          careful("Delete", () => C.api("DELETE", path(job)), () => "Deleted " + job.id))]),
      {empty: "No scheduled job. Create one with /schedule in a chat or POST /agent/schedules."})));
  }});

  C.register("dead-letters", {nav: 5, title: "Dead letters", async render(box) {
    const data = await C.get("/agent/dead-letters?limit=200");
    box.append(el("h1", {text: "Dead letters"}));
    box.append(C.panel(C.count(data.count, "reply", "replies") + " could not be delivered", C.table(["when", "channel", "conversation", "why", "what", ""],
      data.dead_letters.map((d) => [fmt.time(d.at), d.channel, d.conversation_id, el("span", {class: "wrap", text: d.reason}),
        el("details", {}, el("summary", {text: (d.text || "").slice(0, 40)}), el("pre", {text: d.text})),
        el("div", {class: "buttons", "data-letter": d.id},
          act("Redeliver", "", () => C.post("/agent/dead-letters/" + encodeURIComponent(d.id) + "/redeliver"),
            (r) => r.delivered ? "Delivered." : "Failed again: " + r.reason),
          careful("Discard", () => C.api("DELETE", "/agent/dead-letters/" + encodeURIComponent(d.id)), () => "Discarded."))]),
      {empty: "Every reply was delivered."})));
  }});
})();
