// The web page at `/`: one self-contained HTML document (no external resources; the server's
// Content-Security- Policy forbids them). It talks to the same JSON API as any client: submit, list, live
// progress from GET /v1/events (read with fetch so the bearer key can be sent), cancel, delete, play and
// download.
// `/#selftest` drives the page itself (fill the form, submit, watch, cancel, play) and writes PASS/FAIL into
// #selftest; the test suite loads it in headless Chromium.
#include "serve/http.h"

namespace h3::serve {

const char* web_page_html() {
  return R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>h3 serve</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
header{background:#222;color:#eee;padding:10px 16px;display:flex;gap:16px;align-items:center}
header b{font-size:16px} #health{padding:2px 8px;border-radius:8px;background:#666}
#health.ok{background:#2a7a2a} #health.bad{background:#a33}
main{display:grid;grid-template-columns:360px 1fr;gap:16px;padding:16px}
section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:12px}
label{display:block;margin:8px 0 2px;font-size:12px;color:#555}
textarea,input,select{width:100%;box-sizing:border-box;padding:6px;font:inherit}
button{padding:4px 10px;margin:2px;cursor:pointer}
table{width:100%;border-collapse:collapse} td,th{padding:4px 6px;border-bottom:1px solid #eee;text-align:left;font-size:13px}
.bar{background:#eee;height:8px;border-radius:4px;min-width:80px} .bar i{display:block;height:8px;background:#3a7bd5;border-radius:4px}
.err{color:#a33;font-size:12px} .muted{color:#888;font-size:12px} video{width:100%;margin-top:8px;background:#000}
</style></head><body>
<header><b>h3 serve</b><span id="health">...</span><span id="group" class="muted"></span>
<span style="flex:1"></span><input id="apikey" type="password" placeholder="API key (if required)" style="width:220px"></header>
<main>
<section>
<form id="form">
<label for="prompt">Prompt</label><textarea id="prompt" rows="5" required maxlength="16000"></textarea>
<label for="size">Size (W x H, empty = from aspect)</label><input id="size" placeholder="e.g. 1344x768">
<label for="aspect">Aspect</label><select id="aspect"><option>16:9</option><option>9:16</option><option>1:1</option><option>4:3</option><option>3:4</option></select>
<label for="seconds">Seconds (5 - 15)</label><input id="seconds" type="number" min="1" max="15" step="0.5" value="5">
<label for="steps">Steps</label><input id="steps" type="number" min="2" max="200" value="50">
<label for="seed">Seed (empty = random)</label><input id="seed" type="number" min="0">
<p><button id="submit" type="submit">Generate</button> <span id="formmsg" class="err"></span></p>
</form>
<div id="player"></div>
</section>
<section><div style="display:flex;align-items:center;gap:8px"><b>Jobs</b><span id="counts" class="muted"></span>
<span style="flex:1"></span><button id="refresh" type="button">Refresh</button></div>
<table><thead><tr><th>id</th><th>prompt</th><th>status</th><th>progress</th><th>ETA</th><th></th></tr></thead>
<tbody id="jobs"></tbody></table>
<pre id="selftest" class="muted"></pre></section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const jobs = new Map();
const keyInput = $("apikey");
keyInput.value = localStorage.getItem("h3_api_key") || "";
keyInput.onchange = () => { localStorage.setItem("h3_api_key", keyInput.value); start(); };
function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (keyInput.value) h["Authorization"] = "Bearer " + keyInput.value;
  return h;
}
async function api(method, path, body) {
  const r = await fetch(path, {method, headers: headers(body ? {"Content-Type": "application/json"} : {}),
                               body: body ? JSON.stringify(body) : undefined});
  const text = await r.text();
  let j = null;
  try { j = JSON.parse(text); } catch (e) { j = {error: {message: text}}; }
  if (!r.ok) throw new Error((j && j.error && j.error.message) || ("HTTP " + r.status));
  return j;
}
function text(s) { return document.createTextNode(s == null ? "" : String(s)); }
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e[k] = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.appendChild(typeof k === "object" ? k : text(k));
  return e;
}
function render() {
  const rows = [...jobs.values()].sort((a, b) => (b.created_at || 0) - (a.created_at || 0) || (a.id < b.id ? 1 : -1));
  const tb = $("jobs");
  tb.textContent = "";
  const counts = {};
  for (const j of rows) {
    counts[j.status] = (counts[j.status] || 0) + 1;
    const bar = el("div", {class: "bar"}, el("i", {style: "width:" + Math.max(0, Math.min(100, j.progress || 0)) + "%"}));
    const acts = el("td", {});
    if (j.status === "queued" || j.status === "in_progress")
      acts.appendChild(el("button", {type: "button", "data-act": "cancel", "data-id": j.id, onclick: () => cancel(j.id)}, "Cancel"));
    if (j.status === "completed") {
      acts.appendChild(el("button", {type: "button", "data-act": "play", "data-id": j.id, onclick: () => play(j.id)}, "Play"));
      acts.appendChild(el("button", {type: "button", "data-act": "download", "data-id": j.id, onclick: () => download(j.id)}, "Download"));
    }
    if (j.status !== "in_progress")
      acts.appendChild(el("button", {type: "button", "data-act": "delete", "data-id": j.id, onclick: () => del(j.id)}, "Delete"));
    const status = el("td", {class: "status"}, j.status + (j.phase && j.status === "in_progress" ? " (" + j.phase + ")" : "") +
                      (j.queue_position ? " #" + j.queue_position : ""));
    if (j.error && j.error.message) status.appendChild(el("div", {class: "err"}, j.error.message));
    tb.appendChild(el("tr", {"data-id": j.id, "data-status": j.status},
      el("td", {class: "muted"}, j.id.slice(6, 14)), el("td", {}, (j.prompt || "").slice(0, 60)), status,
      el("td", {}, bar, el("span", {class: "muted"}, (j.progress || 0).toFixed(0) + "%")),
      el("td", {}, j.eta_seconds != null ? j.eta_seconds.toFixed(0) + " s" : ""), acts));
  }
  $("counts").textContent = Object.entries(counts).map(([k, v]) => v + " " + k).join(", ");
}
function upsert(j) { if (j && j.id) { if (j.deleted) jobs.delete(j.id); else jobs.set(j.id, j); render(); } }
function showHealth(h) {
  $("health").textContent = h.status === "ok" ? "ready" : (h.group || "unavailable");
  $("health").className = h.status === "ok" ? "ok" : "bad";
  $("group").textContent = (h.ranks || "?") + " rank(s), group " + (h.group || "?") + (h.last_error ? " - " + h.last_error : "");
}
async function refresh() {
  try {
    const l = await api("GET", "/v1/videos?limit=100");
    jobs.clear();
    for (const j of l.data) jobs.set(j.id, j);
    render();
  } catch (e) { $("formmsg").textContent = e.message; }
  try {
    const r = await fetch("/health", {headers: headers()});
    showHealth(await r.json());
  } catch (e) { showHealth({status: "down"}); }
}
// Server-sent events read through fetch (EventSource cannot send the Authorization header).
async function stream(path, onEvent, signal) {
  const r = await fetch(path, {headers: headers({"Accept": "text/event-stream"}), signal});
  if (!r.ok || !r.body) throw new Error("events: HTTP " + r.status);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buf += dec.decode(value, {stream: true});
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, i); buf = buf.slice(i + 2);
      let type = "message", data = "";
      for (const line of frame.split("\n")) {
        if (line.startsWith("event: ")) type = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) { try { onEvent(type, JSON.parse(data)); } catch (e) {} }
    }
  }
}
let live = null;
function onEvent(type, d) { if (type === "video") upsert(d); else if (type === "group") showHealth(d); }
async function start() {
  if (live) live.abort();
  live = new AbortController();
  await refresh();
  if (location.hash === "#selftest") return;  // the self-test waits on finite streams only
  const ctl = live;
  for (;;) {
    try { await stream("/v1/events", onEvent, ctl.signal); } catch (e) { if (ctl.signal.aborted) return; }
    if (ctl.signal.aborted) return;
    await new Promise((r) => setTimeout(r, 2000));
    await refresh();
  }
}
function readForm() {
  const body = {prompt: $("prompt").value};
  const size = $("size").value.trim();
  if (size) body.size = size; else body.aspect = $("aspect").value;
  if ($("seconds").value) body.seconds = Number($("seconds").value);
  if ($("steps").value) body.steps = Number($("steps").value);
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  return body;
}
let lastSubmitted = null;
$("form").onsubmit = async (ev) => {
  ev.preventDefault();
  $("formmsg").textContent = "";
  try { const j = await api("POST", "/v1/videos", readForm()); lastSubmitted = j; upsert(j); }
  catch (e) { $("formmsg").textContent = e.message; lastSubmitted = {error: e.message}; }
};
$("refresh").onclick = refresh;
async function cancel(id) { try { upsert(await api("POST", "/v1/videos/" + id + "/cancel")); } catch (e) { $("formmsg").textContent = e.message; } }
async function del(id) { try { await api("DELETE", "/v1/videos/" + id); jobs.delete(id); render(); } catch (e) { $("formmsg").textContent = e.message; } }
async function blob(id) {
  const r = await fetch("/v1/videos/" + id + "/content", {headers: headers()});
  if (!r.ok) throw new Error("content: HTTP " + r.status);
  return await r.blob();
}
async function play(id) {
  try {
    const b = await blob(id);
    const v = el("video", {controls: "", autoplay: "", "data-id": id, "data-bytes": String(b.size)});
    v.src = URL.createObjectURL(b);
    $("player").textContent = "";
    $("player").appendChild(v);
    return b.size;
  } catch (e) { $("formmsg").textContent = e.message; return 0; }
}
async function download(id) {
  try {
    const b = await blob(id);
    const a = el("a", {href: URL.createObjectURL(b), download: id + ".mp4"});
    document.body.appendChild(a); a.click(); a.remove();
  } catch (e) { $("formmsg").textContent = e.message; }
}
// The self-test: the page's own controls, end to end.
async function selftest() {
  const out = [];
  const log = (s) => { out.push(s); $("selftest").textContent = out.join("\n"); };
  const submitVia = async (prompt) => {
    $("prompt").value = prompt; $("size").value = ""; $("seconds").value = "5"; $("steps").value = "6"; $("seed").value = "7";
    lastSubmitted = null;
    $("submit").click();
    for (let i = 0; i < 200 && !lastSubmitted; ++i) await api("GET", "/health").catch(() => 0);
    if (!lastSubmitted || !lastSubmitted.id) throw new Error("submit failed: " + JSON.stringify(lastSubmitted));
    return lastSubmitted.id;
  };
  // Headless Chromium's virtual time only stands still while a request is in flight, so wait by asking back to
  // back; then read the job's event stream (finite once the job is over) through the page's own SSE parser.
  const waitEnd = async (id) => {
    for (let i = 0; i < 100000; ++i) {
      const j = await api("GET", "/v1/videos/" + id);
      upsert(j);
      if (["completed", "failed", "cancelled"].includes(j.status)) break;
    }
    let last = null;
    await stream("/v1/videos/" + id + "/events", (t, d) => { if (t === "video") { last = d; upsert(d); } });
    return last;
  };
  try {
    const a = await submitVia("selftest: a red fox in the snow");
    log("submitted " + a);
    const b = await submitVia("selftest: to be cancelled");
    const btn = document.querySelector('button[data-act="cancel"][data-id="' + b + '"]');
    if (!btn) throw new Error("no cancel button for " + b);
    btn.click();
    const ea = await waitEnd(a), eb = await waitEnd(b);
    log("a: " + (ea && ea.status) + ", b: " + (eb && eb.status));
    await refresh();
    const row = document.querySelector('tr[data-id="' + a + '"]');
    const rowb = document.querySelector('tr[data-id="' + b + '"]');
    if (!row || row.getAttribute("data-status") !== "completed") throw new Error("row a not completed");
    if (!rowb || rowb.getAttribute("data-status") !== "cancelled") throw new Error("row b not cancelled");
    const playBtn = row.querySelector('button[data-act="play"]');
    if (!playBtn) throw new Error("no play button");
    const bytes = await play(a);
    const v = document.querySelector("#player video");
    if (!v || !(bytes > 0) || !v.src.startsWith("blob:")) throw new Error("player not loaded");
    log("played " + bytes + " bytes");
    log("SELFTEST PASS");
  } catch (e) { log("SELFTEST FAIL: " + e.message); }
}
start().then(() => { if (location.hash === "#selftest") return selftest(); });
</script></body></html>
)HTML";
}

}  // namespace h3::serve
