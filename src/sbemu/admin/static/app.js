// sbemu dashboard: hand-written, no build step, no third-party code (served from the package).
// Pages are hash routes (#/, #/entities, #/entity/<ns>/<name>, #/connections). Live figures come
// from one Server-Sent Events stream (/api/events, a tick per second); every state change is a
// POST carrying the CSRF token from /api/session.
"use strict";

const state = {
  csrf: null,
  history: [],          // rate points {t, incoming, outgoing, completed, deadlettered, abandoned}
  totals: {},
  tickListeners: new Set(),
  page: null,
  entitiesSort: { key: "name", dir: 1 },
  entitiesFilter: "",
};
const HISTORY_MS = 15 * 60 * 1000;

// ----------------------------------------------------------------------------- helpers
function $(sel, root) { return (root || document).querySelector(sel); }
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
function fmtNum(n) { return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"); }
function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0; while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}
function fmtDuration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + (s % 60) + "s";
}
function fmtTime(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").replace(".000Z", "Z") : "–"; }
function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms % 86400000 === 0) return ms / 86400000 + " d";
  if (ms % 3600000 === 0) return ms / 3600000 + " h";
  if (ms % 60000 === 0) return ms / 60000 + " min";
  return ms / 1000 + " s";
}
function toast(text, bad) {
  const t = $("#toast");
  t.textContent = text;
  t.className = "toast" + (bad ? " bad" : "");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => t.classList.add("hidden"), 5000);
}

async function api(path, body) {
  const opts = { credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    if (!state.csrf) await loadSession();
    opts.method = "POST";
    opts.headers["content-type"] = "application/json";
    opts.headers["x-csrf-token"] = state.csrf;
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  if (resp.status === 401) { location.href = "/login"; throw new Error("login required"); }
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(data.error || resp.status + " " + resp.statusText);
  return data;
}
async function loadSession() {
  const s = await api("/api/session");
  state.csrf = s.csrf;
  $("#logout").classList.toggle("hidden", !s.login_required);
}

// ----------------------------------------------------------------------------- live events
function connectEvents() {
  const live = $("#live");
  const es = new EventSource("/api/events");
  es.addEventListener("hello", (e) => {
    const d = JSON.parse(e.data);
    state.history = d.history || [];
    state.totals = d.totals || {};
    live.textContent = "live"; live.className = "live on";
    for (const f of state.tickListeners) f(null);
  });
  es.addEventListener("tick", (e) => {
    const d = JSON.parse(e.data);
    state.history.push(d.rates);
    const cutoff = d.rates.t - HISTORY_MS;
    while (state.history.length && state.history[0].t < cutoff) state.history.shift();
    state.totals = d.totals;
    live.textContent = "live"; live.className = "live on";
    for (const f of state.tickListeners) f(d);
  });
  es.onerror = () => { live.textContent = "reconnecting…"; live.className = "live off"; };
}

// ----------------------------------------------------------------------------- charts
const SERIES = [
  ["incoming", "Incoming messages/s", "#0b6bcb"],
  ["outgoing", "Outgoing messages/s", "#1f9d55"],
  ["completed", "Completed messages/s", "#7a4cc2"],
  ["deadlettered", "Dead-lettered messages/s", "#d0342c"],
];

function drawChart(canvas, key, color) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 320, h = canvas.clientHeight || 140;
  if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const pts = state.history;
  const now = pts.length ? pts[pts.length - 1].t : Date.now();
  const t0 = now - HISTORY_MS;
  let max = 1;
  for (const p of pts) if (p[key] > max) max = p[key];
  max = niceMax(max);
  const left = 40, bottom = h - 18, top = 6, right = w - 6;
  ctx.strokeStyle = "#e3e7ec"; ctx.fillStyle = "#6b7686"; ctx.font = "11px system-ui"; ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = bottom - (bottom - top) * i / 4;
    ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(right, y); ctx.stroke();
    ctx.fillText(fmtRate(max * i / 4), 2, y + 4);
  }
  for (let m = 15; m >= 0; m -= 5) {
    const x = left + (right - left) * (1 - m / 15);
    ctx.fillText(m ? "-" + m + "m" : "now", Math.min(x - 8, right - 22), h - 4);
  }
  if (!pts.length) return;
  ctx.strokeStyle = color; ctx.lineWidth = 1.6; ctx.beginPath();
  let started = false;
  for (const p of pts) {
    if (p.t < t0) continue;
    const x = left + (right - left) * (p.t - t0) / HISTORY_MS;
    const y = bottom - (bottom - top) * (p[key] / max);
    if (!started) { ctx.moveTo(x, y); started = true; } else ctx.lineTo(x, y);
  }
  ctx.stroke();
}
function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}
function fmtRate(v) { return v >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + "k" : String(+v.toFixed(1)); }

// ----------------------------------------------------------------------------- overview
async function pageOverview(root) {
  root.append(el("h1", {}, "Overview"));
  const cards = el("div", { class: "cards", id: "overview-cards" });
  const charts = el("div", { class: "charts" });
  root.append(cards, el("h2", {}, "Message rates, last 15 minutes"), charts, el("h2", {}, "Namespaces"));
  const nsTable = el("table", { id: "namespaces" });
  root.append(nsTable);
  const canvases = {};
  for (const [key, label, color] of SERIES) {
    const current = el("span", { class: "mono", id: "rate-" + key }, "0");
    const canvas = el("canvas", { id: "chart-" + key, "data-series": key });
    canvases[key] = [canvas, color, current];
    charts.append(el("div", { class: "chart" }, el("h3", {}, label, current), canvas));
  }
  function card(id, label, value) {
    return el("div", { class: "card" }, el("div", { class: "label" }, label), el("div", { class: "value", id }, value));
  }
  async function refresh() {
    const o = await api("/api/overview");
    const ents = o.namespaces.reduce((a, n) => a + n.queues + n.topics + n.subscriptions, 0);
    cards.replaceChildren(
      card("ov-uptime", "Uptime", fmtDuration(o.uptime_s)),
      card("ov-namespaces", "Namespaces", o.namespaces.length),
      card("ov-entities", "Entities", ents),
      card("ov-connections", "Connections", o.connections),
      card("ov-links", "Links", o.links),
      card("ov-incoming", "Messages in", fmtNum(o.totals.incoming)),
      card("ov-outgoing", "Messages out", fmtNum(o.totals.outgoing)),
      card("ov-datadir", "Data dir", fmtBytes(o.data_dir_bytes)),
      card("ov-memory", o.process.rss_is_peak ? "Memory (peak)" : "Memory", fmtBytes(o.process.rss_bytes)),
      card("ov-cpu", "CPU (one core = 100%)", o.process.cpu_percent === null ? "-" : o.process.cpu_percent.toFixed(1) + "%"),
    );
    cards.append(el("div", { class: "card" }, el("div", { class: "label" }, "Version / AMQP"),
      el("div", { class: "mono" }, "sbemu " + o.version), el("div", { class: "mono muted" }, o.amqp)));
    nsTable.replaceChildren(
      el("tr", {}, ["Namespace", "Queues", "Topics", "Subscriptions", "Partitioned", "Limited"].map((h, i) => el("th", { class: i ? "num" : "" }, h))),
      ...o.namespaces.map((n) => el("tr", {},
        el("td", {}, el("a", { href: "#/entities?ns=" + encodeURIComponent(n.name) }, n.name)),
        el("td", { class: "num" }, n.queues), el("td", { class: "num" }, n.topics),
        el("td", { class: "num" }, n.subscriptions), el("td", { class: "num" }, n.partitioned),
        el("td", { class: "num" }, n.limited ? el("span", { class: "badge Limited" }, n.limited) : 0))),
    );
  }
  function redraw() {
    for (const [key, [canvas, color, current]] of Object.entries(canvases)) {
      drawChart(canvas, key, color);
      const last = state.history[state.history.length - 1];
      current.textContent = last ? fmtRate(last[key]) + "/s" : "0/s";
    }
  }
  await refresh();
  redraw();
  let n = 0;
  return {
    tick() { redraw(); if (++n % 2 === 0) refresh().catch(() => {}); },
  };
}

// ----------------------------------------------------------------------------- entities
function strip(parts, kindOfRow) {
  const max = Math.max(1, ...parts.map((p) => p.active + p.deadletter));
  const s = el("span", { class: "strip", "data-partitions": parts.length });
  for (const p of parts) {
    const depth = p.active + p.deadletter;
    const cls = "cell" + (!p.online ? " offline" : !p.accepting ? " full" : "");
    const cell = el("span", {
      class: cls, "data-partition": p.id, "data-online": p.online ? "1" : "0",
      title: `partition ${p.id}: ${p.online ? (p.accepting ? "online" : "full") : "OFFLINE" + (p.reason ? " (" + p.reason + ")" : "")}, ` +
        `${p.active} active, ${p.deadletter} dead-lettered, ${p.scheduled} scheduled, ${p.deferred} deferred`,
    });
    if (p.online && p.accepting) {
      // white (empty) to deep blue (the deepest partition of this entity)
      const f = depth / max;
      cell.style.background = `rgb(${Math.round(233 - 222 * f)}, ${Math.round(237 - 130 * f)}, ${Math.round(242 - 39 * f)})`;
    }
    s.append(cell);
  }
  return s;
}

const ENTITY_COLUMNS = [
  ["name", "Name", (r) => r.name],
  ["kind", "Type", (r) => r.kind],
  ["active", "Active", (r) => r.counts.active, true],
  ["deadletter", "Dead-letter", (r) => r.counts.deadletter, true],
  ["scheduled", "Scheduled", (r) => r.counts.scheduled, true],
  ["deferred", "Deferred", (r) => r.counts.deferred, true],
  ["transfer", "Transfer", (r) => r.counts.transfer + r.counts.transferdeadletter, true],
  ["size", "Size", (r) => r.size_bytes || 0, true],
  ["consumers", "Consumers", (r) => r.consumers || 0, true],
  ["rate_in", "In/s", (r) => rateOf(r, "incoming"), true],
  ["rate_out", "Out/s", (r) => rateOf(r, "outgoing"), true],
  ["rate_in_bytes", "In B/s", (r) => rateOf(r, "incoming_bytes"), true],
  ["rate_out_bytes", "Out B/s", (r) => rateOf(r, "outgoing_bytes"), true],
  ["status", "Status", (r) => r.status],
  ["availability", "Availability", (r) => r.availability],
  ["partitions", "Partitions", (r) => r.partitions.length],
];

// messages (and their bytes) per second, sampled on the server (admin/rates.py); a subscription shows none:
// the counters are per partition, so its topic's figures would read as its own
function rateOf(r, key) { return r.kind === "subscription" || !r.rates ? -1 : r.rates[key]; }
function fmtRateCell(v) { return v < 0 ? "" : fmtRate(v); }
function fmtByteRate(v) { return v < 1024 ? Math.round(v) + " B/s" : fmtBytes(v) + "/s"; }
function fmtByteRateCell(v) { return v < 0 ? "" : fmtByteRate(v); }
const NO_RATES = { incoming: 0, outgoing: 0, incoming_bytes: 0, outgoing_bytes: 0 };

async function pageEntities(root, query) {
  root.append(el("h1", {}, "Entities"));
  const filter = el("input", { id: "entity-filter", type: "search", placeholder: "filter by name, type, status…", value: state.entitiesFilter || query.get("ns") || "" });
  const onlyIssues = el("input", { type: "checkbox", id: "only-issues" });
  root.append(el("div", { class: "toolbar" }, filter, el("label", {}, onlyIssues, " only dead letters or Limited"),
    el("span", { class: "muted", id: "entities-generated" })));
  // a new queue or topic, created as the admin API creates it
  const newName = el("input", { id: "new-entity-name", placeholder: "new entity name", required: true });
  const newKind = el("select", { id: "new-entity-kind" }, el("option", { value: "queue" }, "queue"), el("option", { value: "topic" }, "topic"));
  const newNs = el("select", { id: "new-entity-ns" });
  const newPartitioned = el("input", { type: "checkbox", id: "new-entity-partitioned" });
  const create = el("form", { class: "toolbar", id: "new-entity" }, newNs, newKind, newName,
    el("label", {}, newPartitioned, " partitioned"), el("button", { type: "submit" }, "Create"));
  create.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const r = await api("/api/entity/create", { ns: newNs.value, kind: newKind.value, name: newName.value.trim(), partitioned: newPartitioned.checked });
      toast(`${r.kind} ${r.entity} created`);
      newName.value = "";
      await refresh();
    } catch (err) { toast(err.message, true); }
  });
  root.append(create);
  const table = el("table", { id: "entities" });
  root.append(table);
  let rows = [];
  function render() {
    const f = filter.value.trim().toLowerCase();
    state.entitiesFilter = filter.value;
    const col = ENTITY_COLUMNS.find((c) => c[0] === state.entitiesSort.key) || ENTITY_COLUMNS[0];
    const shown = rows.filter((r) => (!f || (r.namespace + "/" + r.name + " " + r.kind + " " + r.status + " " + r.availability).toLowerCase().includes(f))
      && (!onlyIssues.checked || r.counts.deadletter > 0 || r.availability !== "Available"));
    shown.sort((a, b) => {
      const x = col[2](a), y = col[2](b);
      return (x < y ? -1 : x > y ? 1 : 0) * state.entitiesSort.dir;
    });
    const head = el("tr", {}, ENTITY_COLUMNS.map(([key, label, , num]) => el("th", {
      title: key === "size" ? "bytes of the stored messages (SizeInBytes)" : key === "consumers" ? "receive links attached now (dead-letter queues and sessions included; a topic: its subscriptions')" : key.startsWith("rate_") ? (key.endsWith("_bytes") ? "bytes of the messages" : "messages") + " per second over the last seconds (a topic: sent to it / delivered from its subscriptions)" : null,
      class: "sortable" + (num ? " num" : "") + (state.entitiesSort.key === key ? (state.entitiesSort.dir > 0 ? " sorted-asc" : " sorted-desc") : ""),
      "data-sort": key,
      onclick: () => {
        state.entitiesSort = { key, dir: state.entitiesSort.key === key ? -state.entitiesSort.dir : (num ? -1 : 1) };
        render();
      },
    }, label)));
    table.replaceChildren(head, ...shown.map((r) => {
      const href = "#/entity/" + encodeURIComponent(r.namespace) + "/" + encodeURIComponent(r.entity) + (r.subscription ? "?sub=" + encodeURIComponent(r.subscription) : "");
      return el("tr", { class: r.kind === "subscription" ? "sub" : "", "data-entity": r.namespace + "/" + r.name },
        el("td", {}, el("a", { href }, r.kind === "subscription" ? "↳ " + r.subscription : r.name), el("div", { class: "muted" }, r.namespace)),
        el("td", {}, r.kind),
        el("td", { class: "num", "data-count": "active" }, fmtNum(r.counts.active)),
        el("td", { class: "num", "data-count": "deadletter" }, fmtNum(r.counts.deadletter)),
        el("td", { class: "num", "data-count": "scheduled" }, fmtNum(r.counts.scheduled)),
        el("td", { class: "num", "data-count": "deferred" }, fmtNum(r.counts.deferred)),
        el("td", { class: "num" }, fmtNum(r.counts.transfer) + " / " + fmtNum(r.counts.transferdeadletter)),
        el("td", { class: "num" }, r.size_bytes === null ? "" : fmtBytes(r.size_bytes)),
        el("td", { class: "num", "data-count": "consumers" }, fmtNum(r.consumers || 0)),
        el("td", { class: "num", "data-rate": "incoming" }, fmtRateCell(rateOf(r, "incoming"))),
        el("td", { class: "num", "data-rate": "outgoing" }, fmtRateCell(rateOf(r, "outgoing"))),
        el("td", { class: "num", "data-rate": "incoming_bytes" }, fmtByteRateCell(rateOf(r, "incoming_bytes"))),
        el("td", { class: "num", "data-rate": "outgoing_bytes" }, fmtByteRateCell(rateOf(r, "outgoing_bytes"))),
        el("td", { "data-status": r.status }, r.status),
        el("td", {}, el("span", { class: "badge " + r.availability, "data-availability": r.availability }, r.availability)),
        el("td", {}, r.partitioned || r.partitions.length > 1 ? strip(r.partitions) : el("span", { class: "muted" }, "1")),
      );
    }));
  }
  async function refresh() {
    const snap = await api("/api/entities");
    rows = snap.entities;
    const names = [...new Set(rows.map((r) => r.namespace))];
    if (newNs.options.length !== names.length) newNs.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    $("#entities-generated").textContent = "as of " + fmtTime(snap.generated_ms);
    render();
  }
  filter.addEventListener("input", render);
  onlyIssues.addEventListener("change", render);
  await refresh();
  let n = 0;
  return { tick() { if (++n % 2 === 0) refresh().catch(() => {}); } };
}

// ----------------------------------------------------------------------------- entity page
async function pageEntity(root, ns, name, query) {
  let detail = await api("/api/entity?ns=" + encodeURIComponent(ns) + "&entity=" + encodeURIComponent(name));
  const isTopic = detail.kind === "topic";
  const subs = Object.keys(detail.rules);
  let sub = query.get("sub") || (isTopic ? subs[0] || "" : "");
  let tab = query.get("state") || "active";
  const purgeAll = el("button", { id: "purge-all", class: "danger", type: "button" }, "Purge everything");
  const deleteBtn = el("button", { id: "delete-entity", class: "danger", type: "button" }, "Delete " + detail.kind);
  const title = el("h1", {}, detail.kind + " ", el("span", { class: "mono" }, ns + "/" + detail.name), " ",
    el("span", { id: "entity-availability", class: "badge" }), " ", purgeAll, " ", deleteBtn);
  root.append(title);
  const summary = el("div", { class: "cards", id: "entity-cards" });
  root.append(summary);

  // partitions
  const partsPanel = el("div", { class: "panel" });
  root.append(el("h2", {}, "Partitions"), partsPanel);

  // sessions of a session-enabled queue or subscription
  const sessionsHead = el("h2", { class: "hidden" }, "Sessions");
  const sessionsPanel = el("div", { class: "panel hidden", id: "sessions" });
  root.append(sessionsHead, sessionsPanel);
  async function loadSessions() {
    const r = rowFor();
    const on = !!(r && r.requires_session);
    sessionsHead.classList.toggle("hidden", !on); sessionsPanel.classList.toggle("hidden", !on);
    if (!on) return;
    const q = "/api/sessions?ns=" + encodeURIComponent(ns) + "&entity=" + encodeURIComponent(detail.name) + (sub ? "&subscription=" + encodeURIComponent(sub) : "");
    const page = await api(q);
    const head = el("tr", {}, ["Session id", "Messages", "Locked until", "State"].map((h) => el("th", {}, h)));
    const rows = page.sessions.map((x) => el("tr", { "data-session": x.session_id },
      el("td", { class: "mono" }, x.session_id), el("td", { class: "num" }, fmtNum(x.messages)),
      el("td", {}, x.locked_until_ms ? fmtTime(x.locked_until_ms) : "not locked"), el("td", {}, x.state_bytes ? fmtBytes(x.state_bytes) : "none")));
    sessionsPanel.replaceChildren(el("table", { id: "session-list" }, head, ...rows),
      page.total > page.sessions.length ? el("p", { class: "muted" }, `${page.sessions.length} of ${page.total} shown`) : null,
      page.sessions.length ? null : el("p", { class: "muted" }, "No sessions with messages or state."));
  }

  // explorer
  const subSelect = el("select", { id: "subscription-select" }, subs.map((s) => el("option", { value: s }, s)));
  subSelect.value = sub;
  const tabs = el("div", { class: "tabs", id: "explorer-tabs" });
  const list = el("div", { class: "msglist" });
  const details = el("div", { id: "message-detail" }, el("p", { class: "muted" }, "Pick a message to see its properties and body."));
  const resubmitBtn = el("button", { id: "resubmit", class: "primary hidden", type: "button" }, "Resubmit selected");
  const purgeBtn = el("button", { id: "purge", class: "danger", type: "button" }, "Purge");
  const moreBtn = el("button", { id: "more", type: "button" }, "Load more");
  const refreshBtn = el("button", { id: "refresh", type: "button" }, "Refresh");
  const pageSize = el("select", { id: "page-size", title: "messages per page" }, [10, 25, 50, 100].map((n) => el("option", { value: n }, n + " a page")));
  pageSize.value = "25";
  const searchId = el("input", { id: "search-message-id", type: "search", placeholder: "message id contains…" });
  const searchProp = el("input", { id: "search-property", type: "search", placeholder: "property: name or name=value" });
  const searchForm = el("form", { id: "search-form", class: "search" }, searchId, searchProp, el("button", { type: "submit" }, "Search"));
  const exportBtn = el("button", { id: "export", type: "button", title: "download the messages shown, as JSON" }, "Export JSON");
  root.append(el("h2", {}, "Message explorer"), el("div", { class: "grid2" },
    el("div", { class: "panel" },
      el("div", { class: "toolbar" }, isTopic ? el("label", {}, "Subscription ", subSelect) : null, refreshBtn, resubmitBtn, purgeBtn),
      el("div", { class: "toolbar" }, searchForm, pageSize, exportBtn),
      tabs, list, el("div", { class: "toolbar" }, moreBtn, el("span", { class: "muted", id: "peek-status" }))),
    el("div", { class: "panel" }, details)));

  // send form
  const form = el("form", { class: "send", id: "send-form" },
    el("label", { for: "send-body" }, "Body"), el("textarea", { id: "send-body", name: "body" }, '{"hello": "world"}'),
    el("label", {}, "Content type"), el("input", { id: "send-content-type", value: "application/json" }),
    el("label", {}, "Subject"), el("input", { id: "send-subject" }),
    el("label", {}, "Message id"), el("input", { id: "send-message-id", placeholder: "(a new GUID)" }),
    el("label", {}, "Session id"), el("input", { id: "send-session-id", placeholder: detail.requires_session ? "required" : "" }),
    el("label", {}, "Partition key"), el("input", { id: "send-partition-key" }),
    el("label", {}, "Scheduled (UTC)"), el("input", { id: "send-scheduled", type: "datetime-local", step: "1" }),
    el("label", {}, "Properties"), el("textarea", { id: "send-properties", placeholder: '{"name": "value"}' }),
    el("span", {}), el("div", {}, el("button", { class: "primary", type: "submit", id: "send-submit" }, "Send"),
      el("span", { class: "muted", id: "send-result" }, " goes through the normal send path: routed, partitioned, filtered")));
  root.append(el("h2", {}, "Send a test message"), el("div", { class: "panel" }, form));

  // rules and settings
  const rulesBox = el("div", { id: "rules" });
  root.append(el("h2", {}, isTopic ? "Subscriptions and rules" : "Settings"), rulesBox);

  let messages = [], next = 0, selected = new Set(), current = null;

  function rowFor() {
    return detail.rows.find((r) => (isTopic ? r.subscription === sub : r.kind !== "topic")) || detail.rows[0];
  }
  function renderSummary() {
    const r = rowFor();
    const topicRow = detail.rows.find((x) => x.kind === "topic") || r;
    const av = $("#entity-availability");
    av.textContent = topicRow.availability; av.className = "badge " + topicRow.availability;
    av.setAttribute("data-availability", topicRow.availability);
    const c = r.counts;
    const rates = topicRow.rates || NO_RATES;
    // on a topic the counts are the selected subscription's: the first card says which
    const whose = isTopic ? [el("div", { class: "card", id: "cards-subscription" }, el("div", { class: "label" }, "Counts of subscription"),
      el("div", { class: "value" }, r.subscription || "-"))] : [];
    summary.replaceChildren(...whose, ...[["Active", c.active, "active"], ["Dead-letter", c.deadletter, "deadletter"], ["Scheduled", c.scheduled, "scheduled"],
      ["Deferred", c.deferred, "deferred"], ["Transfer DLQ", c.transferdeadletter, "transferdeadletter"], ["Partitions", detail.partition_count, "partitions"]]
      .map(([l, v, k]) => el("div", { class: "card" }, el("div", { class: "label" }, l), el("div", { class: "value", "data-count": k }, fmtNum(v)))),
      ...[["In", rates.incoming, "incoming"], ["Out", rates.outgoing, "outgoing"]].map(([l, v, k]) => el("div", { class: "card", title: isTopic ? "the topic's: sent to it / delivered from all its subscriptions" : null },
        el("div", { class: "label" }, l + " msg/s" + (isTopic ? " (topic)" : "")), el("div", { class: "value", "data-rate": k }, fmtRate(v)))),
      ...[["In", rates.incoming_bytes, "incoming_bytes"], ["Out", rates.outgoing_bytes, "outgoing_bytes"]].map(([l, v, k]) => el("div", { class: "card", title: isTopic ? "the topic's: sent to it / delivered from all its subscriptions" : null },
        el("div", { class: "label" }, l + " bytes/s" + (isTopic ? " (topic)" : "")), el("div", { class: "value", "data-rate": k }, fmtByteRate(v || 0)))));
    // the partition table shows what the cards show: the queue, or the selected subscription;
    // its rates are the partition's (for a topic: all its subscriptions)
    const row = r;
    const partRates = new Map(topicRow.partitions.map((p) => [p.id, p.rates || NO_RATES]));
    partsPanel.replaceChildren(el("div", { class: "toolbar" }, strip(row.partitions),
      el("span", { class: "muted" }, (isTopic ? "subscription " + (r.subscription || "") + "; " : "") + "colour: depth (active + dead-letter); red: offline; amber: full")),
      el("div", { class: "partscroll" }, el("table", { id: "partitions", "data-row": r.name },
      el("tr", {}, ["Partition", "Active", "Dead-letter", "Scheduled", "Deferred", "In/s", "Out/s", "In B/s", "Out B/s", "Health", ""].map((h, i) => el("th", { class: i && i < 9 ? "num" : "" }, h))),
      ...row.partitions.map((p) => el("tr", { "data-partition": p.id },
        el("td", {}, p.id),
        el("td", { class: "num", "data-count": "active" }, fmtNum(p.active)), el("td", { class: "num", "data-count": "deadletter" }, fmtNum(p.deadletter)),
        el("td", { class: "num", "data-count": "scheduled" }, fmtNum(p.scheduled)), el("td", { class: "num", "data-count": "deferred" }, fmtNum(p.deferred)),
        el("td", { class: "num", "data-rate": "incoming" }, fmtRate(partRates.get(p.id).incoming)),
        el("td", { class: "num", "data-rate": "outgoing" }, fmtRate(partRates.get(p.id).outgoing)),
        el("td", { class: "num", "data-rate": "incoming_bytes" }, fmtByteRate(partRates.get(p.id).incoming_bytes || 0)),
        el("td", { class: "num", "data-rate": "outgoing_bytes" }, fmtByteRate(partRates.get(p.id).outgoing_bytes || 0)),
        el("td", {}, el("span", { class: "badge " + (p.online ? (p.accepting ? "online" : "full") : "offline"), "data-health": p.online ? "online" : "offline" },
          p.online ? (p.accepting ? "online" : "full") : "offline"), p.reason ? el("span", { class: "muted" }, " " + p.reason) : null),
        el("td", {}, el("button", {
          type: "button", class: p.online ? "danger" : "primary", "data-toggle": p.id,
          onclick: () => togglePartition(p.id, !p.online),
        }, p.online ? "Take offline" : "Bring online")))))));
  }
  async function togglePartition(pid, online) {
    try {
      await api("/api/partition", { ns, entity: detail.name, partition: pid, online });
      toast(`partition ${pid} is now ${online ? "online" : "offline"}`);
      await reloadDetail();
    } catch (e) { toast(e.message, true); }
  }
  async function reloadDetail() {
    detail = await api("/api/entity?ns=" + encodeURIComponent(ns) + "&entity=" + encodeURIComponent(name));
    renderSummary();
    await loadSessions();
  }
  function renderTabs() {
    const labels = { active: "Active", deferred: "Deferred", scheduled: "Scheduled", deadletter: "Dead-letter", transferdeadletter: "Transfer DLQ" };
    tabs.replaceChildren(...detail.states.map((s) => el("button", {
      type: "button", class: s === tab ? "active" : "", "data-state": s,
      onclick: () => { tab = s; renderTabs(); load(true); },
    }, labels[s] || s)));
    resubmitBtn.classList.toggle("hidden", tab !== "deadletter");
    purgeBtn.textContent = "Purge " + (labels[tab] || tab).toLowerCase();
  }
  async function load(reset) {
    if (reset) { messages = []; next = 0; selected = new Set(); current = null; }
    if (next === null) return;
    try {
      const search = `&message_id=${encodeURIComponent(searchId.value.trim())}&property=${encodeURIComponent(searchProp.value.trim())}`;
      const page = await api(`/api/messages?ns=${encodeURIComponent(ns)}&entity=${encodeURIComponent(detail.name)}&subscription=${encodeURIComponent(sub)}&state=${tab}&from=${next}&count=${pageSize.value}` + search);
      messages = messages.concat(page.messages);
      next = page.next;
      const searching = searchId.value.trim() || searchProp.value.trim();
      $("#peek-status").textContent = `${messages.length} ${searching ? "found" : "shown"}` + (next === null ? ", no more" : searching ? " so far (Load more searches on)" : "") +
        (page.offline_partitions.length ? `; partitions ${page.offline_partitions.join(", ")} are offline and not shown` : "");
      moreBtn.disabled = next === null;
      renderList();
      if (reset) renderDetail(messages[0] || null);
    } catch (e) { toast(e.message, true); }
  }
  function renderList() {
    // on a dead-letter tab the reason comes right after the sequence number, where the panel
    // shows it without a sideways scroll (a long message id pushed it out of sight)
    const dead = tab === "deadletter" || tab === "transferdeadletter";
    const head = el("tr", {}, el("th", {}, ""), el("th", {}, "Seq (partition)"), dead ? el("th", {}, "Reason") : null,
      el("th", {}, "Message id"), el("th", {}, "Enqueued"), el("th", { class: "num" }, "Deliveries"), dead ? null : el("th", {}, "Session"));
    const rows = messages.map((m) => {
      const box = el("input", { type: "checkbox", "data-select": m.sequence_number });
      box.checked = selected.has(m.sequence_number);
      box.addEventListener("click", (e) => { e.stopPropagation(); box.checked ? selected.add(m.sequence_number) : selected.delete(m.sequence_number); });
      return el("tr", { class: current && current.sequence_number === m.sequence_number ? "selected" : "", "data-seq": m.sequence_number, onclick: () => renderDetail(m) },
        el("td", {}, box),
        el("td", { class: "mono" }, m.partition === null ? String(m.sequence_number) : `${m.partition_sequence} (p${m.partition})`),
        dead ? el("td", { class: "reason", title: m.dead_letter_description || "" }, m.dead_letter_reason || "") : null,
        el("td", { class: "mono id", title: m.message_id || "" }, m.message_id || ""),
        el("td", { title: fmtTime(m.enqueued_ms) }, fmtTime(m.enqueued_ms).slice(11)),
        el("td", { class: "num" }, m.delivery_count),
        dead ? null : el("td", {}, m.session_id || ""));
    });
    list.replaceChildren(el("table", { id: "messages" }, head, ...rows));
    if (!messages.length) list.append(el("p", { class: "muted", id: "no-messages" }, "No messages."));
  }
  function renderDetail(m) {
    current = m;
    for (const tr of list.querySelectorAll("tr[data-seq]")) tr.classList.toggle("selected", m && tr.dataset.seq === String(m.sequence_number));
    if (!m) { details.replaceChildren(el("p", { class: "muted" }, "No message selected.")); return; }
    const sys = [
      ["Sequence number", m.sequence_number + (m.partition === null ? "" : ` (partition ${m.partition}, #${m.partition_sequence})`)],
      ["State", m.state + (m.locked ? ", locked until " + fmtTime(m.locked_until_ms) : ", not locked")],
      ["Message id", m.message_id], ["Enqueued", fmtTime(m.enqueued_ms)], ["Delivery count", m.delivery_count],
      ["Session id", m.session_id], ["Partition key", m.partition_key], ["Correlation id", m.correlation_id],
      ["Subject", m.subject], ["Content type", m.content_type], ["To", m.to], ["Reply to", m.reply_to],
      ["Time to live", m.ttl_ms === null ? "none" : fmtMs(m.ttl_ms)], ["Expires", fmtTime(m.expires_ms)],
      ["Scheduled", m.scheduled_ms ? fmtTime(m.scheduled_ms) : null],
      ["Dead-letter reason", m.dead_letter_reason], ["Dead-letter description", m.dead_letter_description],
      ["Size", fmtBytes(m.size)],
    ].filter(([, v]) => v !== null && v !== undefined && v !== "");
    const app = Object.entries(m.application_properties || {});
    details.replaceChildren(
      el("h3", {}, "System properties"),
      el("dl", { class: "props", id: "system-properties" }, sys.map(([k, v]) => [el("dt", {}, k), el("dd", { "data-prop": k }, String(v))])),
      el("h3", {}, "Application properties"),
      app.length ? el("dl", { class: "props", id: "application-properties" }, app.map(([k, v]) => [el("dt", {}, k), el("dd", { "data-prop": k }, typeof v === "object" ? JSON.stringify(v) : String(v))]))
        : el("p", { class: "muted", id: "application-properties" }, "none"),
      el("h3", {}, "Body ", el("span", { class: "muted" }, `(${m.body.kind}, ${fmtBytes(m.body.size)})`)),
      el("pre", { class: "body", id: "message-body", "data-kind": m.body.kind }, m.body.kind === "binary" ? m.body.hex : m.body.text),
    );
  }
  refreshBtn.addEventListener("click", () => { reloadDetail(); load(true); });
  pageSize.addEventListener("change", () => load(true));
  searchForm.addEventListener("submit", (e) => { e.preventDefault(); load(true); });
  exportBtn.addEventListener("click", () => {
    // the messages shown, as the explorer decoded them (system and application properties, body)
    const doc = { namespace: ns, entity: detail.name, subscription: sub || null, state: tab,
      exported: new Date().toISOString(), messages };
    const blob = new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" });
    const a = el("a", { href: URL.createObjectURL(blob), download: `${detail.name}${sub ? "-" + sub : ""}-${tab}.json`.replace(/[^A-Za-z0-9._-]+/g, "_"), id: "export-link" });
    document.body.append(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  });
  moreBtn.addEventListener("click", () => load(false));
  subSelect.addEventListener("change", () => { sub = subSelect.value; renderSummary(); load(true); loadSessions().catch(() => {}); });
  resubmitBtn.addEventListener("click", async () => {
    if (!selected.size) { toast("Tick the dead letters to resubmit first.", true); return; }
    try {
      const r = await api("/api/resubmit", { ns, entity: detail.name, subscription: sub, sequence_numbers: [...selected] });
      const ok = r.results.filter((x) => x.ok).length, bad = r.results.filter((x) => !x.ok);
      toast(`${ok} resubmitted` + (bad.length ? `; ${bad.length} failed: ${bad[0].error}` : ""), bad.length > 0);
      await reloadDetail(); await load(true);
    } catch (e) { toast(e.message, true); }
  });
  purgeBtn.addEventListener("click", async () => {
    if (!confirm(`Delete every ${tab} message of ${detail.name}${sub ? "/" + sub : ""}? This cannot be undone.`)) return;
    try {
      const r = await api("/api/purge", { ns, entity: detail.name, subscription: sub, state: tab });
      toast(`${r.removed} messages purged` + (r.locked_kept ? `, ${r.locked_kept} locked kept` : ""));
      await reloadDetail(); await load(true);
    } catch (e) { toast(e.message, true); }
  });
  deleteBtn.addEventListener("click", async () => {
    if (!confirm(`Delete the ${detail.kind} ${ns}/${detail.name} and every message in it${isTopic ? ", with its subscriptions" : ""}? This cannot be undone.`)) return;
    try {
      await api("/api/entity/delete", { ns, entity: detail.name });
      toast(`${detail.kind} ${detail.name} deleted`);
      location.hash = "#/entities";
    } catch (e) { toast(e.message, true); }
  });
  purgeAll.addEventListener("click", async () => {
    if (!confirm(`Delete every message of ${detail.name}: active, deferred, scheduled, locked and dead-lettered${isTopic ? ", in every subscription" : ""}? This cannot be undone.`)) return;
    try {
      const r = await api("/api/purge", { ns, entity: detail.name, state: "all" });
      toast(`${r.removed} messages purged`);
      await reloadDetail(); await load(true);
    } catch (e) { toast(e.message, true); }
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    let props = {};
    const raw = $("#send-properties").value.trim();
    if (raw) { try { props = JSON.parse(raw); } catch (err) { toast("Properties must be a JSON object: " + err.message, true); return; } }
    const when = $("#send-scheduled").value;
    const body = {
      ns, entity: detail.name, body: $("#send-body").value, content_type: $("#send-content-type").value,
      subject: $("#send-subject").value, message_id: $("#send-message-id").value, session_id: $("#send-session-id").value,
      partition_key: $("#send-partition-key").value, properties: props,
      scheduled_ms: when ? Date.parse(when + "Z") : null,
    };
    try {
      const r = await api("/api/send", body);
      $("#send-result").textContent = " sent, sequence number " + r.sequence_numbers.join(", ");
      toast("message sent");
      await reloadDetail(); await load(true);
    } catch (err) { $("#send-result").textContent = " " + err.message; toast(err.message, true); }
  });

  function renderRules() {
    const parts = [];
    if (isTopic) {
      for (const s of subs) {
        parts.push(el("h3", {}, s), el("table", { class: "rules", "data-subscription": s },
          el("tr", {}, el("th", {}, "Rule"), el("th", {}, "Filter"), el("th", {}, "Action")),
          ...detail.rules[s].map((r) => el("tr", {}, el("td", {}, r.name),
            el("td", { class: "mono" }, r.filter_type === "sql" ? "SQL: " + r.sql : r.filter_type === "correlation" ? "Correlation: " + JSON.stringify(r.correlation) : r.filter_type === "true" ? "TrueFilter (every message)" : "FalseFilter"),
            el("td", { class: "mono" }, r.action || "")))));
      }
    }
    const settings = Object.entries(detail.settings).map(([q, s]) => el("tr", {},
      el("td", { class: "mono" }, q === "main" ? detail.name : q.replace(/^subscriptions\//, "")), el("td", {}, fmtMs(s.lock_duration_ms)),
      el("td", { class: "num" }, s.max_delivery_count ?? "–"), el("td", {}, s.default_ttl_ms === null ? "never" : fmtMs(s.default_ttl_ms)),
      el("td", {}, s.dead_letter_on_expiration ? "yes" : "no"), el("td", {}, s.requires_session ? "yes" : "no")));
    // a queue's section is headed "Settings" already; a topic's is "Subscriptions and rules"
    if (isTopic) parts.push(el("h3", {}, "Settings"));
    parts.push(el("table", { id: "settings" }, el("tr", {}, [isTopic ? "Subscription" : "Queue", "Lock duration", "Max deliveries", "Default TTL", "DLQ on expiry", "Sessions"].map((h) => el("th", {}, h))), ...settings));
    rulesBox.replaceChildren(...parts);
  }

  renderSummary(); renderTabs(); renderRules();
  await load(true);
  await loadSessions();
  let n = 0;
  return { tick() { if (++n % 2 === 0) reloadDetail().catch(() => {}); } };
}

// ----------------------------------------------------------------------------- connections
async function pageConnections(root) {
  root.append(el("h1", {}, "Connections"));
  const table = el("table", { id: "connections" });
  root.append(table);
  async function refresh() {
    const data = await api("/api/connections");
    table.replaceChildren(
      el("tr", {}, ["Id", "Peer", "Namespace", "SASL / identity", "Opened", "Links", ""].map((h) => el("th", {}, h))),
      ...data.connections.map((c) => el("tr", { "data-connection": c.id },
        el("td", {}, c.id), el("td", { class: "mono" }, c.peer + (c.transport ? " · " + c.transport : "")), el("td", {}, c.namespace),
        el("td", {}, (c.sasl_mechanism || "none") + (c.identities.length ? " · " + c.identities.join(", ") : "")),
        el("td", {}, fmtTime(c.opened_ms)),
        el("td", {}, c.links.length ? el("table", { class: "links" },
          el("tr", {}, ["Link", "Role", "Address", "Credit", "Unsettled"].map((h) => el("th", {}, h))),
          ...c.links.map((l) => el("tr", {}, el("td", { class: "mono" }, l.name), el("td", {}, l.role + (l.mode ? " (" + l.mode + ")" : "")),
            el("td", { class: "mono" }, l.address || ""), el("td", { class: "num" }, l.credit), el("td", { class: "num", "data-unsettled": l.unsettled }, l.unsettled))))
          : el("span", { class: "muted" }, "none")),
        el("td", {}, el("button", { type: "button", class: "danger", "data-close": c.id, onclick: () => closeConn(c.id) }, "Close")))),
    );
    if (!data.connections.length) table.append(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No open AMQP connections.")));
  }
  async function closeConn(id) {
    if (!confirm(`Close connection ${id}? The client sees amqp:connection:forced and may reconnect.`)) return;
    try { await api("/api/connections/close", { id }); toast(`connection ${id} closed`); await refresh(); }
    catch (e) { toast(e.message, true); }
  }
  await refresh();
  let n = 0;
  return { tick() { if (++n % 2 === 0) refresh().catch(() => {}); } };
}

// ----------------------------------------------------------------------------- router
async function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, qs] = hash.split("?");
  const query = new URLSearchParams(qs || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const root = $("#app");
  const token = {};
  state.routeToken = token;
  if (state.page) state.tickListeners.delete(state.page);
  state.page = null;
  root.replaceChildren();
  let nav = "overview", page;
  try {
    if (parts[0] === "entities") { nav = "entities"; page = await pageEntities(root, query); }
    else if (parts[0] === "entity" && parts.length >= 3) { nav = "entities"; page = await pageEntity(root, parts[1], parts.slice(2).join("/"), query); }
    else if (parts[0] === "connections") { nav = "connections"; page = await pageConnections(root); }
    else page = await pageOverview(root);
  } catch (e) {
    root.replaceChildren(el("p", { class: "error" }, e.message));
  }
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === nav);
  if (state.routeToken !== token || !page) return;
  const listener = () => page.tick();
  state.page = listener;
  state.tickListeners.add(listener);
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", async () => {
  $("#logout").addEventListener("click", async () => { await api("/logout", {}); location.href = "/login"; });
  try { await loadSession(); } catch (e) { /* redirected to the login page */ }
  connectEvents();
  route();
});
