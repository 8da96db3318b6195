// The shared view of the heatmaps: zoom and pan, fetching the pooled grids of the visible region, colouring.

import { ApiError, api, enc } from "./api.js";
import { Scale } from "./colour.js";
import { $, debounce, reportError } from "./dom.js";
import { num } from "./format.js";
import { placement } from "./panel.js";
import { dims2d, panels, state, tol, viewShape } from "./state.js";
import { changed } from "./store.js";

export function currentErrorKind() {
  return $("#error-kind").value;
}

export function resetView() {
  const t = state.tensor;
  if (!t) return;
  const [H, W] = dims2d(viewShape(t));
  state.view = { y0: 0, y1: H, x0: 0, x1: W, H, W };
  const asked = (t.restoreView || "").match(/^(\d+):(\d+),(\d+):(\d+)$/);
  t.restoreView = null;
  if (asked) {
    const [y0, y1, x0, x1] = asked.slice(1).map(Number);
    if (y0 < y1 && y1 <= H && x0 < x1 && x1 <= W) Object.assign(state.view, { y0, y1, x0, x1 });
  }
  for (const p of Object.values(panels)) {
    p.grid = p.image = p.overlayGrid = null;
  }
  fetchHeatmaps();
}

/** Move the shared view (all panels zoom and pan together), clamped to the tensor; redraw now, fetch soon. */
export function setView(y0, y1, x0, x1) {
  const v = state.view;
  if (!v) return;
  const minSpan = (n) => Math.min(n, 2);
  const clampSpan = (a, b, n) => {
    let span = Math.max(minSpan(n), Math.min(n, b - a));
    let lo = Math.max(0, Math.min(a, n - span));
    return [lo, lo + span];
  };
  [v.y0, v.y1] = clampSpan(y0, y1, v.H);
  [v.x0, v.x1] = clampSpan(x0, x1, v.W);
  drawAll();
  fetchHeatmapsSoon();
  changed("view", { soon: true });
}

/** Zoom by `factor` (>1 in) keeping the source point at fractions (fy, fx) of the view where it is. */
export function zoom(factor, fy = 0.5, fx = 0.5) {
  const v = state.view;
  if (!v) return;
  const h = (v.y1 - v.y0) / factor;
  const w = (v.x1 - v.x0) / factor;
  const py = v.y0 + fy * (v.y1 - v.y0);
  const px = v.x0 + fx * (v.x1 - v.x0);
  setView(py - fy * h, py - fy * h + h, px - fx * w, px - fx * w + w);
}

export function pan(dy, dx) {
  const v = state.view;
  if (!v) return;
  setView(v.y0 + dy, v.y1 + dy, v.x0 + dx, v.x1 + dx);
}

export function drawAll() {
  for (const p of Object.values(panels)) if (p.visible) p.draw();
  const v = state.view;
  if (!v) return;
  const r = requestRegion();
  const text = `rows ${r.y0}\u2013${r.y1 - 1} of ${v.H} \u00b7 cols ${r.x0}\u2013${r.x1 - 1} of ${v.W}`;
  if ($("#region-info").textContent !== text) $("#region-info").textContent = text; // unchanged: no layout on hover
}

/** The integer region the server is asked for: the view widened to whole elements. */
export function requestRegion() {
  const v = state.view;
  return {
    y0: Math.max(0, Math.floor(v.y0)), y1: Math.min(v.H, Math.ceil(v.y1)),
    x0: Math.max(0, Math.floor(v.x0)), x1: Math.min(v.W, Math.ceil(v.x1)),
  };
}

function commonParams(p) {
  const t = state.tensor;
  const r = requestRegion();
  const at = placement(p.canvas, state.view);
  return {
    index: t.lead.join(","), y: `${r.y0}:${r.y1}`, x: `${r.x0}:${r.x1}`,
    width: Math.max(1, Math.round(at.s * (r.x1 - r.x0))), height: Math.max(1, Math.round(at.s * (r.y1 - r.y0))), rank: t.ref.rank, device: t.device, format: "json",
  };
}

/** How the golden panel asks for the golden of the current region: the whole golden for the assembled tensor; in
 * device view the part of the golden the shard covers (api/golden-part's box: the region shifted by the box's
 * origin, the grid shifted back so it lies over the shard's view), or the golden's own shard when the golden is
 * sharded per device. `why` says why there is none. */
function goldenRequest(t) {
  if (!t.goldenInfo) return { params: null, why: `golden tensor ${t.record?.golden_tensor_id} is not stored`, label: "" };
  const same = { params: { device: null }, back: (x) => x, label: "" };
  if (!t.device) return same;
  const part = t.goldenPart;
  if (!part || part.error) return { params: null, why: part?.error || "the device's golden part is being located", label: "" };
  if (part.box === null) return { params: { device: t.device }, back: (x) => x, label: ` @${t.device}` };
  const box = part.box;
  const n = box.length;
  if (n < 2) return same;
  const r = requestRegion();
  const [dy, dx] = [box[n - 2][0], box[n - 1][0]];
  const params = {
    index: t.lead.map((v, i) => v + box[i][0]).join(","), y: `${r.y0 + dy}:${r.y1 + dy}`, x: `${r.x0 + dx}:${r.x1 + dx}`,
    device: null,
  };
  const back = (x) => ({ ...x, y: [x.y[0] - dy, x.y[1] - dy], x: [x.x[0] - dx, x.x[1] - dx] });
  return { params, back, label: ` [${box.map(([a, b]) => `${a}:${b}`).join(", ")}] (device ${t.device}'s part)` };
}

/** Ask the server for every visible panel's pooled grid of the current region, then recolour and redraw. */
export async function fetchHeatmaps() {
  const t = state.tensor;
  if (!t || !state.view) return;
  for (const p of Object.values(panels)) if (p.visible) p.fit();
  const jobs = [];
  const get = (p, path, params, overlay = false) => {
    if (!overlay) {
      p.controller?.abort();
      p.controller = new AbortController();
    }
    const signal = overlay ? p.overlayController.signal : p.controller.signal;
    return api(path, { ...commonParams(p), ...params }, signal);
  };
  const rep = enc(state.report);
  // A golden or error grid that cannot be had (a per-device view of a global golden the server cannot split)
  // leaves a message in its panel; a failure of the actual values is an error.
  const soft = (p) => (err) => {
    if (err?.name === "AbortError") throw err;
    if (!(err instanceof ApiError) || err.status >= 500) throw err;
    p.grid = null;
    p.message = err.message;
  };
  for (const p of Object.values(panels)) p.message = "";
  const a = panels.actual;
  jobs.push(get(a, `api/reports/${rep}/tensors/${t.ref.tensor_id}/heatmap`, {}).then((g) => { a.grid = g; }));
  const g = panels.golden;
  const golden = goldenRequest(t);
  if (t.kind && golden.params) {
    jobs.push(get(g, `api/reports/${rep}/tensors/${t.record.golden_tensor_id}/heatmap`, golden.params)
      .then((x) => { g.grid = golden.back(x); }, soft(g)));
  } else {
    g.grid = null;
    g.message = t.kind ? golden.why : "";
  }
  $(".panel-sub", g.figure).textContent = t.kind ? `tensor ${t.record.golden_tensor_id}${golden.label}` : "";
  const e = panels.error;
  if (t.kind) {
    const kind = currentErrorKind();
    const base = `api/compare-tensor/${t.kind}/${t.ref.tensor_id}/heatmap`;
    const tols = { report: state.report, rtol: tol().rtol, atol: tol().atol };
    jobs.push(get(e, base, { error: kind, ...tols }).then((x) => { e.grid = x; }, soft(e)));
    e.overlayController?.abort();
    e.overlayController = new AbortController();
    if (kind !== "mask" && $("#mark-mismatch").checked) {
      jobs.push(get(e, base, { error: "mask", ...tols }, true).then((x) => { e.overlayGrid = x; }, () => { e.overlayGrid = null; }));
    } else {
      e.overlayGrid = null;
    }
  }
  try {
    await Promise.all(jobs);
  } catch (err) {
    reportError(err);
    return;
  }
  if (state.tensor !== t) return;
  recolour();
}

export const fetchHeatmapsSoon = debounce(fetchHeatmaps, 120);

/** Colour scales from the grids just received: actual and golden share one, the error panel has its own. */
export function recolour() {
  const t = state.tensor;
  const a = panels.actual;
  const g = panels.golden;
  const e = panels.error;
  const values = [a.grid, g.grid].filter(Boolean);
  if (values.length) {
    const lo = Math.min(...values.map((x) => num(x.min) ?? 0));
    const hi = Math.max(...values.map((x) => num(x.max) ?? 0));
    const scale = lo < 0 ? new Scale("diverging", -Math.max(-lo, hi), Math.max(-lo, hi)) : new Scale("sequential", 0, hi || 1);
    for (const p of [a, g]) if (p.grid) p.paint(scale);
  }
  const pooled = (p) => (p.grid ? `${p.grid.cell[0]}\u00d7${p.grid.cell[1]} per cell` : "");
  for (const p of [a, g, e]) {  // what each panel shows, for tests and tools that read the page
    $(".legend", p.figure).style.visibility = p.grid ? "visible" : "hidden";
    p.figure.dataset.region = p.grid ? `${p.grid.y[0]}:${p.grid.y[1]},${p.grid.x[0]}:${p.grid.x[1]}` : "";
    p.figure.dataset.cell = p.grid ? p.grid.cell.join(",") : "";
  }
  $(".panel-sub", a.figure).textContent = `t${t.ref.tensor_id}` + (t.device ? ` @${t.device}` : "") + ` \u00b7 ${pooled(a)}`;
  if (t.kind && !e.grid) $(".panel-sub", e.figure).textContent = "";
  if (t.kind && e.grid) {
    const kind = currentErrorKind();
    const hi = num(e.grid.max) ?? 0;
    const positive = e.grid.grid.flat().map(num).filter((x) => x > 0 && Number.isFinite(x));
    const lo = positive.length ? Math.min(...positive) : 0;
    const scale = kind === "mask" ? new Scale("mask", 0, 1) : new Scale("sequential", $("#log-scale").checked ? lo : 0, hi || 1, $("#log-scale").checked);
    e.paint(scale);
    if (kind === "mask") {
      let cells = 0;
      for (const row of e.grid.grid) for (const x of row) if (num(x) > 0) cells++;
      e.figure.dataset.mismatchCells = String(cells);
    }
    if (e.overlayGrid) {
      let cells = 0;
      for (const row of e.overlayGrid.grid) for (const x of row) if (num(x) > 0) cells++;
      e.figure.dataset.mismatchCells = String(cells);
    }
    const names = { abs: "|a \u2212 g|", rel: "|a \u2212 g| / |g|", ulp: "ULP distance", mask: "mismatch mask" };
    $(".panel-title", e.figure).textContent = names[kind];
    $(".panel-sub", e.figure).textContent = (e.overlayGrid ? "red: outside rtol/atol \u00b7 " : "") + pooled(e);
  }
  drawAll();
}
