// The web page at `/`: one self-contained HTML document (no external resources; the server's
// Content-Security-Policy forbids them). It talks to the same JSON API as any client (docs/api.md):
//   - a gallery of the jobs: poster thumbnails (content?variant=thumbnail) for finished videos, played inline (each
//     of a job's n videos); live progress per phase with ETA from GET /v1/events (read with fetch so the bearer key
//     can be sent), the latest preview picture on the running card (`preview` events); a queued job's place, its
//     priority and when it should start; cancel, delete, download;
//   - a form: prompt, size and duration, presets of steps with the time each would take (scaled from the last
//     job the server measured, GET /v1/models "measured"), seed, keyframes and references (drag and drop or
//     choose; sent as multipart/form-data like the OpenAI SDKs), LoRAs of the server's --lora-dir;
//   - defaults for the server's device (GET /v1/models "defaults": small and short on a CPU, 768p on a GPU) and
//     a banner when the models are procedural or the runner is fake.
// `/#selftest` drives the page itself (fill the form with a keyframe made on a canvas, submit, see a preview on the
// running card, cancel, watch, play, delete) and writes PASS/FAIL into #selftest; the test suite loads it in headless
// Chromium.
#include "serve/http.h"

namespace h3::serve {

namespace {

// The document as one constant (data, not code: the script inside it is the page's own).
constexpr const char kPage[] = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>h3 serve</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#f4f4f1;color:#222}
header{background:#222;color:#eee;padding:10px 16px;display:flex;gap:14px;align-items:center;flex-wrap:wrap}
header b{font-size:16px} #health{padding:2px 8px;border-radius:8px;background:#666}
#health.ok{background:#2a7a2a} #health.bad{background:#a33} #server{color:#bbb;font-size:12px}
#banner{background:#fff3cd;border-bottom:1px solid #e0c060;padding:8px 16px;font-size:13px}
main{display:grid;grid-template-columns:380px 1fr;gap:16px;padding:16px;align-items:start}
section{background:#fff;border:1px solid #ddd;border-radius:6px;padding:12px}
label{display:block;margin:8px 0 2px;font-size:12px;color:#555}
textarea,input,select{width:100%;box-sizing:border-box;padding:6px;font:inherit}
.row{display:flex;gap:8px} .row>div{flex:1}
button{padding:4px 10px;margin:2px;cursor:pointer}
.presets{display:flex;gap:6px} .presets label{flex:1;margin:0;border:1px solid #ccc;border-radius:6px;padding:6px;cursor:pointer;color:#222}
.presets input{width:auto;margin:0 4px 0 0} .presets .est{display:block;color:#777;font-size:11px}
.drop{border:2px dashed #bbb;border-radius:6px;padding:8px;text-align:center;color:#777;font-size:12px;cursor:pointer;min-height:34px}
.drop.over{border-color:#3a7bd5;background:#eef4fd} .drop img{max-width:100%;max-height:90px;display:block;margin:4px auto}
.files{list-style:none;padding:0;margin:4px 0;font-size:12px} .files li{display:flex;gap:6px;align-items:center}
.files select{width:auto;padding:2px}
.loras label{display:flex;gap:6px;align-items:center;margin:2px 0;color:#222} .loras input[type=checkbox]{width:auto}
.loras input[type=number]{width:70px}
#gallery{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:12px}
.card{border:1px solid #ddd;border-radius:6px;overflow:hidden;background:#fafafa;display:flex;flex-direction:column}
.poster{aspect-ratio:16/9;background:#222;display:flex;align-items:center;justify-content:center;color:#ccc;position:relative}
.poster img,.poster video{width:100%;height:100%;object-fit:contain;background:#000;display:block}
.poster img{cursor:pointer} .poster .play{position:absolute;font-size:32px;color:#fff;pointer-events:none;opacity:.8}
.poster img.preview{cursor:default;opacity:.92} .poster .pstep{position:absolute;left:6px;bottom:4px;font-size:11px;color:#fff;background:rgba(0,0,0,.55);padding:1px 5px;border-radius:3px}
.info{padding:8px;font-size:12px} .info .prompt{font-size:13px;margin-bottom:4px;word-break:break-word}
.phases{display:flex;gap:2px;margin:4px 0} .phases span{flex:1;font-size:10px;text-align:center;padding:2px 0;background:#e6e6e6;border-radius:3px;color:#666}
.phases span.done{background:#b9d7b9;color:#234} .phases span.current{background:#3a7bd5;color:#fff}
.bar{background:#e6e6e6;height:6px;border-radius:3px} .bar i{display:block;height:6px;background:#3a7bd5;border-radius:3px}
.err{color:#a33;font-size:12px} .muted{color:#888;font-size:12px} .status{font-weight:600}
@media (max-width:720px){main{grid-template-columns:minmax(0,1fr);padding:8px;gap:8px} #apikey{width:100%!important}
#gallery{grid-template-columns:minmax(0,1fr)}}
</style></head><body>
<header><b>h3 serve</b><span id="health">...</span><span id="server"></span>
<span style="flex:1"></span><input id="apikey" type="password" placeholder="API key (if required)" style="width:220px"></header>
<div id="banner" hidden></div>
<main>
<section>
<form id="form">
<label for="prompt">Prompt</label><textarea id="prompt" rows="4" required maxlength="16000"></textarea>
<div class="row"><div><label for="size">Size (W x H; empty = from aspect)</label><input id="size" list="sizes" placeholder="1344x768">
<datalist id="sizes"><option>1344x768</option><option>768x1344</option><option>1024x768</option><option>768x768</option>
<option>640x384</option><option>448x256</option><option>320x192</option></datalist></div>
<div><label for="aspect">Aspect</label><select id="aspect"><option>16:9</option><option>9:16</option><option>1:1</option><option>4:3</option><option>3:4</option></select></div></div>
<div class="row"><div><label for="seconds">Seconds (5 - 15)</label><input id="seconds" type="number" min="5" max="15" step="0.5" value="5"></div>
<div><label for="steps">Steps (2 - 200)</label><input id="steps" type="number" min="2" max="200" value="50"></div>
<div><label for="seed">Seed (empty = random)</label><input id="seed" type="number" min="0"></div></div>
<div class="row"><div><label for="n">Videos (1 - 8, seeds S, S+1, ...)</label><input id="n" type="number" min="1" max="8" value="1"></div>
<div><label for="priority">Priority (0 - 100, higher first)</label><input id="priority" type="number" min="0" max="100" value="0"></div></div>
<label>Preset (steps; the time from the last job this server ran)</label><div class="presets" id="presets"></div>
<div id="estimate" class="muted"></div>
<label>Keyframes (fl2va: the video starts / ends on these pictures)</label>
<div class="row"><div><div class="drop" id="drop-first" data-role="first_image">first frame: drop or choose an image</div><input type="file" id="file-first" accept="image/*" hidden></div>
<div><div class="drop" id="drop-last" data-role="last_image">last frame: drop or choose an image</div><input type="file" id="file-last" accept="image/*" hidden></div></div>
<label>References (ref2va: pictures, videos, sounds to draw from; not with keyframes)</label>
<div class="drop" id="drop-refs">drop or choose images, videos or audio files</div><input type="file" id="file-refs" multiple accept="image/*,video/*,audio/*" hidden>
<ul class="files" id="refs"></ul>
<label>LoRAs (from the server's --lora-dir)</label><div class="loras" id="loras"><span class="muted">...</span></div>
<p><button id="submit" type="submit">Generate</button> <span id="formmsg" class="err"></span></p>
</form>
</section>
<section><div style="display:flex;align-items:center;gap:8px"><b>Videos</b><span id="counts" class="muted"></span>
<span style="flex:1"></span><button id="refresh" type="button">Refresh</button></div>
<p id="empty" class="muted">No videos yet.</p><div id="gallery"></div>
<pre id="selftest" class="muted"></pre></section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const jobs = new Map(), thumbs = new Map(), players = new Map(), previews = new Map();
const PHASES = ["encode", "denoise", "decode_video", "decode_audio", "write"];
let model = null;
const keyInput = $("apikey");
keyInput.value = localStorage.getItem("h3_api_key") || "";
keyInput.onchange = () => { localStorage.setItem("h3_api_key", keyInput.value); start(); };
function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (keyInput.value) h["Authorization"] = "Bearer " + keyInput.value;
  return h;
}
// A body is JSON, or a FormData sent as multipart/form-data (the browser writes its boundary).
async function api(method, path, body) {
  const form = body instanceof FormData;
  const r = await fetch(path, {method, headers: headers(body && !form ? {"Content-Type": "application/json"} : {}),
                               body: form ? body : body ? JSON.stringify(body) : undefined});
  const text = await r.text();
  let j = null;
  try { j = JSON.parse(text); } catch (e) { j = {error: {message: text}}; }
  if (!r.ok) throw new Error((j && j.error && j.error.message) || ("HTTP " + r.status));
  return j;
}
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e[k] = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.appendChild(typeof k === "object" ? k : document.createTextNode(String(k)));
  return e;
}
function clock(s) {
  if (s == null || !isFinite(s)) return "";
  s = Math.round(s);
  return s >= 3600 ? Math.floor(s / 3600) + " h " + Math.floor(s / 60) % 60 + " min" :
         s >= 60 ? Math.floor(s / 60) + " min " + (s % 60) + " s" : s + " s";
}
// ---- the gallery
async function thumbnail(j) {
  if (thumbs.has(j.id)) return thumbs.get(j.id);
  const p = fetch("/v1/videos/" + j.id + "/content?variant=thumbnail", {headers: headers()})
    .then((r) => r.ok ? r.blob() : null).then((b) => b ? URL.createObjectURL(b) : null).catch(() => null);
  thumbs.set(j.id, p);
  return p;
}
// A `preview` event: the picture at its URL (the job's latest) shown on the running card.
async function showPreview(d) {
  try {
    const r = await fetch(d.url, {headers: headers()});
    if (!r.ok) return false;
    const b = await r.blob();
    const j = jobs.get(d.id);
    if (j && ["completed", "failed", "cancelled"].includes(j.status)) return false;  // over meanwhile: its poster shows
    const u = URL.createObjectURL(b);
    const old = previews.get(d.id);
    previews.set(d.id, {url: u, step: d.step, steps: d.steps});
    if (old) URL.revokeObjectURL(old.url);
    render();
    return true;
  } catch (e) { return false; }
}
function phaseBar(j) {
  const at = PHASES.indexOf(j.phase);
  return el("div", {class: "phases"}, ...PHASES.map((p, i) =>
    el("span", {"data-phase": p, class: j.status === "completed" || (at >= 0 && i < at) ? "done" : i === at ? "current" : ""},
       p.replace("decode_", "decode "))));
}
function card(j) {
  const poster = el("div", {class: "poster"});
  const pv = previews.get(j.id);
  if (players.has(j.id)) poster.appendChild(players.get(j.id));
  else if (j.status === "completed") {
    const img = el("img", {class: "thumb", alt: "poster of " + j.id, "data-id": j.id, onclick: () => play(j.id)});
    thumbnail(j).then((u) => { if (u) img.src = u; });
    poster.append(img, el("span", {class: "play"}, "\u25B6"));
  } else if (pv && j.status === "in_progress") {
    poster.append(el("img", {class: "preview", alt: "preview of " + j.id, "data-id": j.id, "data-step": String(pv.step), src: pv.url}),
                  el("span", {class: "pstep"}, "preview after step " + pv.step + "/" + pv.steps));
  } else poster.appendChild(el("span", {}, j.status === "queued" ? "queued" + (j.queue_position ? " #" + j.queue_position : "") +
    (j.queue_eta_seconds != null ? ", starts in about " + clock(j.queue_eta_seconds) : "") : j.status));
  const n = j.n || 1;
  const info = el("div", {class: "info"}, el("div", {class: "prompt"}, (j.prompt || "").slice(0, 140)),
    el("div", {class: "muted"}, j.size + ", " + j.seconds + " s, " + ((j.parameters || {}).steps || "?") + " steps, seed " +
       ((j.parameters || {}).seed != null ? j.parameters.seed : "?") + (n > 1 ? ", " + n + " videos" : "") +
       (j.priority ? ", priority " + j.priority : "") + (j.preemptions ? ", paused " + j.preemptions + "\u00D7 for others" : "")));
  if (j.status === "in_progress" || j.status === "completed") {
    const eta = j.status === "in_progress" && j.eta_seconds != null ? ", about " + clock(j.eta_seconds) + " left" : "";
    const took = j.status === "completed" && j.started_at && j.completed_at ? "took " + clock(j.completed_at - j.started_at) :
      (j.phase || "") + (j.steps ? " " + j.step + "/" + j.steps : "") + " \u00B7 " + (j.progress || 0).toFixed(0) + "%" + eta;
    info.append(phaseBar(j), el("div", {class: "bar"}, el("i", {style: "width:" + Math.max(0, Math.min(100, j.progress || 0)) + "%"})),
      el("div", {class: "muted progress"}, took));
  }
  info.appendChild(el("div", {class: "status"}, j.status + (j.cancel_requested && j.status === "in_progress" ? " (cancelling)" : "")));
  if (j.error && j.error.message) info.appendChild(el("div", {class: "err"}, j.error.message));
  const acts = el("div", {});
  const button = (act, label, fn) => acts.appendChild(el("button", {type: "button", "data-act": act, "data-id": j.id, onclick: fn}, label));
  if (j.status === "completed" && n === 1) { button("play", "Play", () => play(j.id)); button("download", "Download", () => download(j.id)); }
  for (const v of n > 1 ? j.videos || [] : []) {  // several videos: each playable and downloadable once it is made
    if (v.status !== "completed") continue;
    acts.appendChild(el("button", {type: "button", "data-act": "play", "data-id": j.id, "data-index": String(v.index),
                                   title: "seed " + v.seed, onclick: () => play(j.id, v.index)}, "\u25B6 " + (v.index + 1)));
    acts.appendChild(el("button", {type: "button", "data-act": "download", "data-id": j.id, "data-index": String(v.index),
                                   onclick: () => download(j.id, v.index)}, "\u2B07"));
  }
  if (j.status === "queued" || j.status === "in_progress") button("cancel", "Cancel", () => cancel(j.id));
  if (j.status !== "in_progress") button("delete", "Delete", () => del(j.id));
  info.appendChild(acts);
  return el("div", {class: "card", "data-id": j.id, "data-status": j.status}, poster, info);
}
// Cards are kept and updated in place (rebuilt only when what they show changed, moved only when the order
// changed), so that a video playing in one card keeps playing while other jobs report progress.
const cards = new Map();
function cardKey(j) {
  const pv = previews.get(j.id);
  return JSON.stringify([j.status, j.phase, j.step, j.steps, Math.round(j.progress || 0), j.eta_seconds == null ? null :
    Math.round(j.eta_seconds), j.cancel_requested, j.queue_position, j.queue_eta_seconds == null ? null : Math.round(j.queue_eta_seconds),
    j.preemptions, (j.videos || []).map((v) => v.status).join(), pv && pv.url, j.error && j.error.message, players.has(j.id)]);
}
function render() {
  const rows = [...jobs.values()].sort((a, b) => (b.created_at || 0) - (a.created_at || 0) || (a.id < b.id ? 1 : -1));
  const g = $("gallery");
  for (const [id, c] of cards) if (!jobs.has(id)) { c.el.remove(); cards.delete(id); }
  const counts = {};
  rows.forEach((j, i) => {
    counts[j.status] = (counts[j.status] || 0) + 1;
    let c = cards.get(j.id);
    const key = cardKey(j);
    if (!c || c.key !== key) {
      const fresh = card(j);
      if (c) c.el.replaceWith(fresh);
      c = {el: fresh, key};
      cards.set(j.id, c);
    }
    if (g.children[i] !== c.el) g.insertBefore(c.el, g.children[i] || null);
  });
  $("empty").hidden = rows.length > 0;
  $("counts").textContent = Object.entries(counts).map(([k, v]) => v + " " + k).join(", ");
}
function forget(id) {
  jobs.delete(id);
  const t = thumbs.get(id);
  if (t) t.then((u) => u && URL.revokeObjectURL(u));
  thumbs.delete(id);
  const v = players.get(id);
  if (v) URL.revokeObjectURL(v.src);
  players.delete(id);
  const pv = previews.get(id);
  if (pv) URL.revokeObjectURL(pv.url);
  previews.delete(id);
}
function upsert(j) {
  if (!j || !j.id) return;
  if (j.deleted) forget(j.id); else jobs.set(j.id, j);
  const pv = previews.get(j.id);  // a finished job shows its poster: its last preview is let go
  if (pv && ["completed", "failed", "cancelled"].includes(j.status)) { URL.revokeObjectURL(pv.url); previews.delete(j.id); }
  render();
}
function showHealth(h) {
  $("health").textContent = h.status === "ok" ? "ready" : (h.group || "unavailable");
  $("health").className = h.status === "ok" ? "ok" : "bad";
}
// ---- what the server runs: banner, defaults, presets, LoRAs
function showModel(m) {
  model = m;
  $("server").textContent = m.id + " on " + m.ranks + " rank(s), " + m.device + ", DiT precision " + m.precision +
    " (the server's --precision)" + (m.runner === "fake" ? ", fake runner" : "");
  $("banner").hidden = !m.notice;
  $("banner").textContent = m.notice || "";
  const p = $("presets");
  if (!p.children.length) {
    for (const pr of m.presets)
      p.appendChild(el("label", {}, el("input", {type: "radio", name: "preset", value: String(pr.steps),
                                                  onchange: () => { $("steps").value = pr.steps; estimate(); }}),
                       pr.name, el("span", {class: "est", "data-steps": String(pr.steps)}, pr.steps + " steps")));
  }
  const l = $("loras");
  if (l.dataset.names === JSON.stringify(m.loras)) return;  // keep the user's choices while the list is the same
  l.dataset.names = JSON.stringify(m.loras);
  l.textContent = "";
  if (!m.loras.length) l.appendChild(el("span", {class: "muted"}, "none (the server has no --lora-dir, or it holds no .safetensors)"));
  for (const name of m.loras)
    l.appendChild(el("label", {}, el("input", {type: "checkbox", "data-lora": name}), name,
                     el("input", {type: "number", step: "0.05", value: "1", "data-strength": name, title: "strength"})));
}
function applyDefaults(m) {
  if (localStorage.getItem("h3_form_touched")) return;
  $("size").value = m.defaults.size;
  $("seconds").value = m.defaults.seconds;
  $("steps").value = m.defaults.steps;
}
// ---- the time estimate: the last measured job scaled by video tokens (DiT) and by pixels x frames (the rest)
function canvasOf(size, aspect) {
  const m = /^(\d+)x(\d+)$/.exec(size || "");
  if (m) return [Number(m[1]), Number(m[2])];
  const [a, b] = (aspect || "16:9").split(":").map(Number);
  let w = a >= b ? 768 * a / b : 768, h = a >= b ? 768 : 768 * b / a;
  const s = Math.min(1, Math.sqrt(768 * 1344 / (w * h)));
  return [Math.max(32, Math.round(w * s / 32) * 32), Math.max(32, Math.round(h * s / 32) * 32)];
}
function framesOf(seconds) {
  const f = Math.round(Number(seconds || 5) * 24);
  return Math.min(345, Math.max(124, f <= 5 ? 5 : Math.ceil((f - 5) / 17) * 17 + 5));
}
function estimateSeconds(steps) {
  const ms = model && model.measured;
  if (!ms) return null;
  const [w, h] = canvasOf($("size").value.trim(), $("aspect").value), f = framesOf($("seconds").value);
  const tok = ((f - 5) / 17 * 5 + 2) * (h / 16) * (w / 16);
  const tokM = ms.latent_frames * ms.latent_h * ms.latent_w;
  return Math.max(0, steps - 1) * ms.seconds_per_call * tok / tokM + ms.other_seconds * (w * h * f) / (ms.width * ms.height * ms.frames);
}
function estimate() {
  const ms = model && model.measured;
  for (const s of document.querySelectorAll(".presets .est")) {
    const t = estimateSeconds(Number(s.dataset.steps));
    s.textContent = s.dataset.steps + " steps" + (t == null ? "" : " \u00B7 \u2248 " + clock(t));
  }
  const t = estimateSeconds(Number($("steps").value));
  $("estimate").textContent = t == null ? "No estimate yet: the server has not finished a job." :
    "Estimated time: about " + clock(t) + " (from the last job: " + ms.seconds_per_call.toPrecision(3) + " s per DiT call at " +
    ms.width + "x" + ms.height + ", " + ms.frames + " frames)";
  for (const r of document.querySelectorAll('input[name="preset"]')) r.checked = r.value === $("steps").value;
}
// ---- uploads: keyframes and references, dropped or chosen
const media = {first_image: null, last_image: null, references: []};
function kindOf(f) { return f.type.startsWith("video/") ? "video" : f.type.startsWith("audio/") ? "audio" : "image"; }
function setKeyframe(role, file) {
  media[role] = file;
  const zone = document.querySelector('.drop[data-role="' + role + '"]');
  zone.textContent = "";
  if (!file) { zone.textContent = (role === "first_image" ? "first" : "last") + " frame: drop or choose an image"; return; }
  const img = el("img", {alt: file.name});
  img.src = URL.createObjectURL(file);
  zone.append(img, el("span", {}, file.name + " "),
              el("button", {type: "button", "data-act": "clear-" + role, onclick: (e) => { e.stopPropagation(); setKeyframe(role, null); }}, "remove"));
}
function addReferences(files) {
  for (const f of files) media.references.push({file: f, kind: kindOf(f)});
  showReferences();
}
function showReferences() {
  const ul = $("refs");
  ul.textContent = "";
  media.references.forEach((r, i) => {
    const sel = el("select", {onchange: (e) => { r.kind = e.target.value; }}, ...["image", "video", "audio"].map((k) => el("option", {}, k)));
    sel.value = r.kind;
    ul.appendChild(el("li", {"data-ref": String(i)}, sel, r.file.name + " (" + Math.ceil(r.file.size / 1024) + " KiB)",
                      el("button", {type: "button", onclick: () => { media.references.splice(i, 1); showReferences(); }}, "remove")));
  });
}
function dropZone(zone, input, onFiles) {
  zone.onclick = () => input.click();
  input.onchange = () => { onFiles([...input.files]); input.value = ""; };
  zone.ondragover = (e) => { e.preventDefault(); zone.classList.add("over"); };
  zone.ondragleave = () => zone.classList.remove("over");
  zone.ondrop = (e) => { e.preventDefault(); zone.classList.remove("over"); onFiles([...e.dataTransfer.files]); };
}
dropZone($("drop-first"), $("file-first"), (f) => f.length && setKeyframe("first_image", f[0]));
dropZone($("drop-last"), $("file-last"), (f) => f.length && setKeyframe("last_image", f[0]));
dropZone($("drop-refs"), $("file-refs"), addReferences);
// ---- the request
async function readForm() {  // JSON, or a FormData when files go with it
  const body = {prompt: $("prompt").value};
  const size = $("size").value.trim();
  if (size) body.size = size; else body.aspect = $("aspect").value;
  if ($("seconds").value) body.seconds = Number($("seconds").value);
  if ($("steps").value) body.steps = Number($("steps").value);
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  if (Number($("n").value) > 1) body.n = Number($("n").value);
  if (Number($("priority").value) > 0) body.priority = Number($("priority").value);
  const loras = [...document.querySelectorAll("input[data-lora]:checked")].map((c) =>
    ({name: c.dataset.lora, strength: Number(document.querySelector('input[data-strength="' + c.dataset.lora + '"]').value || 1)}));
  if (loras.length) body.loras = loras;
  const files = [media.first_image, media.last_image, ...media.references.map((r) => r.file)].filter(Boolean);
  if (!files.length) return body;
  // With files: a multipart form, as the OpenAI SDKs send it (docs/api.md "The OpenAI SDKs").
  const bytes = files.reduce((n, f) => n + f.size, 0);
  if (model && bytes + 8192 > model.max_body_bytes)
    throw new Error("the files are " + Math.ceil(bytes / 1024) + " KiB; this server takes request bodies up to " +
                    Math.floor(model.max_body_bytes / 1024) + " KiB (start it with a larger --max-body)");
  const form = new FormData();
  for (const [k, v] of Object.entries(body)) if (k !== "loras") form.append(k, String(v));
  for (const l of body.loras || []) { form.append("loras[][name]", l.name); form.append("loras[][strength]", String(l.strength)); }
  for (const role of ["first_image", "last_image"]) if (media[role]) form.append(role, media[role], media[role].name);
  for (const r of media.references) { form.append("references[][kind]", r.kind); form.append("references[][data]", r.file, r.file.name); }
  return form;
}
let submitting = null;  // the last submission's promise: the job, or {error}
$("form").onsubmit = (ev) => {
  ev.preventDefault();
  $("formmsg").textContent = "";
  submitting = (async () => {
    try { const j = await api("POST", "/v1/videos", await readForm()); upsert(j); return j; }
    catch (e) { $("formmsg").textContent = e.message; return {error: e.message}; }
  })();
};
for (const id of ["size", "aspect", "seconds", "steps"])
  $(id).addEventListener("input", () => { localStorage.setItem("h3_form_touched", "1"); estimate(); });
$("refresh").onclick = refresh;
async function cancel(id) { try { upsert(await api("POST", "/v1/videos/" + id + "/cancel")); } catch (e) { $("formmsg").textContent = e.message; } }
async function del(id) { try { await api("DELETE", "/v1/videos/" + id); forget(id); render(); } catch (e) { $("formmsg").textContent = e.message; } }
async function blob(id, index) {
  const r = await fetch("/v1/videos/" + id + "/content" + (index ? "?index=" + index : ""), {headers: headers()});
  if (!r.ok) throw new Error("content: HTTP " + r.status);
  return await r.blob();
}
// Inline playback: the card's poster becomes the video (one of its videos: `index`).
async function play(id, index) {
  try {
    const b = await blob(id, index);
    const old = players.get(id);
    if (old) URL.revokeObjectURL(old.src);
    const v = el("video", {controls: "", autoplay: "", playsinline: "", "data-id": id, "data-index": String(index || 0),
                           "data-bytes": String(b.size)});
    v.src = URL.createObjectURL(b);
    players.set(id, v);
    render();
    return b.size;
  } catch (e) { $("formmsg").textContent = e.message; return 0; }
}
async function download(id, index) {
  try {
    const b = await blob(id, index);
    const a = el("a", {href: URL.createObjectURL(b), download: id + (index ? "-" + index : "") + ".mp4"});
    document.body.appendChild(a); a.click(); a.remove();
  } catch (e) { $("formmsg").textContent = e.message; }
}
// ---- live state
async function refresh() {
  try {
    const l = await api("GET", "/v1/videos?limit=100");
    jobs.clear();
    for (const j of l.data) jobs.set(j.id, j);
    render();
    const m = await api("GET", "/v1/models");
    const first = !model;
    showModel(m.data[0]);
    if (first) applyDefaults(model);
    estimate();
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
function onEvent(type, d) {
  if (type === "video") { upsert(d); if (d.status === "completed") api("GET", "/v1/models").then((m) => { showModel(m.data[0]); estimate(); }).catch(() => 0); }
  else if (type === "preview") return showPreview(d);
  else if (type === "group") showHealth(d);
}
async function start() {
  if (live) live.abort();
  live = new AbortController();
  await refresh();
  if (location.hash === "#selftest" || location.hash === "#layout") return;  // finite streams only
  const ctl = live;
  for (;;) {
    try { await stream("/v1/events", onEvent, ctl.signal); } catch (e) { if (ctl.signal.aborted) return; }
    if (ctl.signal.aborted) return;
    await new Promise((r) => setTimeout(r, 2000));
    await refresh();
  }
}
// ---- the self-test: the page's own controls, end to end
async function selftest() {
  const out = [];
  const log = (s) => { out.push(s); $("selftest").textContent = out.join("\n"); };
  const submitVia = async (prompt, keyframe) => {
    $("prompt").value = prompt; $("size").value = "320x192"; $("seconds").value = "5"; $("steps").value = "6"; $("seed").value = "7";
    setKeyframe("first_image", keyframe || null);
    submitting = null;
    $("submit").click();  // dispatches the form's submit event at once, which starts the request
    const j = submitting ? await submitting : null;
    if (!j || !j.id) throw new Error("submit failed: " + JSON.stringify(j));
    return j.id;
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
    if (!document.querySelector("#presets input") || !document.querySelector("#drop-first")) throw new Error("form incomplete");
    // A keyframe made here (a gradient on a canvas), handed to the drop zone's handler as a dropped file would be.
    const c = el("canvas", {width: "64", height: "36"});
    const g = c.getContext("2d"), grad = g.createLinearGradient(0, 0, 64, 36);
    grad.addColorStop(0, "#c33"); grad.addColorStop(1, "#36c"); g.fillStyle = grad; g.fillRect(0, 0, 64, 36);
    const png = await new Promise((ok) => c.toBlob(ok, "image/png"));
    const a = await submitVia("selftest: a red fox in the snow", new File([png], "key.png", {type: "image/png"}));
    log("submitted " + a + " with a keyframe");
    // Its stream, read live: each preview is shown as the page shows it; one must be seen on the running card.
    let previewSeen = null;
    const watching = stream("/v1/videos/" + a + "/events", async (t, d) => {
      if (t === "video") upsert(d);
      if (t !== "preview" || previewSeen) return;
      await showPreview(d);
      const img = document.querySelector('.card[data-id="' + a + '"][data-status="in_progress"] img.preview');
      if (img && img.src.startsWith("blob:")) previewSeen = "step " + img.getAttribute("data-step");
    }).catch(() => 0);
    const b = await submitVia("selftest: to be cancelled");
    const btn = document.querySelector('button[data-act="cancel"][data-id="' + b + '"]');
    if (!btn) throw new Error("no cancel button for " + b);
    btn.click();
    const ea = await waitEnd(a), eb = await waitEnd(b);
    await watching;
    log("a: " + (ea && ea.status) + ", b: " + (eb && eb.status));
    if (!previewSeen) throw new Error("no preview shown on the running card of " + a);
    log("preview on the running card: " + previewSeen);
    await refresh();
    const ca = document.querySelector('.card[data-id="' + a + '"]'), cb = document.querySelector('.card[data-id="' + b + '"]');
    if (!ca || ca.getAttribute("data-status") !== "completed") throw new Error("card a not completed");
    if (!cb || cb.getAttribute("data-status") !== "cancelled") throw new Error("card b not cancelled");
    if (!(ea.request && ea.request.first_image && ea.request.first_image.filename === "key.png")) throw new Error("keyframe not recorded");
    const u = await thumbnail(ea);
    if (!u) throw new Error("no poster thumbnail");
    log("poster " + u.slice(0, 5));
    const bytes = await play(a);
    const v = document.querySelector('.card[data-id="' + a + '"] video');
    if (!v || !(bytes > 0) || !v.src.startsWith("blob:")) throw new Error("player not loaded");
    log("played " + bytes + " bytes");
    document.querySelector('button[data-act="delete"][data-id="' + b + '"]').click();
    for (let i = 0; i < 200 && jobs.has(b); ++i) await api("GET", "/health").catch(() => 0);
    if (document.querySelector('.card[data-id="' + b + '"]')) throw new Error("card b not deleted");
    log("deleted " + b);
    log("SELFTEST PASS");
  } catch (e) { log("SELFTEST FAIL: " + e.message); }
}
start().then(() => {
  if (location.hash === "#selftest") return selftest();
  // #layout: the page's width as laid out, for the test at a phone's width (no horizontal scrolling).
  if (location.hash === "#layout")
    $("selftest").textContent = "LAYOUT " + document.documentElement.scrollWidth + " " + window.innerWidth;
});
</script></body></html>
)HTML";

}  // namespace

const char* web_page_html() {
  return kPage;
}

}  // namespace h3::serve
