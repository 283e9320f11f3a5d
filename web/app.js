// The web face's page. Every text a session holds is put in with textContent, never as markup;
// every word of it comes from the server (as the monitor words it): the page only places it.
// Each request and session keeps its element while the page is live, and only its texts are
// redrawn, so what you type into one (a reason, a message) stays as the state changes around it.
//
// One stream for all of a browser's pages: a browser keeps at most six connections to a server
// over HTTP/1.1, and a stream holds one, so a seventh page (and every answer from the first six)
// would wait forever. The page that holds the lock (Web Locks) opens the stream and hands each
// state to the others (a BroadcastChannel); when it closes, another takes the lock and the
// stream. Where a browser has no locks (plain HTTP off loopback), each page has its own.
"use strict";
let csrf = "";
let readOnly = true;
let calls = [];
let opened = null;  // the session whose page is open
let stream = null;
const shared = "BroadcastChannel" in window ? new BroadcastChannel("procession-state") : null;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function notice(text) { document.getElementById("notice").textContent = text || ""; }

async function post(path, body) {
  const response = await fetch(path, {method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-CSRF": csrf}, body: JSON.stringify(body)});
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function button(label, cls, action) {
  const b = el("button", label, cls);
  b.onclick = async () => { try { notice(await action()); } catch (e) { notice(e.message); } };
  return b;
}

// A list whose items keep their element by key: `make` builds an item's controls once, `fill`
// redraws its texts into its `.texts` part on every state.
function keep(list, items, key, make, fill) {
  const old = new Map([...list.children].map((node) => [node.dataset.key, node]));
  const nodes = items.map((item) => {
    let node = old.get(String(key(item)));
    if (!node) {
      node = el("li");
      node.dataset.key = String(key(item));
      node.append(el("div", undefined, "texts"));
      make(node, item);
    }
    node.querySelector(".texts").replaceChildren(...fill(item));
    return node;
  });
  for (const [k, node] of old) if (!nodes.includes(node)) node.remove();
  nodes.forEach((node, i) => { if (list.children[i] !== node) list.insertBefore(node, list.children[i] || null); });
}

function requestControls(li, r) {
  li.dataset.request = r.id;
  li.id = `request-${r.id}`;
  if (readOnly) return;
  const why = el("input");
  why.type = "text";
  why.placeholder = "why (for a deny): the agent is told";
  const answer = (how) => async () => {
    await post("/api/answer", {request: r.id, answer: how, why: why.value});
    return `request ${r.id}: ${how}`;
  };
  const always = button("Allow always", "allow", answer("always"));
  always.title = `from now on, for this session: ${r.rule}`;
  li.append(button("Allow once", "allow", answer("allow")), always, button("Deny", "deny", answer("deny")), why);
}

function requestTexts(r) {
  return [el("div", r.about, "meta"), el("div", r.tool, "tool"), el("div", r.input, "input"),
          el("div", `Allow always makes the rule ${r.rule}`, "meta")];
}

function cellsOf(s) {
  const row = el("div", undefined, "cells");
  for (const [title, parts] of s.cells) {
    const cell = el("span", undefined, "cell");
    cell.append(el("span", `${title} `, "meta"));
    for (const [text, style] of parts) cell.append(el("span", text, style));
    row.append(cell);
  }
  return row;
}

function sessionTexts(s) {
  const name = el("a", `${s.id} ${s.name}`, "name");
  name.href = `#session-${s.id}`;
  return [name, cellsOf(s)];
}

async function detail() {
  const box = document.getElementById("detail");
  let d = null;
  if (opened !== null) {
    const response = await fetch(`/api/session?sid=${opened}`, {credentials: "same-origin"});
    d = response.ok ? await response.json() : null;
  }
  box.hidden = d === null;
  if (d === null) return;
  document.getElementById("detail-title").textContent = d.title;
  document.getElementById("detail-state").textContent = d.state;
  document.getElementById("detail-run").textContent = d.run || "no run yet";
  document.getElementById("detail-output").textContent = d.output;
  document.getElementById("detail-messages").textContent = d.messages.join("\n");
  const controls = document.getElementById("detail-calls");
  if (controls.dataset.sid === String(d.sid)) return;
  controls.dataset.sid = String(d.sid);
  controls.replaceChildren();
  if (readOnly) return;
  const text = el("input");
  text.type = "text";
  text.placeholder = "a message to this session";
  controls.append(text, button("Send", "", async () => {
    await post("/api/call", {sid: d.sid, call: "send", text: text.value});
    text.value = "";
    return `session ${d.sid}: sent`;
  }));
  for (const c of calls) {
    const b = button(c.call, c.confirm ? "deny" : "", async () => {
      if (c.confirm && !window.confirm(`${c.call} session ${d.sid}: ${c.summary}?`)) return "";
      await post("/api/call", {sid: d.sid, call: c.call});
      return `session ${d.sid}: ${c.call}`;
    });
    b.title = c.summary;
    controls.append(b);
  }
}

function show(state) {
  csrf = state.csrf;
  readOnly = state.device.read_only;
  calls = state.calls;
  document.getElementById("device").textContent = `${state.device.name}${readOnly ? " (read only)" : ""}`;
  keep(document.getElementById("requests"), state.requests, (r) => `r${r.id}`, requestControls, requestTexts);
  document.getElementById("nothing").hidden = state.requests.length > 0;
  const failing = state.sessions.filter((s) => state.failing.includes(s.id));
  keep(document.getElementById("failing"), failing, (s) => `f${s.id}`, () => {}, sessionTexts);
  keep(document.getElementById("finished"), state.finished, (f) => f.text, () => {}, (f) => [el("span", f.text)]);
  document.getElementById("finished-box").hidden = state.finished.length === 0;
  keep(document.getElementById("sessions"), state.sessions, (s) => `s${s.id}`,
       (li, s) => { li.dataset.session = s.id; }, sessionTexts);
  detail();
  const wanted = document.getElementById(location.hash.slice(1));
  if (wanted && !wanted.dataset.shown) { wanted.dataset.shown = "1"; wanted.classList.add("wanted"); wanted.scrollIntoView(); }
}

function received(message) {
  if (message.state) { document.getElementById("live").textContent = "live"; show(message.state); }
  if (message.revoked) { if (stream) stream.close(); notice(message.revoked); }
}

function listen() {
  // this page's own stream; with `share`, the other pages are handed what it hears
  const tell = (message) => { received(message); if (shared && navigator.locks) shared.postMessage(message); };
  stream = new EventSource("/api/events");
  stream.addEventListener("state", (e) => tell({state: JSON.parse(e.data)}));
  stream.addEventListener("revoked", () => tell({revoked: "this device was revoked"}));
  stream.onerror = async () => {
    document.getElementById("live").textContent = "reconnecting";
    const response = await fetch("/api/state", {credentials: "same-origin"});
    if (response.status === 401) tell({revoked: (await response.json()).error});
  };
}

async function watch() {
  if (shared && navigator.locks) {
    shared.onmessage = (e) => received(e.data);
    const response = await fetch("/api/state", {credentials: "same-origin"});  // drawn now, not at the next state
    if (response.ok) received({state: await response.json()});
    else if (response.status === 401) received({revoked: (await response.json()).error});
    navigator.locks.request("procession-stream", () => new Promise(listen));  // held while this page lives
  } else {
    listen();
  }
}

function follow() {
  const match = /^#session-(\d+)$/.exec(location.hash);
  opened = match ? Number(match[1]) : null;
  detail();
}

async function pair() {
  const link = location.hash.slice(1);
  history.replaceState(null, "", "/pair");  // the link's secret leaves the address bar
  document.getElementById("pairing").hidden = false;
  document.getElementById("needs").hidden = true;
  document.getElementById("pair-button").onclick = async () => {
    try { await post("/api/pair", {link}); location.replace("/"); } catch (e) { notice(e.message); }
  };
}

if (location.pathname === "/pair") {
  pair();
} else {
  document.getElementById("seen").onclick = async () => {
    try { await post("/api/looked", {}); } catch (e) { notice(e.message); }
  };
  document.getElementById("close").onclick = () => { history.pushState(null, "", "/"); follow(); };
  window.addEventListener("hashchange", follow);
  follow();
  watch();
}
