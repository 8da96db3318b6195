// Run against run: the matched outputs' table, verdicts, and the A / B / |A-B| heatmaps of one pair.

import { api } from "./api.js";
import { Scale, gridImage } from "./colour.js";
import { $, $$, reportError, showStatus } from "./dom.js";
import { fmt, fmtInt, fmtPcc, num } from "./format.js";
import { openOperationById, showReportSummary, switchTab } from "./oplist.js";
import { dims2d, state } from "./state.js";
import { changed } from "./store.js";
import { badge } from "./tables.js";

export let runData = null;
/** The open pair: its row, view window, leading indices, the grids drawn and their scales (for hover). */
export const runPair = { row: null, view: null, lead: [], seq: 0, grids: null, scales: null };

/** Tolerances of run against run: the fields the user filled; empty ones stay the policy's for each dtype. */
export function runTolerances() {
  const out = {};
  for (const k of ["rtol", "atol", "pcc"]) if ($(`#run-${k}`).value !== "") out[k] = $(`#run-${k}`).value;
  return out;
}

export async function compareRuns() {
  const a = $("#run-a").value;
  const b = $("#run-b").value;
  $("#run-summary").textContent = "comparing\u2026";
  $("#run-jump").disabled = true;
  $("#run-pair").hidden = true;
  runPair.row = null;
  try {
    runData = await api("api/runs", { a, b, ...runTolerances() });
  } catch (err) {
    $("#run-summary").textContent = "";
    reportError(err);
    return;
  }
  const tbody = $("#run-table tbody");
  tbody.replaceChildren();
  const counts = { identical: 0, within_tolerance: 0, diverges: 0 };
  runData.items.forEach((row, i) => {
    const tr = document.createElement("tr");
    tr.tabIndex = 0;
    tr.dataset.row = i;
    tr.dataset.verdict = row.verdict ?? "";
    if (row.first_divergence) tr.classList.add("divergence");
    if (row.verdict in counts) counts[row.verdict]++;
    const verdict = row.verdict ? row.verdict.replace("_", " ") + (row.failed?.length ? `: ${row.failed.join(", ")}` : "") : row.status ?? "";
    const cells = [
      [row.operation_id_a, "num mono"], [row.operation_id_b, "num mono"], [row.name, ""], [row.output_index, "num mono"],
      [`${row.tensor_a} / ${row.tensor_b}`, "num mono"], [row.shape ? row.shape.join("\u00d7") : "", "mono"],
      [fmtPcc(row.pcc), "num mono" + (row.passed === false ? " pcc-fail" : "")], [fmt(row.max_abs_error), "num mono"],
      [row.ulp_max === null || row.ulp_max === undefined ? "" : fmtInt(row.ulp_max), "num mono"],
      [(row.flags || []).join(", ") || (row.status !== "compared" ? row.status || "" : ""), "muted"],
      [verdict, row.verdict === "diverges" ? "pcc-fail" : ""],
    ];
    for (const [text, cls] of cells) {
      const td = document.createElement("td");
      td.className = cls;
      td.textContent = text ?? "";
      tr.append(td);
    }
    const res = document.createElement("td");
    res.className = "center";
    res.append(badge(row.passed));
    tr.append(res);
    const open = () => openRunPair(i);
    tr.addEventListener("click", open);
    tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") open(); });
    tbody.append(tr);
  });
  const first = runData.first_divergence;
  $("#run-jump").disabled = !first;
  $("#run-summary").textContent = `${runData.items.length} outputs compared: ${counts.identical} identical, ` +
    `${counts.within_tolerance} within tolerance, ${counts.diverges} diverge` +
    (first ? ` \u00b7 first divergence: op ${first.operation_id_b} ${first.name}` : " \u00b7 no divergence");
  changed("view");
}

/** Open the first diverging output's A-against-B view, its row kept in sight in the table above it. */
export async function jumpToDivergence() {
  const tr = $("#run-table tbody tr.divergence");
  if (!tr) return;
  tr.focus({ preventScroll: true });
  await openRunPair(Number(tr.dataset.row));
  tr.scrollIntoView({ block: "nearest" }); // once the pair's panels are drawn and took their room
}

/** Show matched output `i` of the runs as A, B and |A-B| heatmaps over one shared, zoomable view (resolved once
 * they are drawn): the whole of its first matrix, or the window ``view`` ("y0:y1,x0:x1") at leading indices
 * ``lead`` where a restored URL names them and they lie within the output. */
export async function openRunPair(i, view = null, lead = null) {
  const row = runData?.items[i];
  if (!row) return;
  for (const tr of $$("#run-table tbody tr")) tr.setAttribute("aria-selected", String(Number(tr.dataset.row) === i));
  runPair.row = i;
  if (!row.shape || row.status !== "compared") {
    $("#run-pair").hidden = true;
    showStatus(`output ${row.output_index} of op ${row.operation_id_b}: ${row.status || "not compared"}`);
    return;
  }
  const [H, W] = dims2d(row.shape);
  runPair.view = { y0: 0, y1: H, x0: 0, x1: W, H, W };
  runPair.lead = row.shape.slice(0, -2).map(() => 0);
  const dims = row.shape.slice(0, -2);
  if (lead && lead.length === dims.length && lead.every((k, d) => Number.isInteger(k) && k >= 0 && k < dims[d])) runPair.lead = lead;
  const asked = (view || "").match(/^(\d+):(\d+),(\d+):(\d+)$/);
  if (asked) {
    const [y0, y1, x0, x1] = asked.slice(1).map(Number);
    if (y0 < y1 && y1 <= H && x0 < x1 && x1 <= W) Object.assign(runPair.view, { y0, y1, x0, x1 });
  }
  $("#run-pair").hidden = false;
  $("#run-pair-title").textContent = `#${row.operation_id_a} / #${row.operation_id_b} ${row.name} out${row.output_index}: ` +
    `t${row.tensor_a} (A) against t${row.tensor_b} (B) \u00b7 ${(row.verdict ?? "").replace("_", " ")}`;
  changed("run-pair", row);
  await fetchRunPair();
}

/** Show the pair's window ``[y0, y1) x [x0, x1)`` at leading indices ``lead``. */
export function setRunView(lead, y0, y1, x0, x1) {
  runPair.lead = lead;
  Object.assign(runPair.view, { y0, y1, x0, x1 });
  fetchRunPair();
}

export function zoomRunPair(factor) {
  const v = runPair.view;
  if (!v) return;
  const h = Math.max(1, Math.round((v.y1 - v.y0) / factor));
  const w = Math.max(1, Math.round((v.x1 - v.x0) / factor));
  const cy = (v.y0 + v.y1) / 2;
  const cx = (v.x0 + v.x1) / 2;
  const y0 = Math.max(0, Math.min(v.H - Math.min(h, v.H), Math.round(cy - h / 2)));
  const x0 = Math.max(0, Math.min(v.W - Math.min(w, v.W), Math.round(cx - w / 2)));
  Object.assign(v, { y0, y1: y0 + Math.min(h, v.H), x0, x1: x0 + Math.min(w, v.W) });
  fetchRunPair();
}

/** Fetch A, B and |A-B| of the shared region as grids with square cells, then paint them (A and B on one scale). */
async function fetchRunPair() {
  const row = runData.items[runPair.row];
  const v = runPair.view;
  const h = v.y1 - v.y0;
  const w = v.x1 - v.x0;
  const room = Math.min(340 / w, 260 / h);
  const fit = room >= 1 ? Math.floor(room) : room; // whole pixels per element where they fit: square cells
  const cw = Math.max(1, Math.round(w * fit));
  const ch = Math.max(1, Math.round(h * fit));
  const lead = runPair.lead.join(",");
  const base = {
    a: runData.a, b: runData.b, tensor_a: row.tensor_a, tensor_b: row.tensor_b, index: lead, y: `${v.y0}:${v.y1}`,
    x: `${v.x0}:${v.x1}`, width: Math.min(cw, w), height: Math.min(ch, h), format: "json",
  };
  const seq = ++runPair.seq;
  let grids;
  try {
    grids = await Promise.all(["a", "b", "error"].map((side) =>
      api("api/runs/heatmap", { ...base, side, ...(side === "error" ? { error: "abs", ...runTolerances() } : {}) })));
  } catch (err) {
    reportError(err);
    return;
  }
  if (seq !== runPair.seq) return;
  const lo = Math.min(num(grids[0].min) ?? 0, num(grids[1].min) ?? 0);
  const hi = Math.max(num(grids[0].max) ?? 0, num(grids[1].max) ?? 0);
  const values = lo < 0 ? new Scale("diverging", -Math.max(-lo, hi), Math.max(-lo, hi)) : new Scale("sequential", 0, hi || 1);
  const errors = new Scale("sequential", 0, num(grids[2].max) || 1);
  ["a", "b", "error"].forEach((side, k) => {
    const fig = $(`#run-pair .run-panel[data-side="${side}"]`);
    const canvas = $("canvas", fig);
    canvas.width = cw;
    canvas.height = ch;
    const scale = side === "error" ? errors : values;
    const image = gridImage(grids[k], (x) => { const i = scale.index(x) * 3; return [scale.table[i], scale.table[i + 1], scale.table[i + 2], 255]; });
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(image, 0, 0, cw, ch);
    fig.dataset.region = `${grids[k].y[0]}:${grids[k].y[1]},${grids[k].x[0]}:${grids[k].x[1]}`;
    fig.dataset.cell = grids[k].cell.join(",");
    fig.dataset.max = String(num(grids[k].max));
    $(".scale", fig).textContent = `${grids[k].cell.join("\u00d7")} per cell`;
    scale.legend(fig);
  });
  Object.assign(runPair, { grids, scales: [values, values, errors] });
  $("#run-region").textContent = `rows ${v.y0}\u2013${v.y1 - 1} of ${v.H} \u00b7 cols ${v.x0}\u2013${v.x1 - 1} of ${v.W}`;
  changed("view");
}

/** Open a run-vs-run row's operation of run B in the operations view. */
export async function openRunRow(row) {
  state.report = $("#run-b").value;
  $("#report-select").value = state.report;
  showReportSummary();
  switchTab("ops");
  await openOperationById(row.operation_id_b, { tensorId: row.tensor_b });
}
