// The values of one element of the open tensor: from the window already fetched where its cells are single
// elements, else asked of the server; its index, tile and core (for the hover and the pins).

import { ApiError, api, enc } from "./api.js";
import { $ } from "./dom.js";
import { fmt, num } from "./format.js";
import { coreAt, panels, state, tileShape, tol, viewShape } from "./state.js";

/** The full index of source element (r, c): the leading indices, then row and column (a 1-D view has no row). */
export function fullIndex(r, c) {
  const shape = viewShape(state.tensor);
  if (shape.length === 0) return [];
  if (shape.length === 1) return [c];
  return [...state.tensor.lead, r, c];
}

/** The hover's tile line: which tile of the 2-D view holds (r, c), and the elements it covers. */
export function tileRow(t, r, c) {
  const [th, tw] = tileShape(t);
  const tr = Math.floor(r / th);
  const tc = Math.floor(c / tw);
  return ["tile", `(${tr}, ${tc}) rows ${tr * th}\u2013${tr * th + th - 1} cols ${tc * tw}\u2013${tc * tw + tw - 1}`, "tile"];
}

/** The hover's core line for a sharded tensor: the core and shard whose region holds (r, c) (from the core map). */
export function coreRow(t, r, c) {
  const core = coreAt(t, r, c);
  return core ? [["core", `(${core.core ? core.core.join(", ") : "?"}) shard ${core.shard}`, "core"]] : [];
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
export function localPoint(t, r, c) {
  const a = panels.actual.grid;
  if (!a || a.cell[0] !== 1 || a.cell[1] !== 1) return null;
  const x = num(panels.actual.cellValue(r, c));
  if (x === null) return null;
  if (!t.kind) return [["value", fmt(x, 7), "value", false, x]];
  const g = panels.golden.grid;
  if (!g || g.cell[0] !== 1 || g.cell[1] !== 1 || !t.goldenInfo) return null;
  const y = num(panels.golden.cellValue(r, c));
  const dtypes = [t.info.dtype, t.goldenInfo.dtype];
  if (y === null || !Number.isFinite(x) || !Number.isFinite(y) || !dtypes.every((d) => d in FLOAT_RANK)) return null;
  const coarse = FLOAT_RANK[dtypes[0]] <= FLOAT_RANK[dtypes[1]] ? dtypes[0] : dtypes[1];
  const abs = Math.abs(x - y);
  const rel = abs / Math.max(Math.abs(y), Number.MIN_VALUE);
  const ulp = Math.abs(orderedBits(x, coarse) - orderedBits(y, coarse));
  const rtol = Number(state.tolTouched ? $("#rtol").value : t.info.policy?.rtol ?? $("#rtol").value);
  const atol = Number(state.tolTouched ? $("#atol").value : t.info.policy?.atol ?? $("#atol").value);
  const bad = abs > atol + rtol * Math.abs(y);
  return [
    ["actual", fmt(x, 7), "actual", false, x], ["golden", fmt(y, 7), "golden", false, y],
    ["|a\u2212g|", fmt(abs, 6), "abs_error", bad, abs], ["rel", fmt(rel, 6), "rel_error", bad, rel], ["ULP", String(ulp), "ulp", false, ulp],
  ];
}

/** The rows of element `index` as the server gives them (api/compare-tensor/.../point, or the value alone where there
 * is no golden or a per-device point cannot be compared): for pooled views, other dtypes and pins. */
export async function serverPoint(t, index) {
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
    return [
      ["actual", fmt(p.actual, 7), "actual", false, num(p.actual)],
      ["golden", fmt(p.golden, 7), "golden", false, num(p.golden)],
      ["|a\u2212g|", fmt(p.abs_error, 6), "abs_error", bad, num(p.abs_error)],
      ["rel", fmt(p.rel_error, 6), "rel_error", bad, num(p.rel_error)],
      ["ULP", fmt(p.ulp), "ulp", false, num(p.ulp)],
    ];
  }
  const data = await api(`api/reports/${enc(state.report)}/tensors/${t.ref.tensor_id}/values`, {
    slice: index.join(","), rank: t.ref.rank, device: t.device, format: "json",
  });
  let v = data.values;
  while (Array.isArray(v)) v = v[0];
  return [["value", fmt(v, 7), "value", false, num(v)]];
}
