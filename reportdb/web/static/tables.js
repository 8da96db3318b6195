// Tables of the tensor view: badges, the spec, stored statistics, the metrics and verdict of a comparison.

import { ApiError, api } from "./api.js";
import { $, debounce, el, reportError } from "./dom.js";
import { fmt, fmtBytes, fmtInt, fmtPcc, num } from "./format.js";
import { showPolicyPcc, state, tol } from "./state.js";
import { clearVerdictReasons, renderVerdict } from "./verdict.js";

/** The badge of an output's role (culprit, victim, pass) as the API's golden analysis gives it. */
export function roleBadge(role) {
  const span = document.createElement("span");
  span.className = `badge ${role === "culprit" ? "culprit" : role === "victim" ? "victim" : role === "pass" ? "pass" : "none"}`;
  span.textContent = role ?? "\u2014";
  span.dataset.role = role ?? "";
  return span;
}
/** The badge of a pass/fail/unknown golden status. */
export function badge(passed) {
  const span = document.createElement("span");
  span.className = `badge ${passed === true ? "pass" : passed === false ? "fail" : "none"}`;
  span.textContent = passed === true ? "pass" : passed === false ? "FAIL" : "\u2014";
  return span;
}
export function renderSpec(t) {
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

export function renderStats(t) {
  // In device view the shard is compared with its part of the golden: that part's statistics, not the whole's.
  const golden = t.device && t.goldenPart?.stats ? [[`golden @${t.device} part`, t.goldenPart.stats]] : statColumns("golden", t.goldenInfo);
  const cols = [...statColumns(t.device ? `actual @${t.device}` : "actual", t.info), ...golden];
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

const METRICS = [
  ["pcc", "PCC", fmtPcc],
  ["recorded_pcc", "recorded PCC", fmtPcc],
  ["pcc_ttmetal", "PCC (tt-metal)", fmtPcc],
  ["sqnr_db", "SQNR", (v) => (num(v) === null ? "\u2014" : `${fmt(v, 4)} dB`)],
  ["tile_sqnr_db", "worst tile SQNR", (v) => (num(v) === null ? "\u2014" : `${fmt(v, 4)} dB`)],
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
/** The metric a failed criterion reads, where its name is not the metric's. */
const FAILED_METRIC = { max_ulp: "ulp_max", max_mismatch_fraction: "allclose_mismatches", "rtol/atol": "allclose_mismatches" };
const FLAG_NAMES = ["shape_mismatch", "nonfinite_mismatch", "constant_input", "scale_or_offset_error"];

export const refreshCompare = debounce(async () => {
  const t = state.tensor;
  if (!t?.kind) return;
  const seq = ++state.compareSeq;
  $("#verdict").classList.add("busy");
  try {
    const data = await api(`api/compare-tensor/${t.kind}/${t.ref.tensor_id}`, {
      report: state.report, rank: t.ref.rank, device: t.device, ...tol(),
    });
    if (seq !== state.compareSeq || state.tensor !== t) return;
    showPolicyPcc(data.tolerances?.pcc);
    renderVerdict(t, data);
    renderMetrics(data);
  } catch (err) {
    if (seq === state.compareSeq && err?.name !== "AbortError") {
      $("#verdict").dataset.passed = "";
      $("#verdict").textContent = "n/a";
      clearVerdictReasons();
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

/** The metrics grid of a compare-tensor answer, each failed criterion's metric marked. */
function renderMetrics(data) {
  const m = data.metrics || {};
  const failed = new Set((data.verdict?.failed || []).map((name) => FAILED_METRIC[name] ?? name));
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
      if (key === "pcc" || key === "sqnr_db") cls = failed.has(key) ? "bad" : data.passed ? "good" : "";
      else if (failed.has(key)) cls = "bad";
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
