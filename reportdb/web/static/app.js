// reportdb page: operations, tensors and their goldens, side by side, over the reportdb.web HTTP API.
// Plain ES2020 module, no framework and no build step. Every request URL is relative to the page, so the
// page works under any mount prefix. Heatmaps are JSON grids pooled by the server (max |value| per cell)
// and painted on canvases here, so the colour scale, legend, zoom and hover stay on the client.

import { mountOverview } from "./overview.js";
import { mountPolicy, policyParams } from "./policy.js";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

// ---------------------------------------------------------------------------------------------------------
// HTTP

/** An error answer of the API: its message, the hint it gave and the HTTP status. */
class ApiError extends Error {
  constructor(message, hint, status) {
    super(message);
    this.hint = hint;
    this.status = status;
  }
}

/** GET a JSON endpoint (path relative to the page) with query parameters; null/"" parameters are left out. */
async function api(path, params = {}, signal = undefined) {
  const url = new URL(path, document.baseURI);
  for (const [k, v] of Object.entries({ ...policyParams(), ...params })) {
    if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, String(v));
  }
  const response = await fetch(url, { signal, headers: { Accept: "application/json" } });
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    throw new ApiError(body?.error || `${response.status} ${response.statusText}`, body?.hint || "", response.status);
  }
  return body;
}

const enc = encodeURIComponent;

/** A new element with properties and text or child nodes. Report text only ever reaches the page as text (no
 * string is parsed as HTML anywhere on this page), since a report is someone else's data. */
function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

let statusTimer = 0;
/** Show a message in the status bar (errors stay until replaced or closed by time). */
function showStatus(message, kind = "error") {
  const el = $("#status");
  el.textContent = message;
  el.className = kind;
  el.hidden = false;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => { el.hidden = true; }, kind === "error" ? 9000 : 2500);
}

/** Report a failed request to the user (message and hint); aborted requests are silent. */
function reportError(err) {
  if (err?.name === "AbortError") return;
  const hint = err?.hint ? ` \u2014 ${err.hint}` : "";
  showStatus(`${err?.message || err}${hint}`);
  console.error(err);
}

function debounce(fn, ms) {
  let t = 0;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}

// ---------------------------------------------------------------------------------------------------------
// Numbers

/** A JSON number of the API as a JS number ("nan", "inf", "-inf" are how non-finite values travel). */
function num(v) {
  if (v === "nan") return NaN;
  if (v === "inf") return Infinity;
  if (v === "-inf") return -Infinity;
  return v === null || v === undefined ? null : Number(v);
}

/** A value with `digits` significant digits, exponent form for very small or large magnitudes. */
function fmt(v, digits = 6) {
  const x = num(v);
  if (x === null) return "\u2014";
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "+Inf" : "-Inf";
  if (Number.isInteger(x) && Math.abs(x) < 1e9) return String(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(digits - 1).replace(/\.?0+e/, "e");
  return String(Number(x.toPrecision(digits)));
}

const fmtPcc = (v) => (num(v) === null ? "\u2014" : num(v).toFixed(6));
const fmtInt = (v) => (v === null || v === undefined ? "\u2014" : Number(v).toLocaleString("en-US"));

function fmtBytes(n) {
  if (n === null || n === undefined) return "\u2014";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let x = n;
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return `${i ? x.toFixed(1) : x} ${units[i]}`;
}

// ---------------------------------------------------------------------------------------------------------
// Colour scales

/** A 256-entry lookup table interpolated between evenly spaced anchor colours. */
function lut(anchors) {
  const out = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = (i / 255) * (anchors.length - 1);
    const k = Math.min(Math.floor(t), anchors.length - 2);
    const f = t - k;
    for (let c = 0; c < 3; c++) out[i * 3 + c] = anchors[k][c] + (anchors[k + 1][c] - anchors[k][c]) * f;
  }
  return out;
}

// Diverging (signed values): blue below zero, white at zero, red above (ColorBrewer RdBu, reversed).
const DIVERGING = lut([[5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43], [103, 0, 31]]);
// Sequential (magnitudes, errors): viridis.
const SEQUENTIAL = lut([[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
  [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]]);
const MASK = lut([[236, 239, 243], [206, 32, 41]]);
const NAN_RGB = [255, 0, 255];

/**
 * How a panel maps values to colours: the colour table, the value range and whether it is symmetric around
 * zero (diverging) or logarithmic. `lo`/`hi` are the legend ends.
 */
class Scale {
  constructor(kind, lo, hi, log = false) {
    this.kind = kind;
    this.log = log && kind === "sequential" && hi > 0;
    this.table = kind === "diverging" ? DIVERGING : kind === "mask" ? MASK : SEQUENTIAL;
    if (this.log) {
      this.lo = lo > 0 ? lo : hi * 1e-6;
      this.hi = hi;
    } else {
      this.lo = lo;
      this.hi = hi > lo ? hi : lo + (lo === 0 ? 1 : Math.abs(lo));
    }
  }

  /** The colour table index of a finite value. */
  index(x) {
    let t;
    if (this.log) t = x <= this.lo ? 0 : Math.log(x / this.lo) / Math.log(this.hi / this.lo);
    else t = (x - this.lo) / (this.hi - this.lo);
    return Math.max(0, Math.min(255, Math.round(t * 255)));
  }

  /** Paint the legend bar and its end labels. */
  legend(figure) {
    const bar = $(".legend canvas", figure);
    const ctx = bar.getContext("2d");
    const img = ctx.createImageData(bar.width, bar.height);
    for (let x = 0; x < bar.width; x++) {
      const i = Math.round((x / (bar.width - 1)) * 255);
      for (let y = 0; y < bar.height; y++) {
        const p = (y * bar.width + x) * 4;
        img.data[p] = this.table[i * 3];
        img.data[p + 1] = this.table[i * 3 + 1];
        img.data[p + 2] = this.table[i * 3 + 2];
        img.data[p + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    if (this.kind === "mask") {
      $(".legend .lo", figure).textContent = "within tol";
      $(".legend .hi", figure).textContent = "mismatch";
    } else {
      $(".legend .lo", figure).textContent = fmt(this.lo, 3) + (this.log ? " (log)" : "");
      $(".legend .hi", figure).textContent = fmt(this.hi, 3);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// State

const state = {
  reports: [],
  report: null, // name
  ops: { filter: "", sort: "id", order: "asc", offset: 0, limit: 100, total: 0, items: [], first: null, judged: false },
  restore: null, // the view a pasted URL asks for, applied as its operation and tensor open
  opId: null,
  op: null,
  tensor: null, // {ref, kind, info, goldenInfo, device, lead, record}
  view: null, // {y0, y1, x0, x1} in source rows/cols (floats), over a H x W 2-D view
  hover: null, // {r, c} source element under the pointer
  compareSeq: 0,
};

// Default rtol/atol per dtype, as torch.testing.assert_close chooses them; the coarser side of a pair decides.
let tolTouched = false;

/** Set rtol/atol to the tolerance policy's for this tensor (its operation and dtype: the API's verdicts use the
 * same), unless the user has chosen tolerances. */
function defaultTolerances(policy) {
  if (tolTouched || !policy) return;
  $("#rtol").value = fmt(policy.rtol, 4);
  $("#atol").value = fmt(policy.atol, 4);
  $("#rtol").title = $("#atol").title = `the tolerance policy's for ${policy.dtype}` + (policy.operation ? ` (${policy.operation})` : "") + "; edit to override";
}

/** The tolerances requests carry: rtol/atol only once the user chose them (until then the server applies the
 * policy's exact values, which the fields show rounded), and the PCC threshold. */
const tol = () => ({
  rtol: tolTouched ? $("#rtol").value || null : null,
  atol: tolTouched ? $("#atol").value || null : null,
  pcc: $("#pcc").value || "0.99",
});

// ---------------------------------------------------------------------------------------------------------
// Reports and the operation list

async function loadReports() {
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

function showReportSummary() {
  const r = state.reports.find((x) => x.name === state.report);
  $("#report-summary").textContent = r
    ? `${fmtInt(r.operations)} operations \u00b7 ${fmtInt(r.tensors)} tensors \u00b7 ${fmtBytes(r.bytes)} \u00b7 ${fmtInt(r.comparisons)} golden records` +
      (r.ttnn_version ? ` \u00b7 ttnn ${r.ttnn_version}` : "")
    : "no report served";
}

const loadOps = async () => {
  if (!state.report) return;
  const o = state.ops;
  try {
    const data = await api(`api/reports/${enc(state.report)}/operations`, {
      filter: o.filter, sort: o.sort, order: o.order, offset: o.offset, limit: o.limit,
    });
    o.total = data.total;
    o.items = data.items;
    o.first = data.first_culprit;
    o.judged = data.judged;
    renderOps();
    showCulprit();
  } catch (err) {
    reportError(err);
  }
};

/** The badge of an output's role (culprit, victim, pass) as the API's golden analysis gives it. */
function roleBadge(role) {
  const span = document.createElement("span");
  span.className = `badge ${role === "culprit" ? "culprit" : role === "victim" ? "victim" : role === "pass" ? "pass" : "none"}`;
  span.textContent = role ?? "\u2014";
  span.dataset.role = role ?? "";
  return span;
}

/** The first culprit line above the list and its jump control. */
function showCulprit() {
  const first = state.ops.first;
  $("#jump-culprit").disabled = !first;
  $("#culprit-info").textContent = first
    ? `first culprit: #${first.operation_id} ${first.name} (t${first.tensor_id})`
    : state.ops.judged ? "no culprit: every local comparison passes" : "roles unknown (report too large for a request)";
}

/** Open the first culprit's operation and its culprit output. */
async function jumpToCulprit() {
  const first = state.ops.first;
  if (!first) return;
  await openOperationById(first.operation_id, { tensorId: first.tensor_id });
}

/** The badge of a pass/fail/unknown golden status. */
function badge(passed) {
  const span = document.createElement("span");
  span.className = `badge ${passed === true ? "pass" : passed === false ? "fail" : "none"}`;
  span.textContent = passed === true ? "pass" : passed === false ? "FAIL" : "\u2014";
  return span;
}

function renderOps() {
  const tbody = $("#op-table tbody");
  const o = state.ops;
  const rows = o.items.map((op) => {
    const tr = document.createElement("tr");
    tr.dataset.opId = op.id;
    tr.tabIndex = -1;
    tr.setAttribute("aria-selected", String(op.id === state.opId));
    const pcc = document.createElement("td");
    pcc.className = "num mono" + (op.passed === false ? " pcc-fail" : "");
    pcc.textContent = op.worst_pcc === null ? "" : fmtPcc(op.worst_pcc);
    const status = document.createElement("td");
    status.className = "center";
    status.append(badge(op.passed));
    const id = document.createElement("td");
    id.className = "num mono";
    id.textContent = op.id;
    const name = document.createElement("td");
    name.textContent = op.name;
    name.title = op.name;
    const role = document.createElement("td");
    role.className = "center";
    role.append(roleBadge(op.role));
    tr.classList.toggle("first-culprit", !!o.first && op.id === o.first.operation_id);
    tr.append(id, name, pcc, status, role);
    return tr;
  });
  tbody.replaceChildren(...rows);
  const focusRow = rows.find((r) => r.getAttribute("aria-selected") === "true") || rows[0];
  if (focusRow) focusRow.tabIndex = 0;
  if (!rows.length) {
    tbody.append(el("tr", {}, el("td", { colSpan: 5, className: "muted" }, "No operation matches.")));
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

function setSort(sort, order) {
  Object.assign(state.ops, { sort, order, offset: 0 });
  loadOps();
}

// ---------------------------------------------------------------------------------------------------------
// One operation

function selectOp(op, { tensorId = null } = {}) {
  state.opId = op.id;
  state.op = op;
  for (const tr of $$("#op-table tbody tr")) {
    const on = Number(tr.dataset.opId) === op.id;
    tr.setAttribute("aria-selected", String(on));
    tr.tabIndex = on ? 0 : -1;
  }
  $("#empty-detail").hidden = true;
  $("#op-detail").hidden = false;
  $("#op-title").replaceChildren(el("span", { className: "mono" }, `#${op.id} `), document.createTextNode(op.name));

  const chips = $("#op-tensors");
  chips.replaceChildren();
  const group = (label, refs) => {
    if (!refs.length) return;
    const l = document.createElement("span");
    l.className = "group-label";
    l.textContent = label;
    chips.append(l);
    refs.forEach((ref, i) => chips.append(tensorChip(ref, `${label === "inputs" ? "in" : "out"}${i}`)));
  };
  group("inputs", op.inputs);
  group("outputs", op.outputs);
  // Open the first output with a golden record, else the first stored output, else the first stored input.
  const withGolden = op.outputs.find((t) => t.stored && (t.comparisons.local || t.comparisons.global));
  const pick = withGolden || op.outputs.find((t) => t.stored) || op.inputs.find((t) => t.stored);
  const wanted = tensorId ?? (state.restore?.tensor !== undefined ? Number(state.restore.tensor) : null);
  const chosen = [...op.outputs, ...op.inputs].find((t) => t.tensor_id === wanted && t.stored);
  if (chosen || pick) openTensor(chosen || pick);
  else {
    $("#tensor-view").hidden = true;
    state.tensor = null;
    state.restore = null;
  }
  loadContext(op.id);
  writeHash();
}

function tensorChip(ref, label) {
  const b = document.createElement("button");
  b.className = "chip";
  b.dataset.tensorId = ref.tensor_id;
  b.setAttribute("aria-pressed", "false");
  const rec = ref.comparisons.local || ref.comparisons.global;
  const shape = ref.shape ? ref.shape.join("\u00d7") : "?";
  b.append(el("span", {}, label), el("b", {}, `t${ref.tensor_id}`), el("span", { className: "mono" }, `${shape} ${ref.dtype ?? ""}`));
  if (rec) {
    const pcc = rec.pcc ?? rec.recorded_pcc;
    const passed = rec.passed ?? (rec.recorded_pcc === null || rec.desired_pcc === null ? null : rec.recorded_pcc >= rec.desired_pcc);
    const bdg = badge(passed);
    bdg.textContent = pcc === null ? "golden" : fmtPcc(pcc);
    b.append(bdg);
    const role = ref.comparisons.local?.role ?? ref.comparisons.global?.role;
    if (role && role !== "pass") b.append(roleBadge(role));
  }
  if (!ref.stored) {
    b.disabled = true;
    b.title = "values not stored in this report";
  } else {
    b.title = rec ? `tensor ${ref.tensor_id}, golden tensor ${rec.golden_tensor_id}` : `tensor ${ref.tensor_id}`;
  }
  b.addEventListener("click", () => openTensor(ref));
  return b;
}

// ---------------------------------------------------------------------------------------------------------
// One tensor (with its golden when it has a comparison record)

async function openTensor(ref, { kind: wantedKind = null } = {}) {
  for (const c of $$("#op-tensors .chip")) c.setAttribute("aria-pressed", String(Number(c.dataset.tensorId) === ref.tensor_id));
  const restore = state.restore && Number(state.restore.tensor) === ref.tensor_id ? state.restore : null;
  state.restore = null;
  const kinds = ["local", "global"].filter((k) => ref.comparisons[k]);
  const asked = wantedKind ?? restore?.kind;
  const kind = kinds.includes(asked) ? asked : kinds[0] || null;
  $("#kind-field").hidden = kinds.length < 2;
  const device = restore?.device || null;
  const t = { ref, kind, kinds, info: null, goldenInfo: null, device, lead: [], record: kind ? ref.comparisons[kind] : null,
    restoreView: restore?.view ?? null };
  state.tensor = t;
  state.hover = null;
  $("#tensor-view").hidden = false;
  if (restore && (restore.rtol || restore.atol)) {
    $("#rtol").value = restore.rtol ?? $("#rtol").value;
    $("#atol").value = restore.atol ?? $("#atol").value;
    tolTouched = true;
  }
  try {
    t.info = await api(`api/reports/${enc(state.report)}/tensors/${ref.tensor_id}`, { rank: ref.rank, device: t.device });
    if (t.record?.golden_tensor_id !== null && t.record?.golden_tensor_id !== undefined) {
      t.goldenInfo = await api(`api/reports/${enc(state.report)}/tensors/${t.record.golden_tensor_id}`, { rank: ref.rank })
        .catch(() => null);
    }
  } catch (err) {
    reportError(err);
    return;
  }
  if (state.tensor !== t) return;
  $("#pcc").value = restore?.pcc ?? (t.info.policy?.rule_pcc ? t.info.policy.pcc : null) ?? t.record?.desired_pcc ?? t.info.policy?.pcc ?? 0.99;
  defaultTolerances(t.info.policy);
  syncSlider();
  setupTensorControls(t);
  renderSpec(t);
  renderStats(t);
  resetView();
  refreshCompare();
  refreshHistograms();
  $("#worst-tile").hidden = !t.kind;
  showDevices(t);
  writeHash();
}

/** The shape of the 2-D view's source: the selected shard's shape, or the whole tensor's. */
function viewShape(t) {
  if (t.device) {
    const shard = t.info.shards.find((s) => s.device && s.device.join(",") === t.device);
    if (shard) return shard.shape;
  }
  return t.info.shape || [];
}

/** H x W of the 2-D view: the last two axes (a 1-D tensor is a 1 x N view, a scalar 1 x 1). */
function dims2d(shape) {
  if (shape.length === 0) return [1, 1];
  if (shape.length === 1) return [1, shape[0]];
  return [shape[shape.length - 2], shape[shape.length - 1]];
}

function setupTensorControls(t) {
  const compare = !!t.kind;
  $("#tolerance-controls").hidden = !compare;
  $("#metrics").hidden = !compare;
  $("#panel-golden").hidden = !compare;
  $("#panel-error").hidden = !compare;
  $("#error-kind").closest(".field").hidden = !compare;
  $("#mark-mismatch").closest(".check").hidden = !compare;
  $("#hist-error-fig").hidden = !compare;
  $("#heatmaps").classList.toggle("single", !compare);
  $("#kind-select").value = t.kind || "local";
  const verdict = $("#verdict");
  if (!compare) {
    verdict.dataset.passed = "";
    verdict.textContent = "no golden";
    verdict.title = "this tensor has no local or global comparison record";
  }
  // Device selector: only for multi-device tensors.
  const shards = t.info.shards || [];
  const multi = shards.length > 1 && shards.some((s) => s.device);
  $("#device-field").hidden = !multi;
  const dev = $("#device-select");
  dev.replaceChildren(new Option(t.info.shape ? "all (assembled)" : "\u2014", ""));
  for (const s of shards) if (s.device) dev.append(new Option(`device ${s.device.join(",")} \u00b7 ${s.shape.join("\u00d7")}`, s.device.join(",")));
  if (t.device && !shards.some((s) => s.device && s.device.join(",") === t.device)) t.device = null;
  if (multi && !t.info.shape && !t.device) t.device = shards[0].device.join(",");
  dev.value = t.device ?? "";
  setupLeadFields(t);
}

/** One number box per leading axis (all but the last two) to pick the 2-D slice shown. */
function setupLeadFields(t) {
  const shape = viewShape(t);
  const lead = shape.slice(0, Math.max(0, shape.length - 2));
  t.lead = lead.map((_, i) => Math.min(t.lead[i] ?? 0, lead[i] - 1));
  const box = $("#lead-fields");
  box.replaceChildren();
  const text = (t) => {
    const span = document.createElement("span");
    span.className = "mono";
    span.textContent = t;
    box.append(span);
  };
  if (lead.length) text("view [");
  lead.forEach((n, i) => {
    if (i) text(",");
    const label = box;
    const input = document.createElement("input");
    input.title = `index along axis ${i} (size ${n})`;
    Object.assign(input, { type: "number", min: 0, max: n - 1, step: 1, value: t.lead[i] });
    input.setAttribute("aria-label", `index along axis ${i}`);
    input.disabled = n <= 1;
    input.addEventListener("change", () => {
      const v = Math.max(0, Math.min(n - 1, Math.trunc(Number(input.value)) || 0));
      input.value = v;
      t.lead[i] = v;
      state.hover = null;
      fetchHeatmaps();
    });
    label.append(input);
  });
  if (lead.length) text(", :, :]");
}

function renderSpec(t) {
  const i = t.info;
  const mc = i.memory_config;
  const memText = mc
    ? [mc.memory_layout, mc.buffer_type].filter(Boolean).join(" \u00b7 ") +
      (mc.shard_spec ? ` \u00b7 shard ${JSON.stringify(mc.shard_spec.shape ?? mc.shard_spec)}` : "")
    : null;
  const rows = [
    ["tensor", `${i.tensor_id}` + (i.rank ? ` (rank ${i.rank})` : "")],
    ["shape", i.shape ? `[${i.shape.join(", ")}]` : "not assembled"],
    ["dtype", i.dtype],
    ["ttnn dtype", i.ttnn_dtype],
    ["layout", i.layout],
    ["tile", i.tile ? i.tile.join("\u00d7") : null],
    ["memory", memText || null],
    ["storage", i.storage_type],
    ["bytes", fmtBytes(i.nbytes)],
    ["mesh", i.mesh_shape ? i.mesh_shape.join("\u00d7") : null],
  ];
  if (i.shards?.length > 1) {
    rows.push(["shards", i.shards.map((s) => `${s.device ? s.device.join(",") : s.index}: ${s.shape.join("\u00d7")}`).join("\n")]);
    const pl = i.shards[0].placement;
    if (Array.isArray(pl)) rows.push(["placements", pl.map((p) => (p.kind === "shard" ? `shard(dim ${p.dim})` : p.kind)).join(", ")]);
  }
  if (t.record) {
    const g = t.goldenInfo;
    rows.push(["golden", `tensor ${t.record.golden_tensor_id}` + (g ? ` \u00b7 ${g.dtype} [${(g.shape || []).join(", ")}]` : " (not stored)")]);
    rows.push(["recorded", `PCC ${fmtPcc(t.record.recorded_pcc)} (desired ${fmt(t.record.desired_pcc)})`]);
  }
  const dl = $("#spec");
  dl.replaceChildren();
  for (const [k, v] of rows) {
    if (v === null || v === undefined || v === "") continue;
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v;
    dd.style.whiteSpace = "pre-line";
    dl.append(dt, dd);
  }
}

/** Stored statistics of one tensor as columns (one per shard for multi-device tensors). */
function statColumns(label, info) {
  if (info?.stats) return [[label, info.stats]];
  return (info?.shards || []).filter((s) => s.stats).slice(0, 8).map((s) => [`${label} @${s.device ? s.device.join(",") : s.index}`, s.stats]);
}

function renderStats(t) {
  const cols = [...statColumns("actual", t.info), ...statColumns("golden", t.goldenInfo)];
  const table = $("#stats");
  table.replaceChildren();
  if (!cols.length) {
    table.append(el("tr", {}, el("td", { className: "muted" }, "stored without statistics")));
    return;
  }
  const keys = ["count", "min", "max", "mean", "std", "absmax", "nan_count", "inf_count", "zero_count"];
  const head = document.createElement("tr");
  head.append(el("th"));
  for (const [label] of cols) {
    const th = document.createElement("th");
    th.className = "num";
    th.textContent = label;
    head.append(th);
  }
  table.append(head);
  for (const key of keys) {
    if (!cols.some(([, s]) => key in s)) continue;
    const tr = document.createElement("tr");
    const th = document.createElement("td");
    th.className = "muted";
    th.textContent = key.replace("_count", "s").replace("absmax", "max |x|");
    tr.append(th);
    for (const [, s] of cols) {
      const td = document.createElement("td");
      td.className = "num mono";
      td.textContent = fmt(s[key]);
      if (/nan|inf/.test(key) && s[key] > 0) td.classList.add("pcc-fail");
      tr.append(td);
    }
    table.append(tr);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Metrics and verdict

const METRICS = [
  ["pcc", "PCC", fmtPcc],
  ["recorded_pcc", "recorded PCC", fmtPcc],
  ["pcc_ttmetal", "PCC (tt-metal)", fmtPcc],
  ["cosine", "cosine", fmtPcc],
  ["max_abs_error", "max |a\u2212g|", fmt],
  ["mean_abs_error", "mean |a\u2212g|", fmt],
  ["max_rel_error", "max rel", fmt],
  ["mean_rel_error", "mean rel", fmt],
  ["ulp_max", "ULP max", fmt],
  ["ulp_mean", "ULP mean", fmt],
  ["allclose_mismatches", "outside rtol/atol", null],
  ["nonfinite", "NaN / Inf mismatch", null],
  ["fit", "fit g \u2248 k\u00b7a + c", null],
];
const FLAG_NAMES = ["shape_mismatch", "nonfinite_mismatch", "constant_input", "scale_or_offset_error"];

const refreshCompare = debounce(async () => {
  const t = state.tensor;
  if (!t?.kind) return;
  const seq = ++state.compareSeq;
  $("#verdict").classList.add("busy");
  try {
    const data = await api(`api/compare-tensor/${t.kind}/${t.ref.tensor_id}`, {
      report: state.report, rank: t.ref.rank, device: t.device, ...tol(),
    });
    if (seq !== state.compareSeq || state.tensor !== t) return;
    renderMetrics(data);
  } catch (err) {
    if (seq === state.compareSeq && err?.name !== "AbortError") {
      $("#verdict").dataset.passed = "";
      $("#verdict").textContent = "n/a";
      const dl = $("#metrics");
      dl.replaceChildren();
      const div = document.createElement("div");
      div.className = "flags";
      div.style.gridColumn = "1 / -1";
      div.append(el("dt", {}, "not compared"), el("dd", {}, err.hint ? `${err.message} (${err.hint})` : String(err.message || err)));
      dl.append(div);
      if (!(err instanceof ApiError) || err.status >= 500) reportError(err);
    }
  } finally {
    if (seq === state.compareSeq) $("#verdict").classList.remove("busy");
  }
}, 200);

function renderMetrics(data) {
  const m = data.metrics || {};
  const verdict = $("#verdict");
  verdict.dataset.passed = String(data.passed);
  verdict.textContent = data.passed ? "PASS" : "FAIL";
  verdict.title = `PCC ${fmtPcc(m.pcc)} against threshold ${data.tolerances?.pcc}` + (m.notes?.length ? `\n${m.notes.join("\n")}` : "");
  const dl = $("#metrics");
  dl.replaceChildren();
  const values = {
    ...m,
    recorded_pcc: data.record?.recorded_pcc ?? null,
  };
  for (const [key, label, f] of METRICS) {
    let text;
    let cls = "";
    let title = "";
    if (key === "allclose_mismatches") {
      const n = m.allclose_mismatches;
      const total = m.count;
      text = n === null || n === undefined ? "\u2014" : `${fmtInt(n)}` + (total ? ` (${((100 * n) / total).toPrecision(3)}%)` : "");
      cls = n ? "bad" : n === 0 ? "good" : "";
      title = `elements with |a-g| > atol + rtol*|g| at rtol=${data.tolerances?.rtol}, atol=${data.tolerances?.atol}, of ${fmtInt(total)}`;
    } else if (key === "nonfinite") {
      text = `${fmtInt(m.nan_mismatches)} / ${fmtInt(m.inf_mismatches)}`;
      cls = m.nan_mismatches || m.inf_mismatches ? "bad" : "";
    } else if (key === "fit") {
      if (m.fit_scale === null || m.fit_scale === undefined) continue;
      text = `k=${fmt(m.fit_scale, 4)} c=${fmt(m.fit_offset, 3)}`;
      cls = m.scale_or_offset_error ? "bad" : "";
    } else {
      if (!(key in values)) continue;
      text = f(values[key]);
      title = values[key] === null || values[key] === undefined ? "" : String(values[key]);
      if (key === "pcc") cls = data.passed ? "good" : "bad";
      if (key === "ulp_max" && m.ulp_dtype) title = `in ${m.ulp_dtype} units`;
    }
    const div = document.createElement("div");
    const dt = document.createElement("dt");
    dt.textContent = key === "ulp_max" && m.ulp_dtype ? `ULP max (${m.ulp_dtype})` : label;
    const dd = document.createElement("dd");
    dd.dataset.metric = key;
    dd.textContent = text;
    if (cls) dd.className = cls;
    if (title) dd.title = title;
    div.append(dt, dd);
    dl.append(div);
  }
  const flags = FLAG_NAMES.filter((f) => m[f]);
  if (flags.length) {
    const div = document.createElement("div");
    div.className = "flags";
    const dd = el("dd", {}, flags.map((f) => f.replaceAll("_", " ")).join(", "));
    dd.dataset.metric = "flags";
    div.append(el("dt", {}, "flags"), dd);
    dl.append(div);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Heatmap panels

/** One heatmap: its canvas, the last grid the server sent (kept as an image to redraw while zooming). */
class Panel {
  constructor(figure) {
    this.figure = figure;
    this.role = figure.dataset.role;
    this.canvas = $(".canvas-wrap canvas", figure);
    this.ctx = this.canvas.getContext("2d");
    this.grid = null; // the JSON heatmap answer
    this.image = null; // an offscreen canvas, one pixel per grid cell
    this.overlayGrid = null; // mismatch cells of the same region (error panel)
    this.controller = null;
    this.scale = null;
    this.message = ""; // why there is no grid (e.g. no per-device golden), drawn in place of one
  }

  get visible() {
    return !this.figure.hidden;
  }

  /** Size the canvas backing store to its box (device pixels); true when it changed. */
  fit() {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(this.canvas.clientWidth * dpr));
    const h = Math.max(1, Math.round(this.canvas.clientHeight * dpr));
    if (this.canvas.width === w && this.canvas.height === h) return false;
    this.canvas.width = w;
    this.canvas.height = h;
    return true;
  }

  /** Paint the grid's cells with a scale into an offscreen image, one pixel per cell. */
  paint(scale) {
    this.scale = scale;
    this.image = gridImage(this.grid, (x) => {
      const i = scale.index(x) * 3;
      return [scale.table[i], scale.table[i + 1], scale.table[i + 2], 255];
    });
    scale.legend(this.figure);
  }

  /** Redraw: the cached image placed where its region lies in the current view, then the crosshair. */
  draw() {
    const { ctx, canvas } = this;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    const v = state.view;
    if (!v) return;
    if (!this.grid && this.message) {
      ctx.fillStyle = "#667085";
      ctx.font = `${Math.round(12 * (window.devicePixelRatio || 1))}px system-ui, sans-serif`;
      ctx.textAlign = "center";
      wrapText(ctx, this.message, canvas.width / 2, canvas.height / 2, canvas.width * 0.85);
      return;
    }
    for (const [grid, image] of [[this.grid, this.image]]) {
      if (!grid || !image) continue;
      const sx = canvas.width / (v.x1 - v.x0);
      const sy = canvas.height / (v.y1 - v.y0);
      const [gy0, gy1] = grid.y;
      const [gx0, gx1] = grid.x;
      const [cy, cx] = grid.cell;
      ctx.save();
      ctx.beginPath();
      ctx.rect((gx0 - v.x0) * sx, (gy0 - v.y0) * sy, (gx1 - gx0) * sx, (gy1 - gy0) * sy);
      ctx.clip();
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(image, (gx0 - v.x0) * sx, (gy0 - v.y0) * sy, image.width * cx * sx, image.height * cy * sy);
      ctx.restore();
    }
    if (this.overlayGrid) this.drawMismatches(v);
    this.drawTiles(v);
    const h = state.hover;
    if (h) {
      const sx = canvas.width / (v.x1 - v.x0);
      const sy = canvas.height / (v.y1 - v.y0);
      const x = (h.c - v.x0) * sx;
      const y = (h.r - v.y0) * sy;
      const w = Math.max(sx, 1);
      const hh = Math.max(sy, 1);
      ctx.strokeStyle = "rgba(20,20,20,.85)";
      ctx.lineWidth = 1;
      ctx.strokeRect(Math.round(x) - 1.5, Math.round(y) - 1.5, Math.round(w) + 3, Math.round(hh) + 3);
      ctx.strokeStyle = "rgba(255,255,255,.9)";
      ctx.strokeRect(Math.round(x) - 0.5, Math.round(y) - 0.5, Math.round(w) + 1, Math.round(hh) + 1);
    }
  }

  /** Mark the cells of the mismatch grid that hold a mismatch: filled when small, outlined when large enough to
   *  keep the error colour visible inside. */
  drawMismatches(v) {
    const { ctx, canvas } = this;
    const g = this.overlayGrid;
    const sx = canvas.width / (v.x1 - v.x0);
    const sy = canvas.height / (v.y1 - v.y0);
    const [cy, cx] = g.cell;
    const w = cx * sx;
    const h = cy * sy;
    const outline = w >= 6 && h >= 6;
    ctx.save();
    ctx.fillStyle = "rgba(255, 32, 64, 0.85)";
    ctx.strokeStyle = "rgb(255, 32, 64)";
    ctx.lineWidth = Math.max(1.5, Math.min(w, h) / 8);
    g.grid.forEach((row, i) => {
      const y = (g.y[0] + i * cy - v.y0) * sy;
      if (y > canvas.height || y + h < 0) return;
      row.forEach((val, j) => {
        if (!(num(val) > 0)) return;
        const x = (g.x[0] + j * cx - v.x0) * sx;
        if (x > canvas.width || x + w < 0) return;
        if (outline) ctx.strokeRect(x + ctx.lineWidth / 2, y + ctx.lineWidth / 2, w - ctx.lineWidth, h - ctx.lineWidth);
        else ctx.fillRect(x, y, Math.max(w, 1), Math.max(h, 1));
      });
    });
    ctx.restore();
  }

  /** The tensor's tile grid (its own tile shape, 32x32 by default) over the view, once a tile is 12 pixels or more. */
  drawTiles(v) {
    const t = state.tensor;
    if (!t?.info) return;
    const [th, tw] = tileShape(t);
    const { ctx, canvas } = this;
    const sx = canvas.width / (v.x1 - v.x0);
    const sy = canvas.height / (v.y1 - v.y0);
    if (tw * sx < 12 || th * sy < 12) {
      this.figure.dataset.tiles = "";
      return;
    }
    ctx.save();
    ctx.strokeStyle = "rgba(255,255,255,.75)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let c = Math.ceil(v.x0 / tw) * tw; c <= v.x1; c += tw) {
      const x = Math.round((c - v.x0) * sx) + 0.5;
      ctx.moveTo(x, 0);
      ctx.lineTo(x, canvas.height);
    }
    for (let r = Math.ceil(v.y0 / th) * th; r <= v.y1; r += th) {
      const y = Math.round((r - v.y0) * sy) + 0.5;
      ctx.moveTo(0, y);
      ctx.lineTo(canvas.width, y);
    }
    ctx.stroke();
    ctx.restore();
    this.figure.dataset.tiles = `${th}x${tw}`;
  }

  /** The value of the pooled cell holding source element (r, c), or undefined outside the grid. */
  cellValue(r, c) {
    const g = this.grid;
    if (!g || r < g.y[0] || r >= g.y[1] || c < g.x[0] || c >= g.x[1]) return undefined;
    return g.grid[Math.floor((r - g.y[0]) / g.cell[0])]?.[Math.floor((c - g.x[0]) / g.cell[1])];
  }
}

/** Centred text broken into lines of at most `width` pixels. */
function wrapText(ctx, text, x, y, width) {
  const lines = [];
  let line = "";
  for (const word of text.split(" ")) {
    const next = line ? `${line} ${word}` : word;
    if (ctx.measureText(next).width > width && line) {
      lines.push(line);
      line = word;
    } else {
      line = next;
    }
  }
  lines.push(line);
  const step = parseInt(ctx.font, 10) * 1.4;
  lines.forEach((l, i) => ctx.fillText(l, x, y + (i - (lines.length - 1) / 2) * step));
}

/** An offscreen canvas with one pixel per grid cell coloured by `colour(x)` (NaN magenta, +-Inf the scale's ends). */
function gridImage(grid, colour) {
  const rows = grid.grid;
  const h = rows.length;
  const w = h ? rows[0].length : 0;
  const image = document.createElement("canvas");
  image.width = Math.max(1, w);
  image.height = Math.max(1, h);
  const ctx = image.getContext("2d");
  const data = ctx.createImageData(image.width, image.height);
  const px = data.data;
  for (let y = 0; y < h; y++) {
    const row = rows[y];
    for (let x = 0; x < w; x++) {
      const v = num(row[x]);
      const p = (y * w + x) * 4;
      let rgba;
      if (v === null || Number.isNaN(v)) rgba = [...NAN_RGB, 255];
      else if (!Number.isFinite(v)) rgba = colour(v > 0 ? Number.MAX_VALUE : -Number.MAX_VALUE);
      else rgba = colour(v);
      if (!rgba) continue;
      px[p] = rgba[0];
      px[p + 1] = rgba[1];
      px[p + 2] = rgba[2];
      px[p + 3] = rgba[3];
    }
  }
  ctx.putImageData(data, 0, 0);
  return image;
}

const panels = {};

function currentErrorKind() {
  return $("#error-kind").value;
}

function resetView() {
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
function setView(y0, y1, x0, x1) {
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
  writeHashSoon();
}

/** Zoom by `factor` (>1 in) keeping the source point at fractions (fy, fx) of the view where it is. */
function zoom(factor, fy = 0.5, fx = 0.5) {
  const v = state.view;
  if (!v) return;
  const h = (v.y1 - v.y0) / factor;
  const w = (v.x1 - v.x0) / factor;
  const py = v.y0 + fy * (v.y1 - v.y0);
  const px = v.x0 + fx * (v.x1 - v.x0);
  setView(py - fy * h, py - fy * h + h, px - fx * w, px - fx * w + w);
}

function pan(dy, dx) {
  const v = state.view;
  if (!v) return;
  setView(v.y0 + dy, v.y1 + dy, v.x0 + dx, v.x1 + dx);
}

function drawAll() {
  for (const p of Object.values(panels)) if (p.visible) p.draw();
  const v = state.view;
  if (!v) return;
  const r = requestRegion();
  $("#region-info").textContent = `rows ${r.y0}\u2013${r.y1 - 1} of ${v.H} \u00b7 cols ${r.x0}\u2013${r.x1 - 1} of ${v.W}`;
}

/** The integer region the server is asked for: the view widened to whole elements. */
function requestRegion() {
  const v = state.view;
  return {
    y0: Math.max(0, Math.floor(v.y0)), y1: Math.min(v.H, Math.ceil(v.y1)),
    x0: Math.max(0, Math.floor(v.x0)), x1: Math.min(v.W, Math.ceil(v.x1)),
  };
}

function commonParams(p) {
  const t = state.tensor;
  const r = requestRegion();
  return {
    index: t.lead.join(","), y: `${r.y0}:${r.y1}`, x: `${r.x0}:${r.x1}`,
    width: p.canvas.width, height: p.canvas.height, rank: t.ref.rank, device: t.device, format: "json",
  };
}

/** Ask the server for every visible panel's pooled grid of the current region, then recolour and redraw. */
async function fetchHeatmaps() {
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
  const goldenComparable = t.goldenInfo && (!t.device || sameShape(t.goldenInfo.shape, viewShape(t)));
  if (t.kind && goldenComparable) {
    jobs.push(get(g, `api/reports/${rep}/tensors/${t.record.golden_tensor_id}/heatmap`, { device: null }).then((x) => { g.grid = x; }, soft(g)));
  } else {
    g.grid = null;
    g.message = t.kind ? `golden tensor ${t.record.golden_tensor_id} is ${t.goldenInfo ? "one global tensor" : "not stored"}` : "";
  }
  $(".panel-sub", g.figure).textContent = t.kind
    ? `tensor ${t.record.golden_tensor_id}` + (goldenComparable ? "" : " (global)")
    : "";
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

const fetchHeatmapsSoon = debounce(fetchHeatmaps, 120);

function sameShape(a, b) {
  return !!a && !!b && a.length === b.length && a.every((x, i) => x === b[i]);
}

/** Colour scales from the grids just received: actual and golden share one, the error panel has its own. */
function recolour() {
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

// Pointer and keyboard on the heatmaps ------------------------------------------------------------------

/** The source element (r, c) under a pointer event on a panel canvas, and the fractions of the view. */
function pointerCell(ev, canvas) {
  const v = state.view;
  const rect = canvas.getBoundingClientRect();
  const fx = Math.min(Math.max((ev.clientX - rect.left) / rect.width, 0), 0.999999);
  const fy = Math.min(Math.max((ev.clientY - rect.top) / rect.height, 0), 0.999999);
  const r = Math.min(v.H - 1, Math.max(0, Math.floor(v.y0 + fy * (v.y1 - v.y0))));
  const c = Math.min(v.W - 1, Math.max(0, Math.floor(v.x0 + fx * (v.x1 - v.x0))));
  return { r, c, fy, fx };
}

/** The full index of source element (r, c): the leading indices, then row and column (a 1-D view has no row). */
function fullIndex(r, c) {
  const shape = viewShape(state.tensor);
  if (shape.length === 0) return [];
  if (shape.length === 1) return [c];
  return [...state.tensor.lead, r, c];
}

let hoverSeq = 0;
/** A tensor's tile shape: its own (TILE layout), else 32x32, the hardware's. */
function tileShape(t) {
  const tile = t.info?.tile;
  return tile && tile.length === 2 ? tile : [32, 32];
}

/** The hover's tile line: which tile of the 2-D view holds (r, c), and the elements it covers. */
function tileRow(t, r, c) {
  const [th, tw] = tileShape(t);
  const tr = Math.floor(r / th);
  const tc = Math.floor(c / tw);
  return ["tile", `(${tr}, ${tc}) rows ${tr * th}\u2013${tr * th + th - 1} cols ${tc * tw}\u2013${tc * tw + tw - 1}`, "tile"];
}

/** A float's bit pattern as an ordered integer in `dtype` (float32, bfloat16 or float16 only), for ULP distances
 * computed the way the server does (both values rounded to the coarser dtype); null for other dtypes. */
const F32 = new Float32Array(1);
const U32 = new Uint32Array(F32.buffer);
function orderedBits(x, dtype) {
  F32[0] = x;
  let bits = U32[0];
  if (dtype === "bfloat16") {
    bits = ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff; // round to nearest even
    return bits & 0x8000 ? -(bits & 0x7fff) : bits;
  }
  if (dtype === "float32") return bits & 0x80000000 ? -(bits & 0x7fffffff) : bits;
  return null;
}

const FLOAT_RANK = { float32: 2, bfloat16: 1 };

/** The hover's rows from the grids already fetched, when they hold single elements (1x1 cells) of float32 or
 * bfloat16 tensors: no request per pointer move. Null when the server must be asked (pooled cells, other dtypes). */
function localPoint(t, r, c) {
  const a = panels.actual.grid;
  if (!a || a.cell[0] !== 1 || a.cell[1] !== 1) return null;
  const x = num(panels.actual.cellValue(r, c));
  if (x === null) return null;
  if (!t.kind) return [["value", fmt(x, 7), "value"]];
  const g = panels.golden.grid;
  if (!g || g.cell[0] !== 1 || g.cell[1] !== 1 || !t.goldenInfo) return null;
  const y = num(panels.golden.cellValue(r, c));
  const dtypes = [t.info.dtype, t.goldenInfo.dtype];
  if (y === null || !Number.isFinite(x) || !Number.isFinite(y) || !dtypes.every((d) => d in FLOAT_RANK)) return null;
  const coarse = FLOAT_RANK[dtypes[0]] <= FLOAT_RANK[dtypes[1]] ? dtypes[0] : dtypes[1];
  const abs = Math.abs(x - y);
  const rel = abs / Math.max(Math.abs(y), Number.MIN_VALUE);
  const ulp = Math.abs(orderedBits(x, coarse) - orderedBits(y, coarse));
  const rtol = Number(tolTouched ? $("#rtol").value : t.info.policy?.rtol ?? $("#rtol").value);
  const atol = Number(tolTouched ? $("#atol").value : t.info.policy?.atol ?? $("#atol").value);
  const bad = abs > atol + rtol * Math.abs(y);
  return [
    ["actual", fmt(x, 7), "actual"], ["golden", fmt(y, 7), "golden"], ["|a\u2212g|", fmt(abs, 6), "abs_error", bad],
    ["rel", fmt(rel, 6), "rel_error", bad], ["ULP", String(ulp), "ulp"],
  ];
}

const fetchPoint = debounce(async (r, c, clientX, clientY) => {
  const t = state.tensor;
  if (!t) return;
  const seq = ++hoverSeq;
  const index = fullIndex(r, c);
  const local = localPoint(t, r, c);
  if (local) {
    showTooltip(index, [...local, tileRow(t, r, c)], clientX, clientY);
    $("#tooltip").dataset.source = "grid";
    return;
  }
  try {
    let rows;
    // A per-device point the server cannot compare (a global golden) falls back to the value alone.
    const p = t.kind
      ? await api(`api/compare-tensor/${t.kind}/${t.ref.tensor_id}/point`, {
        report: state.report, at: index.join(","), rank: t.ref.rank, device: t.device, rtol: tol().rtol, atol: tol().atol,
      }).catch((err) => {
        if (t.device && err instanceof ApiError && err.status < 500) return null;
        throw err;
      })
      : null;
    if (p) {
      const bad = Boolean(p.mismatch); // the server's verdict at the tolerances sent, as the mismatch mask counts
      rows = [
        ["actual", fmt(p.actual, 7), "actual"],
        ["golden", fmt(p.golden, 7), "golden"],
        ["|a\u2212g|", fmt(p.abs_error, 6), "abs_error", bad],
        ["rel", fmt(p.rel_error, 6), "rel_error", bad],
        ["ULP", fmt(p.ulp), "ulp"],
      ];
    } else {
      const slice = index.length ? index.join(",") : "";
      const data = await api(`api/reports/${enc(state.report)}/tensors/${t.ref.tensor_id}/values`, {
        slice, rank: t.ref.rank, device: t.device, format: "json",
      });
      let v = data.values;
      while (Array.isArray(v)) v = v[0];
      rows = [["value", fmt(v, 7), "value"]];
    }
    if (seq !== hoverSeq || !state.hover || state.hover.r !== r || state.hover.c !== c) return;
    const pooledCell = panels.actual.grid && (panels.actual.grid.cell[0] > 1 || panels.actual.grid.cell[1] > 1);
    if (pooledCell) {
      rows.push(["cell max|x|", fmt(panels.actual.cellValue(r, c), 5), "cell"]);
      if (t.kind && panels.error.grid) rows.push(["cell max err", fmt(panels.error.cellValue(r, c), 5), "cell_error"]);
    }
    showTooltip(index, [...rows, tileRow(t, r, c)], clientX, clientY);
    $("#tooltip").dataset.source = "server";
  } catch (err) {
    if (seq === hoverSeq) reportError(err);
  }
}, 60);

function showTooltip(index, rows, x, y) {
  const tip = $("#tooltip");
  tip.replaceChildren();
  const head = document.createElement("div");
  head.className = "idx";
  head.dataset.index = index.join(",");
  head.textContent = `[${index.join(", ")}]`;
  const table = document.createElement("table");
  for (const [label, value, key, bad] of rows) {
    const tr = document.createElement("tr");
    tr.dataset.key = key;
    if (bad) tr.className = "mismatch";
    const a = document.createElement("td");
    a.textContent = label;
    const b = document.createElement("td");
    b.textContent = value;
    tr.append(a, b);
    table.append(tr);
  }
  tip.append(head, table);
  tip.hidden = false;
  const pad = 16;
  const w = tip.offsetWidth;
  const h = tip.offsetHeight;
  tip.style.left = `${Math.min(window.innerWidth - w - 4, x + pad)}px`;
  tip.style.top = `${y + pad + h > window.innerHeight ? y - h - pad : y + pad}px`;
}

function hideTooltip() {
  $("#tooltip").hidden = true;
  state.hover = null;
  hoverSeq++;
  drawAll();
}

function wirePanel(p) {
  const c = p.canvas;
  let drag = null;
  c.addEventListener("wheel", (ev) => {
    if (!state.view) return;
    ev.preventDefault();
    const { fy, fx } = pointerCell(ev, c);
    zoom(Math.pow(1.25, -Math.sign(ev.deltaY)), fy, fx);
  }, { passive: false });
  c.addEventListener("pointerdown", (ev) => {
    if (!state.view || ev.button !== 0) return;
    c.setPointerCapture(ev.pointerId);
    drag = { x: ev.clientX, y: ev.clientY, view: { ...state.view }, box: ev.shiftKey, start: pointerCell(ev, c) };
    c.classList.toggle("dragging", !drag.box);
  });
  c.addEventListener("pointermove", (ev) => {
    if (!state.view) return;
    if (drag && !drag.box) {
      const rect = c.getBoundingClientRect();
      const v = drag.view;
      const dy = ((ev.clientY - drag.y) / rect.height) * (v.y1 - v.y0);
      const dx = ((ev.clientX - drag.x) / rect.width) * (v.x1 - v.x0);
      setView(v.y0 - dy, v.y1 - dy, v.x0 - dx, v.x1 - dx);
      return;
    }
    const cell = pointerCell(ev, c);
    if (drag?.box) {
      drawAll();
      const rect = c.getBoundingClientRect();
      const ctx = p.ctx;
      const sx = c.width / rect.width;
      const sy = c.height / rect.height;
      ctx.strokeStyle = "#111";
      ctx.setLineDash([4, 3]);
      ctx.strokeRect((drag.x - rect.left) * sx, (drag.y - rect.top) * sy, (ev.clientX - drag.x) * sx, (ev.clientY - drag.y) * sy);
      ctx.setLineDash([]);
      return;
    }
    if (!state.hover || state.hover.r !== cell.r || state.hover.c !== cell.c) {
      state.hover = { r: cell.r, c: cell.c };
      drawAll();
      fetchPoint(cell.r, cell.c, ev.clientX, ev.clientY);
    }
  });
  const end = (ev) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    c.classList.remove("dragging");
    if (d.box) {
      const e = pointerCell(ev, c);
      const [r0, r1] = [Math.min(d.start.r, e.r), Math.max(d.start.r, e.r) + 1];
      const [c0, c1] = [Math.min(d.start.c, e.c), Math.max(d.start.c, e.c) + 1];
      if (r1 - r0 >= 1 && c1 - c0 >= 1 && (Math.abs(ev.clientX - d.x) > 3 || Math.abs(ev.clientY - d.y) > 3)) setView(r0, r1, c0, c1);
      else drawAll();
    }
  };
  c.addEventListener("pointerup", end);
  c.addEventListener("pointercancel", end);
  c.addEventListener("pointerleave", () => { if (!drag) hideTooltip(); });
}

function onHeatmapKey(ev) {
  const v = state.view;
  if (!v || ev.altKey || ev.ctrlKey || ev.metaKey) return;
  const stepY = (v.y1 - v.y0) * 0.15;
  const stepX = (v.x1 - v.x0) * 0.15;
  const actions = {
    "+": () => zoom(1.5), "=": () => zoom(1.5), "-": () => zoom(1 / 1.5), _: () => zoom(1 / 1.5),
    0: () => setView(0, v.H, 0, v.W),
    ArrowUp: () => pan(-stepY, 0), ArrowDown: () => pan(stepY, 0),
    ArrowLeft: () => pan(0, -stepX), ArrowRight: () => pan(0, stepX),
    e: () => cycleErrorKind(),
  };
  const act = actions[ev.key];
  if (act) {
    ev.preventDefault();
    act();
  }
}

function cycleErrorKind() {
  const sel = $("#error-kind");
  sel.selectedIndex = (sel.selectedIndex + 1) % sel.options.length;
  sel.dispatchEvent(new Event("change"));
}

// ---------------------------------------------------------------------------------------------------------
// Histograms

async function refreshHistograms() {
  const t = state.tensor;
  if (!t) return;
  const values = [];
  if (t.info?.histogram) values.push({ h: t.info.histogram, colour: "rgba(47,111,219,.75)", label: `actual t${t.ref.tensor_id}` });
  if (t.goldenInfo?.histogram) values.push({ h: t.goldenInfo.histogram, colour: "rgba(230,120,20,.9)", label: `golden t${t.goldenInfo.tensor_id}`, line: true });
  drawHistogram($("#hist-values"), values, false);
  $("#hist-values-title").textContent = values.length ? `Values: ${values.map((x) => x.label).join(" (bars), ")}${values.length > 1 ? " (line)" : ""}` : "Values: no stored histogram";
  if (!t.kind) return;
  const kind = currentErrorKind() === "mask" ? "abs" : currentErrorKind();
  try {
    const h = await api(`api/compare-tensor/${t.kind}/${t.ref.tensor_id}/histogram`, {
      report: state.report, error: kind, bins: 64, rank: t.ref.rank, device: t.device,
    });
    if (state.tensor !== t) return;
    drawHistogram($("#hist-error"), [{ h, colour: "rgba(120,60,170,.8)" }], true);
    $("#hist-error-title").textContent = `Error (${kind}), log count`;
  } catch (err) {
    drawHistogram($("#hist-error"), [], true);
    $("#hist-error-title").textContent = `Error: ${err.message}`;
    if (!(err instanceof ApiError) || err.status >= 500) reportError(err);
  }
}

/** Bars (or a step line) of one or more histograms over their common value range; log1p counts if asked. */
function drawHistogram(canvas, series, logCount) {
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (!series.length) return;
  const pad = { l: 4, r: 4, t: 4, b: 16 };
  const w = canvas.width - pad.l - pad.r;
  const h = canvas.height - pad.t - pad.b;
  const edges = series.flatMap((s) => s.h.edges.map(num)).filter(Number.isFinite);
  const lo = Math.min(...edges);
  const hi = Math.max(...edges);
  const span = hi > lo ? hi - lo : 1;
  const f = (c) => (logCount ? Math.log1p(c) : c);
  const top = Math.max(1e-9, ...series.flatMap((s) => s.h.counts.map(f)));
  const X = (x) => pad.l + ((x - lo) / span) * w;
  const Y = (c) => pad.t + h - (f(c) / top) * h;
  for (const s of series) {
    const e = s.h.edges.map(num);
    ctx.fillStyle = s.colour;
    ctx.strokeStyle = s.colour;
    ctx.lineWidth = 1.5;
    if (s.line) ctx.beginPath();
    s.h.counts.forEach((c, i) => {
      const x0 = X(e[i]);
      const x1 = X(e[i + 1]);
      if (s.line) {
        if (i === 0) ctx.moveTo(x0, Y(c));
        else ctx.lineTo(x0, Y(c));
        ctx.lineTo(x1, Y(c));
      } else if (c > 0) {
        ctx.fillRect(x0, Y(c), Math.max(1, x1 - x0 - 0.5), pad.t + h - Y(c));
      }
    });
    if (s.line) ctx.stroke();
  }
  ctx.fillStyle = "#667085";
  ctx.font = "10px system-ui, sans-serif";
  ctx.textBaseline = "bottom";
  ctx.textAlign = "left";
  ctx.fillText(fmt(lo, 3), pad.l, canvas.height);
  ctx.textAlign = "right";
  ctx.fillText(fmt(hi, 3), canvas.width - pad.r, canvas.height);
  if (lo < 0 && hi > 0) {
    ctx.strokeStyle = "rgba(0,0,0,.25)";
    ctx.beginPath();
    ctx.moveTo(X(0), pad.t);
    ctx.lineTo(X(0), pad.t + h);
    ctx.stroke();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Tolerances

// The PCC slider is logarithmic in 1 - PCC: 0 -> PCC 0, 1000 -> PCC 0.999999.
function syncSlider() {
  const p = Math.min(0.999999, Math.max(0, Number($("#pcc").value)));
  $("#pcc-slider").value = String(Math.round((-Math.log10(1 - p) / 6) * 1000));
}

function onTolerance() {
  refreshCompare();
  fetchHeatmapsSoon();
  writeHash();
}

// ---------------------------------------------------------------------------------------------------------
// Run against run

let runData = null;
const runPair = { row: null, view: null, seq: 0 };

/** Tolerances of run against run: the fields the user filled; empty ones stay the policy's for each dtype. */
function runTolerances() {
  const out = {};
  for (const k of ["rtol", "atol", "pcc"]) if ($(`#run-${k}`).value !== "") out[k] = $(`#run-${k}`).value;
  return out;
}

async function compareRuns() {
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
  writeHash();
}

/** Open the first diverging output's A-against-B view. */
function jumpToDivergence() {
  const tr = $("#run-table tbody tr.divergence");
  if (!tr) return;
  tr.scrollIntoView({ block: "center" });
  tr.focus();
  openRunPair(Number(tr.dataset.row));
}

/** Show matched output `i` of the runs as A, B and |A-B| heatmaps over one shared, zoomable view. */
function openRunPair(i, view = null) {
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
  const asked = (view || "").match(/^(\d+):(\d+),(\d+):(\d+)$/);
  if (asked) {
    const [y0, y1, x0, x1] = asked.slice(1).map(Number);
    if (y0 < y1 && y1 <= H && x0 < x1 && x1 <= W) Object.assign(runPair.view, { y0, y1, x0, x1 });
  }
  $("#run-pair").hidden = false;
  $("#run-pair-title").textContent = `#${row.operation_id_a} / #${row.operation_id_b} ${row.name} out${row.output_index}: ` +
    `t${row.tensor_a} (A) against t${row.tensor_b} (B) \u00b7 ${(row.verdict ?? "").replace("_", " ")}`;
  fetchRunPair();
}

function zoomRunPair(factor) {
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
  const lead = row.shape.length > 2 ? row.shape.slice(0, -2).map(() => 0).join(",") : "";
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
    $(".scale", fig).textContent = `${fmt(scale.lo, 3)} \u2026 ${fmt(scale.hi, 3)} \u00b7 ${grids[k].cell.join("\u00d7")} per cell`;
  });
  $("#run-region").textContent = `rows ${v.y0}\u2013${v.y1 - 1} of ${v.H} \u00b7 cols ${v.x0}\u2013${v.x1 - 1} of ${v.W}`;
  writeHash();
}

/** Open a run-vs-run row's operation of run B in the operations view. */
async function openRunRow(row) {
  state.report = $("#run-b").value;
  $("#report-select").value = state.report;
  showReportSummary();
  switchTab("ops");
  await openOperationById(row.operation_id_b, { tensorId: row.tensor_b });
}

// ---------------------------------------------------------------------------------------------------------
// Where in the tensor: the worst tile and the per-device summary (reportdb.locate through api/locate)

/** What `reportdb locate` says about the open tensor against its golden (kept on the tensor for the devices and the
 * worst tile). */
async function located(t) {
  if (!t.located) {
    t.located = api(`api/locate/${t.kind}/${t.ref.tensor_id}`, { report: state.report, rank: t.ref.rank, device: t.device, top: 1 });
  }
  return t.located;
}

/** Zoom onto the tile with the largest error: its leading indices picked, the view on the tile and a tile around it. */
async function goWorstTile() {
  const t = state.tensor;
  if (!t?.kind) return;
  let found;
  try {
    found = await located(t);
  } catch (err) {
    reportError(err);
    return;
  }
  if (state.tensor !== t) return;
  const worst = found.worst_tiles[0];
  if (!worst) {
    showStatus("no tile has an error", "info");
    return;
  }
  const [th, tw] = found.tile_shape;
  const lead = worst.tile.slice(0, -2);
  const [tr, tc] = worst.tile.slice(-2);
  const leadChanged = lead.length === t.lead.length && lead.some((x, i) => x !== t.lead[i]);
  if (leadChanged) {
    t.lead = lead;
    setupLeadFields(t);
  }
  $("#worst-tile").dataset.tile = worst.tile.join(",");
  const v = state.view;
  setView(Math.max(0, tr * th - th / 2), Math.min(v.H, (tr + 1) * th + th / 2), Math.max(0, tc * tw - tw / 2), Math.min(v.W, (tc + 1) * tw + tw / 2));
  if (leadChanged) fetchHeatmaps();
}

/** The per-device table of a multi-device tensor: each shard against its part of the golden, by the policy. */
async function showDevices(t) {
  const card = $("#device-card");
  const multi = (t.info.shards || []).filter((s) => s.device).length > 1;
  card.hidden = !(t.kind && multi && !t.device);
  if (card.hidden) return;
  $("#device-table").replaceChildren();
  let found;
  try {
    found = await located(t);
  } catch (err) {
    $("#device-note").textContent = err.message;
    return;
  }
  if (state.tensor !== t) return;
  $("#device-note").textContent = `${found.devices.length} shards against ${found.golden}`;
  const head = el("tr", {}, ...["device", "PCC", "max |err|", "fit scale", "fit offset", "failed", ""].map((h) => el("th", {}, h)));
  const rows = found.devices.map((d) => {
    const tr = el("tr", {}, el("td", { className: "mono" }, d.coordinate.join(",")),
      el("td", { className: "num mono" + (d.passed ? "" : " pcc-fail") }, fmtPcc(d.pcc)), el("td", { className: "num mono" }, fmt(d.max_abs_error)),
      el("td", { className: "num mono" }, fmt(d.fit_scale, 5)), el("td", { className: "num mono" }, fmt(d.fit_offset, 5)),
      el("td", { className: "mono" }, (d.failed || []).join(", ")));
    const cell = el("td", { className: "center" });
    cell.append(badge(d.passed));
    tr.append(cell);
    tr.dataset.device = d.coordinate.join(",");
    tr.tabIndex = 0;
    const pick = () => {
      $("#device-select").value = tr.dataset.device;
      $("#device-select").dispatchEvent(new Event("change"));
    };
    tr.addEventListener("click", pick);
    tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter") pick(); });
    return tr;
  });
  $("#device-table").replaceChildren(head, ...rows);
}

// ---------------------------------------------------------------------------------------------------------
// An operation's context: arguments, stack trace, duration, producers and consumers as links, comparisons

let contextSeq = 0;

/** A link to another operation of the report. */
function opLink(ref) {
  const b = el("button", { className: "linkish mono" }, `#${ref.operation_id} ${ref.name}`);
  b.dataset.opLink = ref.operation_id;
  b.addEventListener("click", () => openOperationById(ref.operation_id));
  return b;
}

async function loadContext(opId) {
  const seq = ++contextSeq;
  const box = $("#op-context");
  box.dataset.opId = "";
  let c;
  try {
    c = await api(`api/reports/${enc(state.report)}/operations/${opId}`);
  } catch (err) {
    $("#context-summary").textContent = err.message;
    return;
  }
  if (seq !== contextSeq) return;
  const devices = c.device_ids.length ? ` \u00b7 device ${c.device_ids.join(", ")}` : "";
  $("#context-summary").textContent = `${c.name} \u00b7 ` + (c.duration === null ? "duration not recorded" : `duration ${fmt(c.duration, 6)}`) +
    devices + ` \u00b7 ${c.arguments.length} arguments` + (c.stack_trace ? " \u00b7 stack trace" : "");
  const rows = [el("tr", {}, ...["", "tensor", "shape", "dtype", "produced by", "consumed by", "comparisons"].map((h) => el("th", {}, h)))];
  for (const [label, list] of [["in", c.inputs], ["out", c.outputs]]) {
    for (const t of list) {
      const producer = el("td", {});
      if (t.producer) producer.append(opLink(t.producer));
      const consumers = el("td", {});
      for (const ref of t.consumers.slice(0, 8)) consumers.append(opLink(ref));
      if (t.consumers.length > 8) consumers.append(el("span", { className: "muted" }, ` +${t.consumers.length - 8}`));
      const comps = el("td", {});
      for (const k of t.comparisons) {
        const text = `${k.kind} ${k.verdict ?? k.status}` + (k.failed.length ? ` (${k.failed.join(", ")})` : "") +
          (k.pcc === null ? "" : ` pcc ${fmtPcc(k.pcc)}`);
        const line = el("div", {}, el("span", { className: "mono" }, text + " "));
        if (k.role) line.append(roleBadge(k.role));
        comps.append(line);
      }
      const tr = el("tr", {}, el("td", { className: "mono" }, `${label}${t.index}`), el("td", { className: "mono" }, `t${t.tensor_id}`),
        el("td", { className: "mono" }, t.shape ?? ""), el("td", { className: "mono" }, t.dtype ?? ""), producer, consumers, comps);
      tr.dataset.tensorId = t.tensor_id;
      rows.push(tr);
    }
  }
  $("#context-tensors").replaceChildren(...rows);
  const args = [];
  for (const [name, value] of c.arguments) {
    const text = value === null ? "" : value.length > 400 ? value.slice(0, 400) + "\u2026" : value;
    args.push(el("dt", {}, name), el("dd", { className: "mono", title: value ?? "" }, text));
  }
  $("#context-args").replaceChildren(...(args.length ? args : [el("dd", { className: "muted" }, "none recorded")]));
  let stack = c.stack_trace || "no stack trace recorded";
  for (const src of c.source) {
    stack += `\n\n${src.path}:${src.line}\n` + src.lines.map((l, k) => `${String(src.first_line + k).padStart(5)}${src.first_line + k === src.line ? " >" : "  "} ${l}`).join("\n");
  }
  $("#context-stack").textContent = stack;
  box.dataset.opId = String(opId);
}

async function openOperationById(id, { tensorId = null } = {}) {
  const o = state.ops;
  Object.assign(o, { filter: "", offset: 0 });
  $("#op-filter").value = "";
  // Find the page holding the operation in id order, so the list shows it selected.
  if (o.sort !== "id") Object.assign(o, { sort: "id", order: "asc" });
  const probe = await api(`api/reports/${enc(state.report)}/operations`, { sort: "id", order: "asc", offset: 0, limit: 1 }).catch(reportError);
  if (!probe) return;
  let offset = 0;
  for (;;) {
    const page = await api(`api/reports/${enc(state.report)}/operations`, { sort: "id", order: o.order, offset, limit: o.limit }).catch(reportError);
    if (!page) return;
    const op = page.items.find((x) => x.id === id);
    if (op) {
      Object.assign(o, { offset, total: page.total, items: page.items, first: page.first_culprit, judged: page.judged });
      showCulprit();
      renderOps();
      selectOp(op, { tensorId });
      $(`#op-table tbody tr[data-op-id="${id}"]`)?.scrollIntoView({ block: "center" });
      return;
    }
    offset += o.limit;
    if (offset >= page.total) {
      showStatus(`operation ${id} is not in report ${state.report}`);
      return;
    }
  }
}

function switchTab(which) {
  $("#tab-ops").setAttribute("aria-selected", String(which === "ops"));
  $("#tab-runs").setAttribute("aria-selected", String(which === "runs"));
  $("#view-ops").hidden = which !== "ops";
  $("#view-runs").hidden = which !== "runs";
  if (which === "ops") requestAnimationFrame(() => { if (state.tensor) fetchHeatmaps(); });
}

// ---------------------------------------------------------------------------------------------------------
// Location hash: report, operation and tensor, so a view can be linked and reloaded

function hashParams() {
  return new URLSearchParams(location.hash.slice(1));
}

/** Keep the view in the URL: report, operation, tensor, golden kind, device, zoom window and chosen tolerances; on
 * the runs tab its reports, tolerances, the open output and its zoom window. */
function writeHash() {
  if (state.restore) return; // a pasted URL is still being opened
  const p = new URLSearchParams(policyParams());
  if (!$("#view-runs").hidden) {
    p.set("tab", "runs");
    p.set("a", $("#run-a").value);
    p.set("b", $("#run-b").value);
    for (const [k, v] of Object.entries(runTolerances())) p.set(k, v);
    if (runData && runPair.row !== null) {
      p.set("row", runPair.row);
      const v = runPair.view;
      if (v) p.set("view", `${v.y0}:${v.y1},${v.x0}:${v.x1}`);
    }
    history.replaceState(null, "", `#${p}`);
    return;
  }
  if (state.report) p.set("report", state.report);
  if (state.opId !== null) p.set("op", state.opId);
  const t = state.tensor;
  if (t) {
    p.set("tensor", t.ref.tensor_id);
    if (t.kind) p.set("kind", t.kind);
    if (t.device) p.set("device", t.device);
    if (state.view) {
      const r = requestRegion();
      p.set("view", `${r.y0}:${r.y1},${r.x0}:${r.x1}`);
    }
    if (tolTouched) {
      p.set("rtol", $("#rtol").value);
      p.set("atol", $("#atol").value);
    }
    if (t.kind) p.set("pcc", $("#pcc").value);
  }
  history.replaceState(null, "", `#${p}`);
}

const writeHashSoon = debounce(writeHash, 200);

// ---------------------------------------------------------------------------------------------------------
// Wiring

function wire() {
  for (const fig of $$(".panel")) {
    const p = new Panel(fig);
    panels[p.role] = p;
    wirePanel(p);
  }
  $("#report-select").addEventListener("change", (ev) => {
    state.report = ev.target.value;
    state.opId = null;
    state.op = null;
    state.tensor = null;
    $("#op-detail").hidden = true;
    $("#empty-detail").hidden = false;
    state.ops.offset = 0;
    showReportSummary();
    writeHash();
    loadOps();
  });
  const filter = debounce(() => {
    state.ops.filter = $("#op-filter").value.trim();
    state.ops.offset = 0;
    loadOps();
  }, 200);
  $("#op-filter").addEventListener("input", filter);
  $("#op-filter").addEventListener("keydown", (ev) => {
    if (ev.key === "ArrowDown") {
      ev.preventDefault();
      $("#op-table tbody tr")?.focus();
    }
  });
  for (const th of $$("#op-table th[data-sort]")) {
    $("button", th).addEventListener("click", () => {
      const sort = th.dataset.sort;
      const o = state.ops;
      setSort(sort, o.sort === sort && o.order === "asc" ? "desc" : "asc");
    });
  }
  $("#worst-first").addEventListener("click", () => {
    const on = $("#worst-first").getAttribute("aria-pressed") === "true";
    setSort(on ? "id" : state.ops.judged ? "error" : "pcc", "asc");
  });
  $("#page-prev").addEventListener("click", () => { state.ops.offset = Math.max(0, state.ops.offset - state.ops.limit); loadOps(); });
  $("#page-next").addEventListener("click", () => { state.ops.offset += state.ops.limit; loadOps(); });
  const tbody = $("#op-table tbody");
  const rowOp = (tr) => state.ops.items.find((x) => x.id === Number(tr.dataset.opId));
  tbody.addEventListener("click", (ev) => {
    const tr = ev.target.closest("tr[data-op-id]");
    if (tr) selectOp(rowOp(tr));
  });
  tbody.addEventListener("keydown", (ev) => {
    const tr = ev.target.closest("tr[data-op-id]");
    if (!tr) return;
    const move = (next) => {
      if (!next) return;
      tr.tabIndex = -1;
      next.tabIndex = 0;
      next.focus();
    };
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      selectOp(rowOp(tr));
    } else if (ev.key === "ArrowDown") {
      ev.preventDefault();
      move(tr.nextElementSibling);
    } else if (ev.key === "ArrowUp") {
      ev.preventDefault();
      move(tr.previousElementSibling);
    } else if (ev.key === "Home") {
      ev.preventDefault();
      move(tbody.firstElementChild);
    } else if (ev.key === "End") {
      ev.preventDefault();
      move(tbody.lastElementChild);
    }
  });

  for (const id of ["#rtol", "#atol"]) $(id).addEventListener("input", () => { tolTouched = true; onTolerance(); });
  $("#pcc").addEventListener("input", () => { syncSlider(); onTolerance(); });
  $("#pcc-slider").addEventListener("input", (ev) => {
    const p = 1 - Math.pow(10, (-Number(ev.target.value) / 1000) * 6);
    $("#pcc").value = String(Number(p.toPrecision(6)));
    onTolerance();
  });
  $("#error-kind").addEventListener("change", () => { fetchHeatmaps(); refreshHistograms(); });
  $("#log-scale").addEventListener("change", () => recolour());
  $("#mark-mismatch").addEventListener("change", () => fetchHeatmaps());
  $("#kind-select").addEventListener("change", (ev) => {
    const t = state.tensor;
    if (!t) return;
    openTensor(t.ref, { kind: ev.target.value });
  });
  $("#device-select").addEventListener("change", async (ev) => {
    const t = state.tensor;
    if (!t) return;
    t.device = ev.target.value || null;
    t.located = null;
    state.hover = null;
    showDevices(t);
    try {
      t.info = await api(`api/reports/${enc(state.report)}/tensors/${t.ref.tensor_id}`, { rank: t.ref.rank, device: t.device });
    } catch (err) {
      reportError(err);
    }
    if (state.tensor !== t) return;
    writeHash();
    renderStats(t);
    setupLeadFields(t);
    resetView();
    refreshCompare();
    refreshHistograms();
  });
  $("#zoom-in").addEventListener("click", () => zoom(1.5));
  $("#zoom-out").addEventListener("click", () => zoom(1 / 1.5));
  $("#zoom-reset").addEventListener("click", () => { const v = state.view; if (v) setView(0, v.H, 0, v.W); });
  $("#heatmaps").addEventListener("keydown", onHeatmapKey);

  $("#tab-ops").addEventListener("click", () => { switchTab("ops"); writeHash(); });
  $("#tab-runs").addEventListener("click", () => { switchTab("runs"); writeHash(); });
  $("#run-compare").addEventListener("click", compareRuns);
  $("#run-jump").addEventListener("click", jumpToDivergence);
  $("#jump-culprit").addEventListener("click", jumpToCulprit);
  $("#worst-tile").addEventListener("click", goWorstTile);
  $("#run-zoom-in").addEventListener("click", () => zoomRunPair(2));
  $("#run-zoom-out").addEventListener("click", () => zoomRunPair(0.5));
  $("#run-zoom-reset").addEventListener("click", () => { if (runPair.row !== null) openRunPair(runPair.row); });
  $("#run-open-b").addEventListener("click", () => { const row = runData?.items[runPair.row]; if (row) openRunRow(row); });
  $("#help-button").addEventListener("click", () => $("#help").showModal());

  document.addEventListener("keydown", (ev) => {
    const typing = ev.target.closest?.("input, select, textarea");
    if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "/") {
      ev.preventDefault();
      $("#op-filter").focus();
    } else if (ev.key === "?") {
      $("#help").showModal();
    }
  });
  window.addEventListener("resize", debounce(() => { if (state.tensor) fetchHeatmaps(); }, 150));
}

/** Reopen the runs tab a URL names: its reports and tolerances, compared, and its open output at its zoom window. */
async function restoreRuns(hash) {
  const names = state.reports.map((r) => r.name);
  if (names.includes(hash.get("a"))) $("#run-a").value = hash.get("a");
  if (names.includes(hash.get("b"))) $("#run-b").value = hash.get("b");
  for (const k of ["rtol", "atol", "pcc"]) if (hash.has(k)) $(`#run-${k}`).value = hash.get(k);
  switchTab("runs");
  await loadOps();
  await compareRuns();
  const row = Number(hash.get("row"));
  if (hash.has("row") && Number.isInteger(row)) openRunPair(row, hash.get("view"));
}

async function main() {
  wire();
  syncSlider();
  await mountPolicy($("#policy-picker"));
  try {
    await loadReports();
  } catch (err) {
    reportError(err);
    return;
  }
  mountOverview($("#overview"), { api, report: () => state.report, open: (id) => openOperationById(id) });
  const hash = hashParams();
  if (hash.get("tab") === "runs" && state.reports.length > 1) {
    await restoreRuns(hash);
  } else {
    await loadOps();
    const wanted = Number(hash.get("op"));
    if (hash.has("op") && Number.isFinite(wanted)) {
      state.restore = hash.has("tensor") ? Object.fromEntries(hash) : null;
      await openOperationById(wanted);
    }
  }
  document.body.dataset.ready = "true";
}

main();
