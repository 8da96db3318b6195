// The Replay view: every operation of the open report replayed on its stored inputs (api/reports/<r>/replay, run
// once per report, policy and mode in the server's background; polled while pending), in isolation, chained, or
// chained with the failing operations substituted (the three verdicts side by side). The counts line, the first
// failure and the anomalies (outputs far below their peers' SQNR) are marked; a row opens its operation.

import { api, enc } from "./api.js";
import { $, el, reportError } from "./dom.js";
import { fmtPcc, num } from "./format.js";
import { state } from "./state.js";
import { changed } from "./store.js";
import { badge } from "./tables.js";

/** What the view shows: the mode asked for, and the last answer (``null`` until one came). */
export const replayView = { mode: "isolated", data: null };

const POLL_MS = 500;
let pollTimer = null;
let seq = 0;

/** Load (or poll) the replay of the open report in the chosen mode and draw it; pending answers poll again. */
export async function loadReplay() {
  clearTimeout(pollTimer);
  if (!state.report) return;
  const mine = ++seq;
  const report = state.report;
  const mode = replayView.mode;
  $("#replay-mode").value = mode;
  try {
    const data = await api(`api/reports/${enc(report)}/replay`, { mode, wait: 0 });
    if (mine !== seq) return;
    replayView.data = data;
    renderReplay(data);
    if (data.pending) pollTimer = setTimeout(() => { if (report === state.report) loadReplay(); }, POLL_MS);
  } catch (err) {
    if (mine === seq) {
      $("#replay-line").textContent = `replay failed: ${err.message}`;
      $("#view-replay").dataset.pending = "false";
    }
    reportError(err);
  }
}

/** Choose the replay mode (isolated, chain, substitute) and load it. */
export function setReplayMode(mode) {
  replayView.mode = ["isolated", "chain", "substitute"].includes(mode) ? mode : "isolated";
  changed("view");
  return loadReplay();
}

/** Draw one answer: the counts line (or why there is none yet), the table, and the anomalies' sentences. */
function renderReplay(data) {
  const view = $("#view-replay");
  view.dataset.pending = String(!!data.pending);
  view.dataset.mode = data.mode;
  const r = data.result;
  const seconds = data.analysis ? ` (${data.analysis.seconds} s)` : "";
  $("#replay-line").textContent = data.pending ? `replaying every operation\u2026${seconds}`
    : data.analysis_error ? `replay failed: ${data.analysis_error.error}` : data.line;
  const first = r?.first_failure;
  $("#replay-first").disabled = !first;
  $("#replay-first").title = first ? `operation ${first.operation_id} ${first.name}, output ${first.output_index}` : "nothing failed";
  const substitute = data.mode === "substitute";
  $("#replay-table").classList.toggle("substitute", substitute);
  const anomalies = new Map((r?.anomalies ?? []).map((a, i) => [`${a.operation_id}:${a.tensor_id}`, data.anomaly_notes[i]]));
  const rows = (r?.rows ?? []).map((row) => replayRow(row, first, anomalies, substitute));
  $("#replay-table tbody").replaceChildren(...rows);
  const notes = $("#replay-anomalies");
  notes.hidden = !anomalies.size;
  notes.replaceChildren(el("h3", {}, `Anomalies (${anomalies.size})`),
    el("ul", {}, ...[...anomalies.values()].map((text) => el("li", { className: "mono" }, text))));
}

/** One row: operation, output, name, status, verdict (or the isolated / chained / substituted verdicts), failed
 * criteria, PCC, SQNR and the notes; the first failure and the anomalies marked. */
function replayRow(row, first, anomalies, substitute) {
  const m = row.metrics;
  const tr = el("tr", { tabIndex: 0 });
  tr.dataset.opId = row.operation_id;
  tr.dataset.status = row.status;
  tr.dataset.passed = String(row.passed);
  const isFirst = !!first && first.operation_id === row.operation_id && first.output_index === row.output_index;
  tr.classList.toggle("first-failure", isFirst);
  const anomaly = anomalies.get(`${row.operation_id}:${row.output_tensor_id}`);
  tr.classList.toggle("anomaly", !!anomaly);
  const name = el("td", { title: row.name }, row.name);
  if (anomaly) name.append(" ", el("span", { className: "anomaly-mark", title: anomaly }, "\u26a0 anomaly"));
  const verdicts = substitute
    ? [row.isolated, row.chained, row.substituted].map((v) => el("td", { className: "center" }, badge(v)))
    : [el("td", { className: "center" }, badge(row.passed))];
  if (substitute && row.substitute) verdicts[2].append(" ", el("span", { className: "muted", title: "the device's own output taken as the chain's value from here on" }, "\u21c4"));
  const failed = el("td", { className: "failed" }, row.failed.join(", "));
  const devices = (row.devices ?? []).filter((d) => !d.passed).map((d) => `(${d.coordinate.join(",")})`);
  const detail = [row.detail, devices.length ? `failing devices ${devices.join(" ")}` : ""].filter(Boolean).join("; ");
  tr.append(el("td", { className: "num mono" }, String(row.operation_id)), el("td", { className: "num mono" }, String(row.output_index)),
    name, el("td", {}, row.status.replaceAll("_", " ")), ...verdicts, failed,
    el("td", { className: "num mono" }, m ? fmtPcc(m.pcc) : ""), el("td", { className: "num mono" }, m ? fmtDb(m) : ""),
    el("td", { className: "notes", title: detail }, detail));
  return tr;
}

/** An output's SQNR in dB with one decimal: "exact" without error, "\u2212\u221e" where SQNR cannot see the error
 * (the API sends none for both; the max error tells them apart). */
function fmtDb(m) {
  const x = num(m.sqnr_db);
  if (x === null) return m.max_abs_error ? "\u2212\u221e" : "exact";
  return Number.isFinite(x) ? x.toFixed(1) : x > 0 ? "exact" : "\u2212\u221e";
}

/** Open the first failing operation in the operation view. */
export function openFirstFailure() {
  const first = replayView.data?.result?.first_failure;
  if (first) openReplayOperation(first.operation_id);
}

/** Open operation ``id`` in the operation view (the Operations tab). */
export function openReplayOperation(id) {
  changed("tab", { which: "ops" });
  changed("wanted-operation", { id });
}
