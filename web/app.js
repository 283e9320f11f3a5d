// The web face's page: every text a session holds is put in with textContent, never as markup.
"use strict";
let csrf = "";
let readOnly = true;

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

function requestItem(r) {
  const li = el("li");
  li.dataset.request = r.id;
  li.append(el("div", `session ${r.sid} (${r.session}) · agent ${r.agent}`, "meta"));
  li.append(el("div", `${r.tool}: ${r.summary}`, "tool"));
  li.append(el("div", r.input, "input"));
  if (!readOnly) {
    const why = el("input");
    why.type = "text";
    why.placeholder = "why (for a deny): the agent is told";
    const answer = (how) => async () => {
      try { await post("/api/answer", {request: r.id, answer: how, why: why.value}); notice(`request ${r.id}: ${how}`); }
      catch (e) { notice(e.message); }
    };
    const once = el("button", "Allow once", "allow"); once.onclick = answer("allow");
    const always = el("button", "Allow always", "allow");
    always.title = `from now on, for this session: ${r.tool} ${r.always}`;
    always.onclick = answer("always");
    const deny = el("button", "Deny", "deny"); deny.onclick = answer("deny");
    li.append(el("div", `Allow always makes the rule: ${r.tool} ${r.always}`, "meta"), once, always, deny, why);
  }
  return li;
}

function sessionItem(s, failing) {
  const li = el("li");
  li.dataset.session = s.id;
  const head = el("div");
  head.append(el("span", `${s.id} ${s.name} `), el("span", s.state, `state-${s.state}`));
  if (failing) head.append(el("span", " failing", "failed"));
  li.append(head, el("div", `agent ${s.agent} · context ${s.context}/${s.window}` + (s.last ? ` · last run ${s.last}` : ""), "meta"));
  if (s.status) li.append(el("div", s.status, "meta"));
  if (!readOnly) {
    const text = el("input");
    text.type = "text";
    text.placeholder = "a message to this session";
    const send = el("button", "Send");
    send.onclick = async () => {
      try { await post("/api/call", {sid: s.id, call: "send", text: text.value}); text.value = ""; notice(`session ${s.id}: sent`); }
      catch (e) { notice(e.message); }
    };
    li.append(text, send);
    for (const call of ["activate", "suspend", "resume", "interrupt"]) {
      const b = el("button", call);
      b.onclick = async () => {
        try { await post("/api/call", {sid: s.id, call}); notice(`session ${s.id}: ${call}`); } catch (e) { notice(e.message); }
      };
      li.append(b);
    }
  }
  return li;
}

function show(state) {
  csrf = state.csrf;
  readOnly = state.device.read_only;
  document.getElementById("device").textContent = `${state.device.name}${readOnly ? " (read only)" : ""}`;
  const list = document.getElementById("requests");
  list.replaceChildren(...state.requests.map(requestItem));
  document.getElementById("nothing").hidden = state.requests.length > 0;
  document.getElementById("sessions").replaceChildren(
    ...state.sessions.map((s) => sessionItem(s, state.failing.includes(s.id))));
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

function watch() {
  const stream = new EventSource("/api/events");
  stream.addEventListener("state", (e) => { document.getElementById("live").textContent = "live"; show(JSON.parse(e.data)); });
  stream.addEventListener("revoked", () => { stream.close(); notice("this device was revoked"); });
  stream.onerror = async () => {
    document.getElementById("live").textContent = "reconnecting";
    const response = await fetch("/api/state", {credentials: "same-origin"});
    if (response.status === 401) { stream.close(); notice((await response.json()).error); }
  };
}

if (location.pathname === "/pair") pair(); else watch();
