// The page's shared state: the open report, operation, tensor, view and panels; the tolerances requests carry;
// the shape helpers of the 2-D view.

import { $ } from "./dom.js";
import { fmt } from "./format.js";

export const state = {
  reports: [],
  report: null, // name
  ops: { filter: "", sort: "id", order: "asc", offset: 0, limit: 100, total: 0, items: [], first: null, judged: false,
         pending: false, analysisError: null },
  restore: null, // the view a pasted URL asks for, applied as its operation and tensor open
  opId: null,
  op: null,
  tensor: null, // {ref, kind, info, goldenInfo, device, lead, record}
  view: null, // {y0, y1, x0, x1} in source rows/cols (floats), over a H x W 2-D view
  hover: null, // {r, c} source element under the pointer
  pins: [], // pinned points of the open tensor: {n, r, c, lead, index, rows}
  compareSeq: 0,
  tolTouched: false, // the user chose rtol/atol (until then the server applies the policy's)
  pccTouched: false, // the user typed a PCC threshold (until then the policy's, which the field shows)
};


/** Set rtol/atol to the tolerance policy's for this tensor (its operation and dtype: the API's verdicts use the
 * same), unless the user has chosen tolerances. */
export function defaultTolerances(policy) {
  if (state.tolTouched || !policy) return;
  $("#rtol").value = fmt(policy.rtol, 4);
  $("#atol").value = fmt(policy.atol, 4);
  $("#rtol").title = $("#atol").title = `the tolerance policy's for ${policy.dtype}` + (policy.operation ? ` (${policy.operation})` : "") + "; edit to override";
}

/** The tolerances requests carry: rtol/atol and the PCC threshold only once the user chose them (until then the
 * server applies the policy's, which the fields show), so choosing another policy changes the verdicts. */
export const tol = () => ({
  rtol: state.tolTouched ? $("#rtol").value || null : null,
  atol: state.tolTouched ? $("#atol").value || null : null,
  pcc: state.pccTouched ? $("#pcc").value || null : null,
});

/** Show the PCC threshold a comparison was judged at in the field, unless the user typed one. */
export function showPolicyPcc(pcc) {
  if (state.pccTouched || pcc === null || pcc === undefined) return;
  $("#pcc").value = String(pcc);
  $("#pcc").title = "the tolerance policy's threshold; edit to override";
  syncSlider();
}

export const panels = {};
/** The shape of the 2-D view's source: the selected shard's shape, or the whole tensor's. */
export function viewShape(t) {
  if (t.device) {
    const shard = t.info.shards.find((s) => s.device && s.device.join(",") === t.device);
    if (shard) return shard.shape;
  }
  return t.info.shape || [];
}

/** The core entry (with its region) whose shard holds element (r, c) of the view at leading indices ``lead`` (the
 * view's own by default), from the open tensor's core map. */
export function coreAt(t, r, c, lead = t.lead) {
  const key = lead.join(",");
  return (t.cores || []).find((k) => {
    const g = k.region;
    return g && g.index.join(",") === key && r >= g.y[0] && r < g.y[1] && c >= g.x[0] && c < g.x[1];
  }) || null;
}

/** H x W of the 2-D view: the last two axes (a 1-D tensor is a 1 x N view, a scalar 1 x 1). */
export function dims2d(shape) {
  if (shape.length === 0) return [1, 1];
  if (shape.length === 1) return [1, shape[0]];
  return [shape[shape.length - 2], shape[shape.length - 1]];
}
/** A tensor's tile shape: its own (TILE layout), else 32x32, the hardware's. */
export function tileShape(t) {
  const tile = t.info?.tile;
  return tile && tile.length === 2 ? tile : [32, 32];
}
// The PCC slider is logarithmic in 1 - PCC: 0 -> PCC 0, 1000 -> PCC 0.999999.
export function syncSlider() {
  const p = Math.min(0.999999, Math.max(0, Number($("#pcc").value)));
  $("#pcc-slider").value = String(Math.round((-Math.log10(1 - p) / 6) * 1000));
}
