// The operator's console: who it speaks as (the gateway's local token, handed to this page
// by /webchat/session on a keyless gateway, or an admin key its person types in), the
// pages (registered by console-pages.js, console-steer.js and console-hub.js), the hash
// router, the live event stream (GET /agent/console/events), and small helpers. Every
// text from the API goes into the page as text, never as HTML.
"use strict";

const C = window.HermesConsole = {pages: {}, order: [], session: {token: "", user: "", role: ""}};
const KEY = "hermes.console.key";

// --- helpers ---------------------------------------------------------------------------
// el("div", {class: "x", text: "..", onclick: f}, child, "text", ...)
C.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
};
const el = C.el;
C.chip = (status) => el("span", {class: "chip " + String(status || ""), text: status || "—"});
C.link = (href, text) => el("a", {href, text});
C.count = (n, one, many) => n + " " + (n === 1 ? one : many);
C.fmt = {
  time(ts) {
    if (!ts) return "—";
    const d = new Date(ts * 1000);
    return d.toLocaleString(undefined, {month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit"});
  },
  clock(ts) { return ts ? new Date(ts * 1000).toLocaleTimeString(undefined, {hour: "2-digit", minute: "2-digit", second: "2-digit"}) : "—"; },
  dur(seconds) {
    if (seconds === null || seconds === undefined || isNaN(seconds)) return "—";
    const s = Math.abs(seconds);
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
    if (s < 86400) return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
    return Math.floor(s / 86400) + " d " + Math.round((s % 86400) / 3600) + " h";
  },
  ago(ts) { return ts ? C.fmt.dur(Date.now() / 1000 - ts) + " ago" : "—"; },
  until(ts) {
    if (!ts) return "—";
    const left = ts - Date.now() / 1000;
    return left >= 0 ? "in " + C.fmt.dur(left) : C.fmt.dur(-left) + " ago";
  },
  num(n) { return n === null || n === undefined ? "—" : Number(n).toLocaleString(); },
  pct(x) { return x === null || x === undefined ? "—" : (x * 100).toFixed(x < 0.1 ? 1 : 0) + "%"; },
  json(value) { return JSON.stringify(value, null, 2); },
};
C.table = function (headers, rows, {empty = "Nothing here yet."} = {}) {
  if (!rows.length) return el("p", {class: "dim", text: empty});
  const head = el("tr", {}, headers.map((h) => el("th", {class: h.endsWith("#") ? "num" : "", text: h.replace(/#$/, "")})));
  const body = rows.map((cells) => el("tr", {}, cells.map((cell, i) => {
    const numeric = headers[i] && headers[i].endsWith("#");
    return el("td", {class: numeric ? "num" : ""}, cell instanceof Node ? cell : String(cell ?? "—"));
  })));
  return el("div", {class: "scroll"}, el("table", {}, el("thead", {}, head), el("tbody", {}, body)));
};
C.panel = (title, ...children) => el("section", {class: "panel"}, title ? el("h2", {text: title}) : null, ...children);
C.toast = function (text, kind) {
  const box = document.getElementById("toast");
  box.textContent = text; box.className = kind || ""; box.hidden = false;
  clearTimeout(C.toast.timer);
  C.toast.timer = setTimeout(() => { box.hidden = true; }, 5000);
};

// --- the API -------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}
C.ApiError = ApiError;
C.api = async function (method, path, body) {
  const headers = {"X-Hermes-Client": "console"};
  if (C.session.token) headers["Authorization"] = "Bearer " + C.session.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const data = await response.json().catch(() => ({}));
  if (!response.ok && response.status !== 202) {
    throw new ApiError(response.status, data.error || data.message || response.statusText);
  }
  return data;
};
C.get = (path) => C.api("GET", path);
C.post = (path, body) => C.api("POST", path, body === undefined ? {} : body);

// --- who this page speaks as ---------------------------------------------------------------
async function connect() {
  const r = await fetch("/webchat/session").catch(() => null);
  const body = r && r.ok ? await r.json().catch(() => ({})) : {};
  C.session.token = body.token || sessionStorage.getItem(KEY) || "";
  if (!C.session.token) return signIn(body.needs_key ? "" : "This gateway did not hand this page its local token.");
  let who;
  try { who = await C.get("/agent/whoami"); } catch (err) {
    if (err.status === 401) { sessionStorage.removeItem(KEY); return signIn("That key was not accepted."); }
    return fatal(err.message);
  }
  C.session.user = who.user; C.session.role = who.role; C.session.admin = who.admin;
  document.getElementById("who").textContent = who.user + " · " + who.role;
  if (!who.admin) return forbidden(null);
  startLive();
  return true;
}
function signIn(why) {
  const main = document.getElementById("main");
  const form = document.getElementById("signin").content.cloneNode(true);
  form.querySelector(".why").textContent = why || "This gateway has HERMES_API_KEYS: sign in with an admin's key.";
  form.querySelector("form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = event.target.elements.key.value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY, key);
    boot();
  });
  main.replaceChildren(form);
  ready("signin");
  return false;
}
function forbidden(message) {
  const main = document.getElementById("main");
  const text = message || ("The key of " + JSON.stringify(C.session.user) + " has the role " +
    JSON.stringify(C.session.role) + ", which is not an admin's: the console needs an admin key.");
  main.replaceChildren(el("section", {class: "panel signin error-box", id: "forbidden"},
    el("h1", {text: "Not an admin"}), el("p", {text: text}),
    el("button", {class: "secondary", text: "Use another key", onclick: () => { sessionStorage.removeItem(KEY); C.session.token = ""; signIn(""); }})));
  ready("forbidden");
  return false;
}
function fatal(message) {
  document.getElementById("main").replaceChildren(el("section", {class: "panel error-box"}, el("p", {text: message})));
  ready("error");
  return false;
}
function ready(name) {
  document.documentElement.dataset.page = name;
  document.documentElement.dataset.ready = "true";
}

// --- pages and the router ------------------------------------------------------------------
// A page: {title, nav (its place in the menu; none: not in it), render(main, route) -> Promise}.
// route: {page, arg, query}.
C.register = function (name, page) {
  C.pages[name] = page;
  if (page.nav) { C.order.push(name); C.order.sort((a, b) => C.pages[a].nav - C.pages[b].nav); }
};
C.route = function () {
  const [path, search] = (location.hash.replace(/^#\/?/, "") || "overview").split("?");
  const [page, ...rest] = path.split("/");
  return {page: page || "overview", arg: rest.map(decodeURIComponent).join("/"), query: new URLSearchParams(search || "")};
};
C.go = (hash) => { location.hash = hash; };
let rendering = null, again = false, current = "";
C.render = async function () {
  if (rendering) { again = true; return rendering; }
  const route = C.route();
  const page = C.pages[route.page] || C.pages.overview;
  const main = document.getElementById("main");
  const fresh = current !== location.hash;
  current = location.hash;
  for (const link of document.querySelectorAll("#nav a")) link.classList.toggle("here", link.dataset.page === route.page);
  const kept = keepInputs(main);
  const box = el("div");
  rendering = (async () => {
    try {
      await page.render(box, route);
      main.replaceChildren(...box.childNodes);
      if (!fresh) restoreInputs(main, kept);
      document.title = (page.title || route.page) + " · hermes console";
      ready(route.page);
      if (fresh) window.scrollTo(0, 0);
    } catch (err) {
      if (err instanceof ApiError && err.status === 403) { forbidden(err.message); return; }
      if (err instanceof ApiError && err.status === 401) { sessionStorage.removeItem(KEY); signIn("The key is no longer accepted."); return; }
      main.replaceChildren(el("section", {class: "panel error-box"}, el("p", {text: "Could not load this page: " + err.message})));
      ready(route.page);
    }
  })();
  await rendering;
  rendering = null;
  if (again) { again = false; return C.render(); }
};
// What a person typed survives a refresh: inputs are matched by their name.
function keepInputs(root) {
  const kept = {focus: document.activeElement && root.contains(document.activeElement) ? document.activeElement.name : null, values: {}};
  for (const input of root.querySelectorAll("input[name], select[name], textarea[name]")) kept.values[input.name] = input.value;
  return kept;
}
function restoreInputs(root, kept) {
  for (const input of root.querySelectorAll("input[name], select[name], textarea[name]")) {
    if (input.name in kept.values) input.value = kept.values[input.name];
  }
  if (kept.focus) { const again = root.querySelector(`[name="${CSS.escape(kept.focus)}"]`); if (again) again.focus(); }
}

// --- live updates --------------------------------------------------------------------------
// One event stream; each event refreshes the page shown (at most one refresh at a time, the
// next one after it), and pages may look at the events themselves (the overview's feed).
C.listeners = [];
let source = null, refreshTimer = null;
function startLive() {
  if (source) source.close();
  const url = "/agent/console/events?access_token=" + encodeURIComponent(C.session.token);
  source = new EventSource(url);
  const badge = document.getElementById("live");
  source.onopen = () => { badge.className = "live on"; badge.title = "live updates: connected"; };
  source.onerror = () => { badge.className = "live off"; badge.title = "live updates: reconnecting"; };
  for (const kind of ["task", "audit", "dead_letter"]) {
    source.addEventListener(kind, (event) => {
      let data = {};
      try { data = JSON.parse(event.data); } catch (err) { return; }
      for (const listener of C.listeners) listener(kind, data);
      const page = C.pages[C.route().page];
      if (page && page.live === false) return;
      clearTimeout(refreshTimer);
      refreshTimer = setTimeout(() => C.render(), 300);
    });
  }
}

async function boot() {
  const nav = document.getElementById("nav");
  nav.replaceChildren(...C.order.map((name) => el("a", {href: "#/" + name, "data-page": name, text: C.pages[name].title})));
  if (await connect()) await C.render();
}
window.addEventListener("hashchange", () => { if (C.session.admin) C.render(); });
document.addEventListener("DOMContentLoaded", boot);
