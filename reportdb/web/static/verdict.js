// The verdict of the open tensor's comparison: PASS or FAIL and, for a failure, every criterion that failed with its
// value against its threshold (any criterion the policy names, read from the metrics by its name), the worst tile
// and the core it lies on where the comparison names one.

import { $, el } from "./dom.js";
import { fmt, fmtInt, fmtPcc, num } from "./format.js";
import { coreAt, state, tileShape, viewShape } from "./state.js";
import { subscribe } from "./store.js";

/** A value in dB: one decimal, more where one decimal would read as the threshold itself. */
function dB(value, threshold = null) {
  const v = num(value);
  if (v === null) return "\u2014";
  if (!Number.isFinite(v)) return `${fmt(v)} dB`;
  const short = v.toFixed(1);
  return `${threshold !== null && Number(short) === threshold ? v.toFixed(3) : short} dB`;
}

/** Criteria whose value is not the metric of the same name, or that read best in their own words. */
const KNOWN = {
  pcc: (m, c) => `PCC ${fmtPcc(m.pcc)} < ${c.pcc}`,
  sqnr_db: (m, c) => m.sqnr_db === null || m.sqnr_db === undefined ? `SQNR undefined (errors on a zero golden) < ${c.sqnr_db} dB`
    : `SQNR ${dB(m.sqnr_db, c.sqnr_db)} < ${c.sqnr_db} dB`,
  max_ulp: (m, c) => `ULP max ${fmt(m.ulp_max)} > ${c.max_ulp}`,
  max_mismatch_fraction: (m, c) => `${fmtInt(m.allclose_mismatches)} of ${fmtInt(m.count)} outside rtol/atol > ` +
    `${c.max_mismatch_fraction} of them`,
  "rtol/atol": (m) => `${fmtInt(m.allclose_mismatches)} elements outside rtol/atol > 0`,
  scale_or_offset: (m) => `scale or offset: golden \u2248 ${fmt(m.fit_scale, 4)}\u00b7actual + ${fmt(m.fit_offset, 3)}`,
  nonfinite: (m) => `NaN / Inf where the other side has none (${fmtInt(m.nan_mismatches)} / ${fmtInt(m.inf_mismatches)})`,
  shape: (m) => `shape [${(m.shape_a || []).join(", ")}] against [${(m.shape_b || []).join(", ")}]`,
  // an operation that only moves values is held to the expected bits: by how much the values differ, or (no value
  // differs) that only bits do (a zero's sign, a NaN's payload)
  bitwise: (m) => m.dtype_a !== m.dtype_b ? `not bit-exact: ${m.dtype_a} against ${m.dtype_b}`
    : m.max_abs_error || m.nan_mismatches || m.inf_mismatches
      ? `not bit-exact: max |error| ${fmt(m.max_abs_error)} (${fmt(m.ulp_max)} ulp)`
      : "not bit-exact: a zero's sign or a NaN's payload differs",
};

/** One failed criterion as "name value < threshold": a known one in its words, any other by its name, its value
 * in the metrics (or the verdict) and its threshold in the criteria ("max_" ones are upper bounds). */
export function describeFailure(name, metrics, verdict) {
  const criteria = verdict.criteria || {};
  if (KNOWN[name]) return KNOWN[name](metrics, criteria);
  const value = metrics[name] ?? verdict[name] ?? null;
  const threshold = criteria[name] ?? null;
  const label = name.replace(/_db$/, "").replaceAll("_", " ").replace(/\bsqnr\b/i, "SQNR");
  const shown = num(value) === null ? "\u2014" : name.endsWith("_db") ? dB(value, threshold) : fmt(value);
  if (threshold === null) return `${label} ${shown}`;
  const unit = name.endsWith("_db") ? " dB" : "";
  return `${label} ${shown} ${name.startsWith("max_") ? ">" : "<"} ${threshold}${unit}`;
}

/** The worst tile a comparison names (``worst_tile``: flattened leading index, tile row, tile column) with its SQNR
 * and the core whose shard holds it (from the core map, once loaded), or null. */
export function describeWorstTile(t, metrics, verdict) {
  const tile = metrics.worst_tile ?? verdict.worst_tile;
  if (!Array.isArray(tile) || tile.length !== 3) return null;
  const sqnr = metrics.tile_sqnr_db ?? verdict.tile_sqnr_db;
  let text = `worst tile (${tile.join(", ")})` + (num(sqnr) === null ? "" : `, ${dB(sqnr)}`);
  const core = tileCore(t, tile);
  if (core?.core) text += ` \u00b7 core (${core.core.join(", ")})`;
  return text;
}

/** The core entry holding tile (flat leading index, row, column) of ``t`` (null without a core map). */
function tileCore(t, [flat, tr, tc]) {
  if (!t.cores) return null;
  const leadShape = viewShape(t).slice(0, -2);
  const lead = [];
  let rest = flat;
  for (let i = leadShape.length - 1; i >= 0; i--) {
    lead.unshift(rest % leadShape[i]);
    rest = Math.floor(rest / leadShape[i]);
  }
  const [th, tw] = tileShape(t);
  return coreAt(t, tr * th, tc * tw, lead);
}

/** Show the verdict of ``data`` (a compare-tensor answer) for tensor ``t``: the badge, and under it every failed
 * criterion against its threshold and the worst tile; kept on the tensor so the core map can complete it. */
export function renderVerdict(t, data) {
  t.compared = data;
  const m = data.metrics || {};
  const v = data.verdict || { failed: [], criteria: {} };
  const badge = $("#verdict");
  badge.dataset.passed = String(data.passed);
  badge.textContent = data.passed ? "PASS" : "FAIL";
  const lines = data.passed ? [] : (v.failed || []).map((name) => describeFailure(name, m, v));
  const tile = data.passed ? null : describeWorstTile(t, m, v); // where to look, once something failed
  if (tile) lines.push(tile);
  const why = $("#verdict-why");
  why.replaceChildren(...lines.map((line, i) => el("span", { className: i < (v.failed || []).length && !data.passed ? "failed" : "" }, line)));
  why.dataset.failed = data.passed ? "" : (v.failed || []).join(",");
  why.hidden = !lines.length;
  const criteria = Object.entries(v.criteria || {}).filter(([, x]) => x !== null).map(([k, x]) => `${k} ${x}`).join(", ");
  badge.title = (lines.length ? lines.join("\n") + "\n" : "") + `criteria: ${criteria || "none"}` +
    [...(v.notes || []), ...(m.notes || [])].map((note) => `\n${note}`).join("");
}

/** Clear the verdict's reasons (no comparison shown). */
export function clearVerdictReasons() {
  $("#verdict-why").replaceChildren();
  $("#verdict-why").hidden = true;
}

// The core map loads after the comparison: name the worst tile's core once it is there.
subscribe("cores", (t) => {
  if (t === state.tensor && t.compared) renderVerdict(t, t.compared);
});
