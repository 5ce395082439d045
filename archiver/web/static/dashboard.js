// The partarchive dashboard: reads /dashboard/overview every 5 s, answers lookups from
// /partitions/{id} and searches from /partitions?worker=...&completed_after=... (a page at a time,
// its cursor kept for the next). Text from Redis (worker ids, reasons) is only ever set as textContent.
"use strict";

const REFRESH_MS = 5000;
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));

function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function rows(table, pairs, header) {
  table.replaceChildren();
  if (header) {
    const tr = table.insertRow();
    for (const h of header) { const th = document.createElement("th"); th.textContent = h; tr.append(th); }
  }
  for (const cells of pairs) {
    const tr = table.insertRow();
    cells.forEach((value, i) => {
      const cell = document.createElement(i === 0 && !header ? "th" : "td");
      cell.textContent = value;
      tr.append(cell);
    });
  }
}

function chart(el, series) {
  const w = 960, h = 220, pad = 28;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const maxCount = Math.max(1, ...series.map((p) => p.completed));
  const durations = series.map((p) => p.avg_duration_s).filter((d) => d !== null);
  const maxDuration = Math.max(1, ...durations);
  const step = (w - 2 * pad) / series.length;
  const add = (name, attrs, text) => {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  add("line", { class: "axis", x1: pad, y1: h - pad, x2: w - pad, y2: h - pad });
  series.forEach((p, i) => {
    const bh = ((h - 2 * pad) * p.completed) / maxCount;
    const bar = add("rect", { class: "bar", x: pad + i * step + 1, y: h - pad - bh, width: Math.max(1, step - 2), height: bh });
    const tip = document.createElementNS(SVG, "title");
    tip.textContent = `${p.hour}: ${fmt(p.completed)} completed, mean ${p.avg_duration_s ?? "–"} s`;
    bar.append(tip);
    if (i % 6 === 0) add("text", { x: pad + i * step, y: h - pad + 14 }, p.hour.slice(5, 13).replace("T", " "));
  });
  const points = series
    .map((p, i) => (p.avg_duration_s === null ? null : `${pad + (i + 0.5) * step},${h - pad - ((h - 2 * pad) * p.avg_duration_s) / maxDuration}`))
    .filter((p) => p !== null);
  if (points.length > 1) add("polyline", { class: "duration", points: points.join(" ") });
  for (const point of points) {
    const [x, y] = point.split(",");
    add("circle", { class: "duration-point", cx: x, cy: y, r: 3 });
  }
  add("text", { x: 2, y: pad - 10 }, `${fmt(maxCount)}/h`);
  add("text", { x: w - pad - 60, y: pad - 10 }, `${fmt(Math.round(maxDuration))} s`);
  el.replaceChildren(svg);
}

function trend(el, minutes) {
  const w = 960, h = 90, pad = 16;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const max = Math.max(1, ...minutes.map((m) => m.completed));
  const step = (w - 2 * pad) / minutes.length;
  minutes.forEach((m, i) => {
    const bh = ((h - 2 * pad) * m.completed) / max;
    const bar = document.createElementNS(SVG, "rect");
    const attrs = { class: "bar", x: pad + i * step + 1, y: h - pad - bh, width: Math.max(1, step - 2), height: bh };
    for (const [k, v] of Object.entries(attrs)) bar.setAttribute(k, v);
    const tip = document.createElementNS(SVG, "title");
    tip.textContent = `${m.minute}: ${fmt(m.completed)} completed`;
    bar.append(tip);
    svg.append(bar);
  });
  const label = document.createElementNS(SVG, "text");
  label.setAttribute("x", 2);
  label.setAttribute("y", pad - 4);
  label.textContent = `${fmt(max)}/min`;
  svg.append(label);
  el.replaceChildren(svg);
}

const WINDOWS_S = { "1m": 60, "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400 };

// A rate over less time than its window (just after the start) is marked with the time it covers.
function rate(r, covers, window) {
  if (r === null) return "–";
  const shown = fmt(Math.round(r * 10) / 10);
  return covers !== null && covers !== undefined && covers < window ? `${shown} (last ${seconds(covers)})` : shown;
}

function showProgress(p) {
  const share = (n) => (p.total ? (100 * n) / p.total : 0);
  $("progress-done").style.width = `${share(p.done)}%`;
  $("progress-failed").style.width = `${share(p.failed)}%`;
  $("progress-bar").setAttribute("aria-valuenow", String(Math.round(share(p.done))));
  const percent = p.percent_done === null ? "" : ` (${p.percent_done}%)`;
  $("progress-text").textContent = `${fmt(p.done)} of ${fmt(p.total)} done${percent} · ${fmt(p.failed)} failed · ${fmt(p.pending)} pending`;
  $("eta").textContent = p.eta;
  rows($("progress-rates"), [
    ["window", ...Object.keys(p.rates)],
    ["completed/s", ...Object.entries(p.rates).map(([w, r]) => rate(r, p.rate_covers_s?.[w], WINDOWS_S[w]))],
  ]);
}

function showModes(o) {
  const pr = o.pressure, ar = o.archival;
  const waiting = `${fmt(pr.unsealed_records)} records to seal`;
  $("compression-mode").textContent = pr.skipping ? `skipped: ${pr.reason}; ${waiting}` : pr.unsealed_records ? `normal; ${waiting}` : "normal";
  const share = ar.share ?? 100;
  const cohorts = `${fmt(ar.held)} held, ${fmt(ar.released ?? 0)} released`;
  $("archival-mode").textContent = ar.paused ? `paused (share ${share}% on resume); ${cohorts}`
    : share < 100 ? `gray release: ${share}% of completions archived; ${cohorts}` : "running";
  const notes = [];
  if (ar.paused) notes.push(`Archival is paused: ${fmt(ar.held)} completed partitions wait in the active hash (partarchive archival resume).`);
  else if (share < 100) notes.push(`Gray release: completions outside the ${share}% share stay in the active hash as completed (${cohorts}); partarchive archival report compares both cohorts, partarchive archival rollout 100 archives them all.`);
  if (pr.skipping) notes.push(`Compression is skipped (${pr.reason}): records are stored unsealed until the backlog is gone.`);
  $("modes").textContent = notes.join(" ");
  $("modes").hidden = notes.length === 0;
}

function show(o) {
  const select = $("namespaces");
  select.replaceChildren(...o.namespaces.map((name) => new Option(name, name, false, name === o.namespace)));
  $("updated").textContent = `updated ${new Date(o.generated_at * 1000).toISOString().slice(11, 19)} UTC`;

  showProgress(o.progress);
  showModes(o);

  $("active-total").textContent = fmt(o.active.size);
  rows($("active-by-status"), Object.entries(o.active.by_status).map(([k, v]) => [k, fmt(v)]));

  $("queue-backlog").textContent = fmt(o.queue.backlog);
  $("queue-pending").textContent = fmt(o.queue.pending);
  $("queue-oldest").textContent = o.queue.pending ? seconds(o.queue.oldest_pending_age_s) : "–";
  $("dead-count").textContent = fmt(o.dead_letters.count);

  const a = o.archive;
  $("stored-tier").textContent = a.stored_tier;
  $("target-tier").textContent = a.target_tier === a.stored_tier ? a.target_tier : `${a.target_tier} (a move is due)`;
  $("archived-total").textContent = fmt(a.archived_total);
  $("bytes-per-partition").textContent = a.bytes_per_partition === null ? "–" : `${a.bytes_per_partition} B`;
  $("compression").textContent = a.compression_ratio ? `${a.compression_ratio}x` : "–";
  const cold = a.cold;
  $("cold-store").textContent = cold.store === null ? "none" : cold.error ? `${cold.store} (failing: ${cold.error})` : cold.store;
  $("cold-files").textContent = cold.store === null ? "–" : `${fmt(cold.files)} files, ${bytes(cold.bytes)}, ${fmt(cold.partitions)} partitions`;
  $("redis-memory").textContent = o.redis.used_memory_human;
  $("redis-node").textContent = `${o.redis.node} (${o.redis.mode}, ${o.redis.role})`;
  $("redis-replicas").textContent = `${fmt(o.redis.replicas_in_step)} of ${fmt(o.redis.replicas)}`;
  $("redis-replicas").title = o.redis.in_step_rule;
  rows($("tier-bytes"), Object.entries(a.bytes).map(([k, v]) => [k.replace("_", " "), bytes(v)]));

  trend($("trend"), o.minutes); // both charts from the statistics: they agree
  chart($("chart"), o.series);

  $("archiver-count").textContent = `(${o.archivers.length})`;
  rows(
    $("archivers"),
    o.archivers.map((h) => [h.consumer, h.host, String(h.pid), `${fmt(h.rate)}/s`, fmt(h.pending), `${h.last_beat_age_s} s ago`]),
    ["consumer", "host", "pid", "rate", "holding", "last beat"],
  );
  const w = o.workers;
  $("worker-count").textContent =
    `(${w.alive}, ${fmt(w.in_hand)} partitions in hand` + (w.retries_waiting ? `, ${fmt(w.retries_waiting)} retries waiting)` : ")");
  rows(
    $("workers"),
    w.list.map((x) => [x.worker_id + (x.leads ? " (leader)" : ""), x.host, String(x.pid), `${fmt(x.in_hand)} of ${fmt(x.window)}`, fmt(x.processed), fmt(x.failed), `${x.last_beat_age_s} s ago`]),
    ["worker", "host", "pid", "in hand", "processed", "failed", "last beat"],
  );
  const l = o.leader, p = l.plan;
  const found = l.holes || l.overlaps ? `${fmt(l.holes)} holes, ${fmt(l.overlaps)} overlaps` : "no hole or overlap";
  $("leader").textContent =
    `Leader: ${l.leader === null ? "nobody" : l.token ? `${l.leader} (token ${l.token})` : `${l.leader} (Go's lock)`}` +
    (p.next_id === null ? "; nothing planned" : `; plan: ids ${p.first_id}..${p.next_id - 1}, ${fmt(p.partitions)} partitions; ${p.checked_at ? found : "not checked yet"}`);
  $("leader").className = l.holes || l.overlaps ? "answer bad" : "answer";
  rows(
    $("dead-letters"),
    o.dead_letters.latest.map((d) => [d.id, String(d.entry ?? ""), d.reason]),
    ["id", "entry", "reason"],
  );
}

async function refresh() {
  try {
    const response = await fetch("/dashboard/overview", { cache: "no-store" });
    const body = await response.json();
    if (!response.ok) throw new Error(`${body.error}${body.detail ? ": " + JSON.stringify(body.detail) : ""}`);
    show(body);
    $("error").hidden = true;
  } catch (err) {
    $("error").textContent = `cannot read the overview: ${err.message}`;
    $("error").hidden = false;
  }
}

async function lookup(event) {
  event.preventDefault();
  const pid = $("pid").value.trim();
  const answer = $("lookup-answer"), record = $("lookup-record");
  record.textContent = "";
  if (!/^\d{1,16}$/.test(pid)) { answer.textContent = "a partition id is a whole number"; return; }
  const response = await fetch(`/partitions/${pid}`, { cache: "no-store" });
  const text = await response.text(); // shown as sent: ids beyond 2^53 stay exact
  let body = {};
  try { body = JSON.parse(text); } catch (_) { /* shown raw below */ }
  if (response.ok) {
    answer.textContent = `partition ${pid}: ${body.status}, answered by the ${body.source} layer${body.degraded ? " (degraded)" : ""}`;
  } else if (response.status === 404) {
    answer.textContent = `partition ${pid}: not found`;
  } else {
    answer.textContent = `partition ${pid}: ${body.error || response.statusText}`;
  }
  record.textContent = text;
}

let searchQuery = null, searchCursor = null;

function searchParams() {
  const params = new URLSearchParams();
  for (const [id, name] of [["f-worker", "worker"], ["f-after", "completed_after"], ["f-before", "completed_before"],
    ["f-min", "min_duration"], ["f-max", "max_duration"], ["f-ids", "ids"]]) {
    const value = $(id).value.trim();
    if (value) params.set(name, value);
  }
  params.set("status", $("f-status").value);
  params.set("limit", "50");
  return params;
}

function when(at) {
  return at === undefined || at === null ? "–" : new Date(at * 1000).toISOString().slice(0, 19).replace("T", " ");
}

async function search(event, more) {
  if (event) event.preventDefault();
  if (!more) { searchQuery = searchParams(); searchCursor = null; $("search-results").replaceChildren(); }
  const params = new URLSearchParams(searchQuery);
  if (searchCursor) params.set("cursor", searchCursor);
  const response = await fetch(`/partitions?${params}`, { cache: "no-store" });
  const body = await response.json();
  if (!response.ok) {
    $("search-summary").textContent = `${body.error}${body.detail ? ": " + JSON.stringify(body.detail) : ""}`;
    $("search-more").hidden = true;
    return;
  }
  const table = $("search-results");
  if (!table.rows.length) {
    const head = table.insertRow();
    for (const h of ["partition", "worker", "completed (UTC)", "duration", "status", "source"]) {
      const th = document.createElement("th"); th.textContent = h; head.append(th);
    }
  }
  for (const item of body.items) {
    const tr = table.insertRow();
    for (const value of [String(item.partition_id), item.worker_id || "–", when(item.completed_at),
      item.duration === undefined ? "–" : `${fmt(item.duration)} s`, item.status, item.source]) {
      const td = document.createElement("td"); td.textContent = value; tr.append(td);
    }
  }
  const shown = table.rows.length ? table.rows.length - 1 : 0;
  const waiting = body.not_searched && body.not_searched.queue ? `; ${fmt(body.not_searched.queue)} completions in the queue not searched` : "";
  $("search-summary").textContent = `${fmt(shown)} partitions; searched: ${body.searched.join(", ")}${waiting}`;
  $("search-statistics").replaceChildren(...body.statistics.map((s) => {
    const li = document.createElement("li");
    const matching = s.matching === null ? "" : `, ${fmt(s.matching)} match`;
    li.textContent = `${s.level} ${s[s.level]} (partitions ${s.partitions[0]}-${s.partitions[1]}), from the statistics: ${fmt(s.count)} completed${matching} (${s.why})`;
    return li;
  }));
  searchCursor = body.next_cursor;
  $("search-more").hidden = !searchCursor;
}

let timer = null;
function schedule() {
  clearInterval(timer);
  if ($("auto").checked) timer = setInterval(refresh, REFRESH_MS);
}

$("lookup").addEventListener("submit", lookup);
$("search").addEventListener("submit", (event) => search(event, false));
$("search-more").addEventListener("click", () => search(null, true));
$("auto").addEventListener("change", schedule);
refresh();
schedule();
