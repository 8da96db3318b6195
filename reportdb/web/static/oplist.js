// The report picker and the operation list (filter, sort, pages, first culprit), opening an operation by id, tabs.

import { api, enc } from "./api.js";
import { $, $$, el, reportError, showStatus } from "./dom.js";
import { fmtBytes, fmtInt, fmtPcc, num } from "./format.js";
import { fetchHeatmaps } from "./heatmaps.js";
import { selectOp } from "./opview.js";
import { state } from "./state.js";
import { hashParams } from "./store.js";
import { badge, roleBadge } from "./tables.js";

export async function loadReports() {
  const data = await api("api/reports");
  state.reports = data.reports;
  const select = $("#report-select");
  select.replaceChildren(...state.reports.map((r) => new Option(r.name, r.name)));
  for (const id of ["#run-a", "#run-b"]) $(id).replaceChildren(...state.reports.map((r) => new Option(r.name, r.name)));
  if (state.reports.length > 1) $("#run-b").selectedIndex = 1;
  $("#tab-runs").hidden = state.reports.length < 2;
  const wanted = hashParams().get("report");
  state.report = state.reports.some((r) => r.name === wanted) ? wanted : state.reports[0]?.name ?? null;
  select.value = state.report ?? "";
  showReportSummary();
}

export function showReportSummary() {
  const r = state.reports.find((x) => x.name === state.report);
  $("#report-summary").textContent = r
    ? `${fmtInt(r.operations)} operations \u00b7 ${fmtInt(r.tensors)} tensors \u00b7 ${fmtBytes(r.bytes)} \u00b7 ${fmtInt(r.comparisons)} golden records` +
      (r.ttnn_version ? ` \u00b7 ttnn ${r.ttnn_version}` : "")
    : "no report served";
}

/** Milliseconds before the list's first poll while the server recomputes the verdicts (``pending``), each next one
 * half as long again up to POLL_MAX_MS (a long analysis is not slowed by the polls it answers). */
const POLL_MS = 500;
const POLL_MAX_MS = 4000;
let pollMs = POLL_MS;
let loadSeq = 0;
let loading = null; // the AbortController of the list request in flight
let pollTimer = null;

/** Load the list's page (``wait: 0``: answered at once with the recorded verdicts while the server's golden analysis
 * runs); while it is pending, poll and redraw with the final roles, keeping the selection, sort, page and scroll. */
export const loadOps = async () => {
  clearTimeout(pollTimer);
  loading?.abort();
  if (!state.report) return;
  const o = state.ops;
  const mine = ++loadSeq;
  const report = state.report;
  loading = new AbortController();
  try {
    const data = await api(`api/reports/${enc(report)}/operations`, {
      filter: o.filter, sort: o.sort, order: o.order, offset: o.offset, limit: o.limit, wait: 0,
    }, loading.signal);
    if (mine !== loadSeq || report !== state.report) return;
    takePage(data);
    const scroll = $("#op-table").closest(".table-scroll");
    const top = scroll?.scrollTop ?? 0;
    renderOps();
    if (scroll) scroll.scrollTop = top;
    showCulprit();
    if (o.pending) pollTimer = setTimeout(() => { if (report === state.report) loadOps(); }, pollMs);
    pollMs = o.pending ? Math.min(POLL_MAX_MS, pollMs * 1.5) : POLL_MS;
  } catch (err) {
    if (err.name !== "AbortError") reportError(err);
  }
};

/** Keep one answer of the list endpoint in ``state.ops``. */
function takePage(data) {
  Object.assign(state.ops, {
    total: data.total, items: data.items, first: data.first_culprit, judged: data.judged,
    globalOnly: !!data.global_only, victims: data.victims ?? 0,
    pending: !!data.pending, analysisError: data.analysis_error ?? null,
  });
  $("#op-table").dataset.pending = String(!!data.pending);
}

/** The first culprit line above the list and its jump control (a note while the server recomputes the verdicts). */
function showCulprit() {
  const o = state.ops;
  const first = o.first;
  $("#jump-culprit").disabled = !first;
  $("#culprit-info").title = $("#culprit-info").textContent = first
    ? `first culprit: #${first.operation_id} ${first.name} (t${first.tensor_id})`
    : o.pending ? "verdicts being recomputed\u2026 (recorded verdicts shown)"
    : o.analysisError ? `roles unknown: ${o.analysisError.error}`
    : o.judged ? noCulprit(o.victims) : "roles unknown (report too large for a request)";
}

/** Why there is no culprit: every operation passes locally, and how many fail globally nonetheless. */
function noCulprit(victims) {
  if (!victims) return "no culprit: every comparison passes";
  return `no culprit: every operation passes locally; ${fmtInt(victims)} fail${victims === 1 ? "s" : ""} globally ` +
    "(victims of their inputs)";
}

/** Open the first culprit's operation and its culprit output. */
export async function jumpToCulprit() {
  const first = state.ops.first;
  if (!first) return;
  await openOperationById(first.operation_id, { tensorId: first.tensor_id });
}
function renderOps() {
  const tbody = $("#op-table tbody");
  const o = state.ops;
  const rows = o.items.map((op) => {
    const tr = document.createElement("tr");
    tr.dataset.opId = op.id;
    tr.tabIndex = -1;
    tr.setAttribute("aria-selected", String(op.id === state.opId));
    const { all, local } = failedCriteria(op, o.globalOnly);
    const why = all.size ? `failed: ${[...all].join(", ")}` : "";
    const pcc = document.createElement("td");
    pcc.className = "num mono" + (all.has("pcc") ? " pcc-fail" : "");
    pcc.textContent = op.worst_pcc === null ? "" : fmtPcc(op.worst_pcc);
    pcc.title = why;
    const status = document.createElement("td");
    status.className = "center";
    status.append(badge(op.passed));
    status.title = why;
    status.dataset.failed = [...all].join(",");
    const id = document.createElement("td");
    id.className = "num mono";
    id.textContent = op.id;
    const name = document.createElement("td");
    name.textContent = op.name;
    name.title = op.name;
    if (op.anomaly) name.append(" ", el("span", { className: "anomaly-mark", title: op.anomaly }, "\u26a0"));
    const sqnrFailed = local.has("sqnr_db") || local.has("tile_sqnr_db");
    const sqnr = el("td", { className: "num mono local-db" + (sqnrFailed ? " pcc-fail" : ""), title: why }, fmtDb(op.local_sqnr_db));
    sqnr.dataset.value = String(op.local_sqnr_db ?? "");
    const role = document.createElement("td");
    role.className = "center";
    role.append(roleBadge(op.role));
    tr.classList.toggle("first-culprit", !!o.first && op.id === o.first.operation_id);
    tr.append(id, name, pcc, sqnr, status, role);
    return tr;
  });
  tbody.replaceChildren(...rows);
  const focusRow = rows.find((r) => r.getAttribute("aria-selected") === "true") || rows[0];
  if (focusRow) focusRow.tabIndex = 0;
  if (!rows.length) {
    tbody.append(el("tr", {}, el("td", { colSpan: 6, className: "muted" }, "No operation matches.")));
  }
  const first = o.total ? o.offset + 1 : 0;
  $("#page-info").textContent = `${fmtInt(first)}\u2013${fmtInt(o.offset + o.items.length)} of ${fmtInt(o.total)}`;
  $("#page-prev").disabled = o.offset === 0;
  $("#page-next").disabled = o.offset + o.items.length >= o.total;
  for (const th of $$("#op-table th[data-sort]")) {
    th.setAttribute("aria-sort", th.dataset.sort === o.sort ? (o.order === "asc" ? "ascending" : "descending") : "none");
  }
  $("#worst-first").setAttribute("aria-pressed", String((o.sort === "pcc" || o.sort === "error") && o.order === "asc"));
}

/** The criteria an operation's failing comparisons failed: ``all`` of them, and ``local`` (those of its local
 * records, or of its global ones where only global records exist, as its dB column measures). A record failed as
 * ttnn recorded it (no recomputed criteria) failed its PCC, the one criterion ttnn judges. */
function failedCriteria(op, globalOnly) {
  const all = new Set();
  const local = new Set();
  for (const out of op.outputs) {
    for (const [kind, c] of Object.entries(out.comparisons)) {
      if (!c || c.passed !== false) continue;
      for (const name of c.failed?.length ? c.failed : ["pcc"]) {
        all.add(name);
        if (kind === "local" || globalOnly) local.add(name);
      }
    }
  }
  return { all, local };
}

/** A local SQNR in the list: one decimal, "exact" without error, "\u2212\u221e" where SQNR cannot see the error. */
function fmtDb(v) {
  const x = num(v);
  if (x === null) return "";
  if (!Number.isFinite(x)) return x > 0 ? "exact" : "\u2212\u221e";
  return x.toFixed(1);
}

export function setSort(sort, order) {
  Object.assign(state.ops, { sort, order, offset: 0 });
  loadOps();
}

export async function openOperationById(id, { tensorId = null } = {}) {
  const o = state.ops;
  Object.assign(o, { filter: "", offset: 0 });
  $("#op-filter").value = "";
  // Find the page holding the operation in id order, so the list shows it selected.
  if (o.sort !== "id") Object.assign(o, { sort: "id", order: "asc" });
  const probe = await api(`api/reports/${enc(state.report)}/operations`, { sort: "id", order: "asc", offset: 0, limit: 1, wait: 0 }).catch(reportError);
  if (!probe) return;
  let offset = 0;
  for (;;) {
    const page = await api(`api/reports/${enc(state.report)}/operations`, { sort: "id", order: o.order, offset, limit: o.limit, wait: 0 }).catch(reportError);
    if (!page) return;
    const op = page.items.find((x) => x.id === id);
    if (op) {
      o.offset = offset;
      takePage(page);
      showCulprit();
      renderOps();
      selectOp(op, { tensorId });
      $(`#op-table tbody tr[data-op-id="${id}"]`)?.scrollIntoView({ block: "center" });
      if (o.pending) pollTimer = setTimeout(loadOps, pollMs); // polls until the final roles are drawn
      return;
    }
    offset += o.limit;
    if (offset >= page.total) {
      showStatus(`operation ${id} is not in report ${state.report}`);
      return;
    }
  }
}

/** Show one tab's view (ops, runs or replay) and hide the others. */
export function switchTab(which) {
  for (const name of ["ops", "runs", "replay"]) {
    $(`#tab-${name}`).setAttribute("aria-selected", String(which === name));
    $(`#view-${name}`).hidden = which !== name;
  }
  if (which === "ops") requestAnimationFrame(() => { if (state.tensor) fetchHeatmaps(); });
}
