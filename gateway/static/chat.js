// The web chat: sends a message, follows the task's events (server-sent events), shows each
// step where it happened, approvals with their buttons, questions with their choices, and
// the answer rendered from Markdown (marked, then DOMPurify: only sanitised HTML enters the
// page). Files attached (attach.js) go with the message as multipart/form-data. After a
// reload it shows the conversation's recent messages (with the files each carried) and
// picks up any task that is still under way or waiting for a person.
"use strict";

const $ = (id) => document.getElementById(id);
const log = $("log"), form = $("form"), input = $("text"), send = $("send"), stopButton = $("stop");
const working = $("working");
const ENDED = ["answered", "failed", "limit", "invalid", "cancelled"];
const FAILED = ["failed", "limit", "invalid", "cancelled"];
const WELCOME = "Hi! I'm hermes. Ask me something; I'll show each step as I work.";

let conversation = localStorage.getItem("hermes.conversation") || newId();
localStorage.setItem("hermes.conversation", conversation);

function newId() { return (crypto.randomUUID ? crypto.randomUUID() : String(Date.now())).replace(/-/g, ""); }
// Who this page speaks as: the gateway's local token (handed to this page only, on a
// gateway without API keys), or a key its person typed in; the principal it proves names
// the conversations this page may see.
const session = {token: "", user: "", needsKey: false};
async function connect() {
  const r = await fetch("/webchat/session", {headers: {"X-Hermes-Client": "webchat"}}).catch(() => null);
  const body = r && r.ok ? await r.json().catch(() => ({})) : {};
  session.needsKey = !!body.needs_key;
  attach.setLimits(body.files);
  session.token = body.token || localStorage.getItem("hermes.token") || "";
  session.user = body.user || "";
  if (!session.user && session.token) {
    const who = await fetch("/agent/whoami", {headers: headers()}).catch(() => null);
    if (who && who.ok) session.user = (await who.json()).user || "";
  }
}
function conversationKey() { return "webchat:" + session.user + ":" + conversation; }
function token() { return session.token; }
function headers(json = true) {
  const h = {"X-Hermes-Client": "webchat"};
  if (json) h["Content-Type"] = "application/json";
  if (token()) h["Authorization"] = "Bearer " + token();
  return h;
}
function showConversation() { $("conv").textContent = "conversation " + conversation.slice(0, 8); }
function scrollDown() { log.scrollTop = log.scrollHeight; }

// --- rendering ---------------------------------------------------------------------------
// HTML a model writes is shown as text: only Markdown makes elements.
const escapeHtml = (t) => t.replace(/[&<>"']/g, (ch) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[ch]);
marked.use({gfm: true, breaks: true, renderer: {html: (token) => escapeHtml(token.text)}});
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
});
function markdown(text) { return DOMPurify.sanitize(marked.parse(text || ""), {USE_PROFILES: {html: true}}); }

function bubble(kind, text, {md = false, error = false} = {}) {
  const div = document.createElement("div");
  div.className = "msg " + kind + (error ? " error" : "");
  fill(div, text, md);
  log.appendChild(div); scrollDown();
  return div;
}
function fill(div, text, md) {
  div.classList.toggle("md", md); div.classList.toggle("plain", !md);
  if (md) div.innerHTML = markdown(text); else div.textContent = text;
}
// Steps go below whatever is last, so they read in the order they happened (a step after
// an approval comes after its bubble).
function stepsBox() {
  const last = log.lastElementChild;
  if (last && last.classList.contains("steps")) return last;
  const box = document.createElement("div"); box.className = "steps"; log.appendChild(box);
  return box;
}
function step(cls, text) {
  const d = document.createElement("div"); d.className = cls; d.textContent = text;
  stepsBox().appendChild(d); scrollDown();
}
// An answer (or what a failed task says): Markdown, or plain text styled as an error.
function answer(text, outcome) {
  const failed = FAILED.includes(outcome);
  return bubble("bot", text || "(no answer)", {md: !failed, error: failed});
}
function welcome() { bubble("bot", WELCOME); }
// A task continued after a restart or an outage may finish again with the same answer:
// shown once (an event carries at most 4000 characters of the text).
function answerKey(taskId, outcome, text) { return taskId + "\n" + outcome + "\n" + (text || "").slice(0, 4000); }
function brief(v) { const s = typeof v === "string" ? v : JSON.stringify(v); return s.length > 160 ? s.slice(0, 159) + "…" : s; }

// --- tasks this page follows -------------------------------------------------------------
// task id -> {status, es, draft}; "queued"/"running" keep the page busy.
const tasks = new Map();
const shown = new Set();      // answerKey of each answer shown
const approvals = new Map();  // approval id -> its bubble's button row

function busy() { return [...tasks.values()].some((t) => t.status === "queued" || t.status === "running"); }
function refresh() {
  const b = busy();
  working.hidden = !b; send.disabled = b; stopButton.hidden = !b;
}
function setStatus(taskId, status) {
  const t = tasks.get(taskId);
  if (t) { t.status = status; refresh(); }
}
function forget(taskId) {
  const t = tasks.get(taskId);
  if (t && t.es) t.es.close();
  tasks.delete(taskId); refresh();
}

// A gateway with API keys: the person gives theirs once (kept in this browser).
async function askForKey() {
  const t = prompt("This gateway needs an API key (HERMES_API_KEYS):");
  if (!t) return false;
  localStorage.setItem("hermes.token", t);
  await connect();
  return true;
}

// Sends a message (and the files attached to it: a multipart body).
async function ask(text, files = []) {
  if (session.needsKey && !token() && !(await askForKey())) { attach.putBack(files); return; }
  const mine = bubble("user", text);
  if (files.length) mine.appendChild(attach.chips(files.map(attach.describe)));
  scrollDown();
  send.disabled = true;
  let body = {}, r;
  try {
    let sent;
    if (files.length) {
      sent = new FormData();
      sent.append("text", text); sent.append("conversation_id", conversation);
      for (const f of files) sent.append("file", f.file, f.file.name);
    } else sent = JSON.stringify({text: text, conversation_id: conversation});
    r = await fetch("/agent/run-async", {method: "POST", headers: headers(!files.length), body: sent});
    body = await r.json().catch(() => ({}));
  } catch (e) {
    attach.putBack(files);
    bubble("bot", "Could not reach the gateway: " + e, {error: true}); refresh(); return;
  }
  if (r.status === 401) {
    localStorage.removeItem("hermes.token"); session.token = "";
    if (await askForKey()) { mine.remove(); return ask(text, files); }
  }
  if (!r.ok) {
    attach.putBack(files);  // refused (a limit): back in the tray, to send again without it
    bubble("bot", "Error: " + (body.error || r.status), {error: true}); refresh(); return;
  }
  if (body.status === "command") {  // answered at once (/help, /status, /reset, /stop ...)
    bubble("bot", body.text || "", {md: true});
    refresh(); return;
  }
  follow(body.task_id, "queued");
  watchStart(body.task_id);
}

// A reply to a question continues the task that asked it: the new id only points there.
async function watchStart(taskId) {
  for (let wait = 250; tasks.has(taskId) && tasks.get(taskId).status === "queued"; wait = Math.min(wait * 2, 2000)) {
    await new Promise((done) => setTimeout(done, wait));
    const r = await fetch("/agent/tasks/" + taskId, {headers: headers()}).catch(() => null);
    if (!r || !r.ok) continue;
    const view = await r.json();
    if (view.continued_in) { forget(taskId); setStatus(view.continued_in, "running"); return; }
    if (view.status !== "queued" && tasks.has(taskId) && tasks.get(taskId).status === "queued") setStatus(taskId, "running");
  }
}

function follow(taskId, status) {
  if (tasks.has(taskId)) return;
  const q = token() ? "?access_token=" + encodeURIComponent(token()) : "";
  const es = new EventSource("/agent/tasks/" + encodeURIComponent(taskId) + "/events" + q);
  const task = {status: status, es: es, draft: null};
  tasks.set(taskId, task); refresh();
  const on = (type, fn) => es.addEventListener(type, (e) => fn(JSON.parse(e.data).payload || {}));
  const undraft = () => { if (task.draft) { task.draft.remove(); task.draft = null; } };
  // A resumed or recovered run writes its answer again from the start: so does its draft.
  on("AGENT_STARTED", (p) => { if (p.resumed) undraft(); setStatus(taskId, "running"); });
  // What the person is told about the files (a refusal naming its limit, "heard: ...").
  on("FILES_RECEIVED", (p) => (p.notices || []).forEach((n) => step(/^heard/.test(n) ? "ok" : "error", n)));
  on("MODEL_DELTA", (p) => {
    if (!p.text) return;
    if (!task.draft) { task.draft = bubble("bot draft", ""); task.draft.dataset.text = ""; }
    task.draft.dataset.text += p.text; fill(task.draft, task.draft.dataset.text, true); scrollDown();
  });
  on("MODEL_RETRY", undraft);
  on("MODEL_FALLBACK", (p) => { undraft(); step("", "switched model to " + p.to); });
  on("PLANNER_DECISION", (p) => {
    if (p.type === "tool_call") {
      // Text the model wrote before calling a tool is a step, not the answer.
      if (task.draft) { const said = task.draft.dataset.text; undraft(); step("", said); }
      step("tool", "→ " + p.tool_name + " " + brief(p.arguments));
    } else if (p.type === "invalid") { undraft(); step("error", "✗ unusable model output: " + p.reason); }
  });
  on("TOOL_PROGRESS", (p) => step("", "… " + (p.tool || "") + " " + brief(p.message || p.progress || "")));
  on("TOOL_FINISHED", (p) => step("ok", "✓ " + p.tool + " " + brief(p.output || "")));
  on("TOOL_ATTACHMENT", (p) => attachment(taskId, p));
  on("TOOL_ERROR", (p) => step("error", "✗ " + p.tool + ": " + p.message));
  on("PLAN_UPDATED", (p) => step("", "plan: " + brief(p.plan)));
  on("BUDGET_WARNING", (p) => step("error", p.text || "a budget is nearly used up"));
  on("HUMAN_CONFIRM_REQUIRED", (p) => { undraft(); approval(taskId, p); });
  on("HUMAN_CONFIRM_RESOLVED", (p) => {
    resolved(p);
    if (p.approved) step("ok", "✓ approved by " + p.by + (p.note ? ": " + p.note : ""));
    else step("error", "✗ " + p.tool + " was not run: rejected by " + p.by + (p.note ? ": " + p.note : ""));
    setStatus(taskId, "running");
  });
  on("AGENT_FINISHED", (p) => {
    undraft();
    if (p.outcome === "awaiting_approval") { setStatus(taskId, p.outcome); return; }
    const key = answerKey(taskId, p.outcome, p.text);
    if (!shown.has(key)) {
      shown.add(key);
      const b = answer(p.text, p.outcome);
      if (p.outcome === "asked_user") choices(b, taskId);
    }
    if (ENDED.includes(p.outcome)) forget(taskId); else setStatus(taskId, p.outcome);
  });
  es.onerror = () => {
    if (es.readyState !== EventSource.CLOSED || !tasks.has(taskId)) return;
    forget(taskId);
    step("error", "lost the task's event stream; reload the page to see how it ended");
  };
}

// A file a tool made (an MCP tool's image): fetched with the API key, shown as an image
// when it is one, else offered as a download.
async function attachment(taskId, p) {
  if (!p.path) { step("", "📎 " + p.name + " (not kept: over the sandbox quota)"); return; }
  const box = stepsBox();
  try {
    const r = await fetch("/agent/tasks/" + taskId + "/attachments/" + encodeURIComponent(p.name), {headers: headers()});
    if (!r.ok) { step("error", "📎 " + p.name + ": " + r.status); return; }
    const url = URL.createObjectURL(await r.blob());
    if (/^image\/(png|jpeg|gif|webp)$/.test(p.mime_type)) {
      const img = document.createElement("img"); img.className = "attachment";
      img.alt = p.name; img.src = url; box.appendChild(img);
    } else {
      const a = document.createElement("a"); a.href = url; a.download = p.name;
      a.textContent = "📎 " + p.name; box.appendChild(a);
    }
    scrollDown();
  } catch (e) { step("error", "📎 " + p.name + ": " + e); }
}

async function choices(b, taskId, question) {
  if (!question) {
    const r = await fetch("/agent/tasks/" + taskId, {headers: headers()}).catch(() => null);
    if (!r || !r.ok) return;
    question = (await r.json()).question;
  }
  const options = (question && question.choices) || [];
  if (!options.length) return;
  const div = document.createElement("div"); div.className = "choices";
  for (const c of options) {
    const button = document.createElement("button"); button.type = "button"; button.className = "secondary"; button.textContent = c;
    button.onclick = () => { div.remove(); ask(c); };
    div.appendChild(button);
  }
  b.appendChild(div); b.scrollIntoView({block: "end"});
}

function approval(taskId, p) {
  if (!p.id || approvals.has(p.id)) return;
  const b = document.createElement("div"); b.className = "msg bot approval";
  const title = document.createElement("div"); title.textContent = "Approval needed to run " + p.tool_name;
  const args = document.createElement("pre"); args.textContent = JSON.stringify(p.arguments, null, 1);
  const row = document.createElement("div"); row.className = "buttons";
  b.append(title, args, row);
  approvals.set(p.id, {row: row, callId: p.call_id});
  for (const [label, ok] of [["Approve", true], ["Reject", false]]) {
    const button = document.createElement("button"); button.type = "button"; button.textContent = label;
    if (!ok) button.className = "secondary";
    button.onclick = async () => {
      row.querySelectorAll("button").forEach((x) => x.disabled = true);
      let r, body = {};
      try {
        r = await fetch("/agent/approvals/" + p.id, {method: "POST", headers: headers(), body: JSON.stringify({approved: ok})});
        body = await r.json().catch(() => ({}));
      } catch (e) { body = {error: String(e)}; }
      if (r && r.ok) row.replaceWith(note(body.message || (ok ? "Approved." : "Rejected.")));
      else { row.querySelectorAll("button").forEach((x) => x.disabled = false); row.after(note(body.error || ("error " + (r && r.status)), true)); }
    };
    row.appendChild(button);
  }
  log.appendChild(b); b.scrollIntoView({block: "end"});
}
function note(text, error) { const d = document.createElement("div"); d.className = "note" + (error ? " error" : ""); d.textContent = text; return d; }
// Decided (here, in another tab, or in Slack): the buttons go.
function resolved(p) {
  for (const a of approvals.values()) {
    if (a.callId === p.call_id && a.row.isConnected) a.row.replaceWith(note((p.approved ? "Approved by " : "Rejected by ") + p.by));
  }
}

// --- after a reload ----------------------------------------------------------------------
async function restore() {
  let body;
  if (!token()) { welcome(); return; }
  try {
    const r = await fetch("/agent/conversations/" + encodeURIComponent(conversationKey()) + "/messages?limit=50", {headers: headers()});
    if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error || r.status);
    body = await r.json();
  } catch (e) {
    welcome();
    return;
  }
  if (!body.messages.length) welcome();
  for (const m of body.messages) {
    if (m.role === "user") {
      const b = bubble("user", m.text);
      if (m.files && m.files.length) b.appendChild(attach.chips(m.files, keptImage));
    }
    else {
      shown.add(answerKey(m.task_id, m.status, m.text));
      answer(m.text, m.status);
    }
  }
  for (const t of body.open_tasks) follow(t.task_id, t.status);
}

// An image sent earlier in this conversation, read back from its files (with the key).
async function keptImage(file) {
  const r = await fetch("/agent/conversations/" + encodeURIComponent(conversationKey()) + "/files/" +
    encodeURIComponent(file.name), {headers: headers(false)});
  return r.ok ? URL.createObjectURL(await r.blob()) : null;
}

// --- the form ----------------------------------------------------------------------------
form.addEventListener("submit", (e) => {
  e.preventDefault();
  const t = input.value.trim();
  if ((!t && !attach.has()) || document.documentElement.dataset.ready !== "true") return;
  if (send.disabled && !t.startsWith("/")) return;  // commands go while a task runs
  input.value = ""; grow(); ask(t, t.startsWith("/") ? [] : attach.take());
});
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
});
function grow() { input.style.height = "44px"; input.style.height = Math.min(input.scrollHeight + 2, 160) + "px"; }
input.addEventListener("input", grow);
stopButton.onclick = async () => {
  stopButton.disabled = true;
  for (const [id, t] of tasks) {
    if (t.status !== "queued" && t.status !== "running") continue;
    const r = await fetch("/agent/tasks/" + id + "/cancel", {method: "POST", headers: headers()}).catch(() => null);
    if (r && r.ok && (await r.json()).status === "cancelled") {  // dropped before it started
      bubble("bot", "Cancelled before it started.", {error: true}); forget(id);
    }
  }
  stopButton.disabled = false;
};
$("newchat").onclick = () => {
  for (const id of [...tasks.keys()]) forget(id);
  conversation = newId(); localStorage.setItem("hermes.conversation", conversation);
  log.innerHTML = ""; showConversation();
  welcome();
};
showConversation();
// Ready once the page knows who it speaks as and has shown the conversation so far: a
// message typed before then would land above the history.
send.disabled = true;
connect().then(restore).finally(() => {
  document.documentElement.dataset.ready = "true";
  refresh();
});
