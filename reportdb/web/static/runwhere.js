// Where run B differs from run A in the open pair (api/runs/locate: `reportdb locate B --against A`): the worst tile
// and the core it lies on named above the panels, a button zooming onto that tile, hover values on the A / B / |A-B|
// panels, and pinned points listed under them.

import { api } from "./api.js";
import { $, $$, el, reportError } from "./dom.js";
import { fmt } from "./format.js";
import { showTooltip } from "./hover.js";
import { runData, runPair, setRunView } from "./runs.js";
import { coreAt } from "./state.js";
import { changed, subscribe } from "./store.js";

const SIDES = ["a", "b", "error"];
let located = null; // the open pair's locate answer (null while it is asked, or when it failed)
let pins = [];
let locating = Promise.resolve(); // the open pair's locate request (pins restored from a URL wait for its cores)

/** The core entry whose shard holds element (r, c) of the pair's view at its leading indices, or null. */
function coreOf(r, c) {
  return located ? coreAt({ cores: located.cores || [] }, r, c, runPair.lead) : null;
}

/** The tile index (leading indices, tile row, tile column) of element (r, c) of the view. */
function tileOf(r, c) {
  const [th, tw] = located?.tile_shape || [32, 32];
  return [...runPair.lead, Math.floor(r / th), Math.floor(c / tw)];
}

/** A core entry as text: its coordinates and shard. */
const coreText = (core) => `(${core.core ? core.core.join(", ") : "?"}) shard ${core.shard}`;

/** Ask where the newly opened pair differs and name it; the worst-tile button is enabled once it is known. */
async function locatePair(row) {
  located = null;
  pins = [];
  renderPins();
  const where = $("#run-where");
  where.textContent = "locating\u2026";
  where.dataset.tile = where.dataset.core = "";
  $("#run-worst-tile").disabled = true;
  let found;
  try {
    found = await api("api/runs/locate", { a: runData.a, b: runData.b, tensor_a: row.tensor_a, tensor_b: row.tensor_b, top: 1 });
  } catch (err) {
    where.textContent = `not located: ${err.message}`;
    return;
  }
  if (runData?.items[runPair.row] !== row) return;
  located = found;
  const worst = found.worst_tiles[0];
  if (!worst) {
    where.textContent = "no tile of B differs from A";
    return;
  }
  const [th, tw] = found.tile_shape;
  const [tr, tc] = worst.tile.slice(-2);
  const lead = worst.tile.slice(0, -2);
  const core = located.cores?.length ? coreAt({ cores: located.cores }, tr * th, tc * tw, lead) : null;
  where.dataset.tile = worst.tile.join(",");
  where.dataset.core = core?.core ? core.core.join(",") : "";
  where.textContent = `B differs from A most in tile (${worst.tile.join(", ")}): rows ${tr * th}\u2013${tr * th + th - 1}, ` +
    `cols ${tc * tw}\u2013${tc * tw + tw - 1}, max |A\u2212B| ${fmt(worst.max_abs_error)}, ${worst.mismatches} mismatches` +
    (core ? ` \u00b7 core ${coreText(core)}` : "") + ` \u00b7 ${found.mismatches} mismatches in all`;
  $("#run-worst-tile").disabled = false;
}

/** Zoom the pair onto its worst tile with half a tile around it. */
function goRunWorstTile() {
  const worst = located?.worst_tiles[0];
  const v = runPair.view;
  if (!worst || !v) return;
  const [th, tw] = located.tile_shape;
  const [tr, tc] = worst.tile.slice(-2);
  setRunView(worst.tile.slice(0, -2), Math.max(0, tr * th - th / 2), Math.min(v.H, (tr + 1) * th + th / 2),
    Math.max(0, tc * tw - tw / 2), Math.min(v.W, (tc + 1) * tw + tw / 2));
}

/** The element (r, c) of the view under a pointer event on a pair canvas. */
function cellAt(ev, canvas) {
  const v = runPair.view;
  const rect = canvas.getBoundingClientRect();
  const fy = Math.min(0.999999, Math.max(0, (ev.clientY - rect.top) / rect.height));
  const fx = Math.min(0.999999, Math.max(0, (ev.clientX - rect.left) / rect.width));
  return { r: v.y0 + Math.floor(fy * (v.y1 - v.y0)), c: v.x0 + Math.floor(fx * (v.x1 - v.x0)) };
}

/** The drawn grids' values at (r, c): exact where a cell is one element, else the cell's pooled value. */
function valuesAt(r, c) {
  return SIDES.map((side, k) => {
    const g = runPair.grids?.[k];
    if (!g) return null;
    const gy = Math.floor((r - g.y[0]) / g.cell[0]);
    const gx = Math.floor((c - g.x[0]) / g.cell[1]);
    return g.grid[gy]?.[gx] ?? null;
  });
}

/** The tooltip's rows for element (r, c): A, B, |A-B| (max |.| of a pooled cell), its tile and core. */
function pointRows(r, c) {
  const pooled = runPair.grids && runPair.grids[0].cell.some((n) => n > 1);
  const [a, b, e] = valuesAt(r, c);
  const suffix = pooled ? " (cell max)" : "";
  const rows = [[`A${suffix}`, fmt(a), "a"], [`B${suffix}`, fmt(b), "b"], [`|A\u2212B|${suffix}`, fmt(e), "error"],
    ["tile", `(${tileOf(r, c).join(", ")})`, "tile"]];
  const core = coreOf(r, c);
  if (core) rows.push(["core", coreText(core), "core"]);
  return rows;
}

/** Pin element (r, c), or unpin it when it is pinned. */
function togglePin(r, c) {
  const index = [...runPair.lead, r, c];
  const key = index.join(",");
  const i = pins.findIndex((p) => p.index.join(",") === key);
  if (i >= 0) pins.splice(i, 1);
  else pins.push({ index, rows: pointRows(r, c) });
  renderPins();
}

/** The pins' table: index, then the tooltip's rows for each. */
function renderPins() {
  $("#run-pins-card").hidden = !pins.length;
  if (!pins.length) {
    $("#run-pins").replaceChildren();
    return;
  }
  const labels = [...new Set(pins.flatMap((p) => p.rows.map(([label]) => label)))];
  const head = el("tr", {}, ...["index", ...labels, ""].map((h) => el("th", {}, h)));
  const rows = pins.map((p, i) => {
    const byLabel = Object.fromEntries(p.rows.map(([label, value, key]) => [label, [value, key]]));
    const tr = el("tr", {}, el("td", { className: "mono" }, `[${p.index.join(", ")}]`), ...labels.map((label) => {
      const td = el("td", { className: "num mono" }, byLabel[label]?.[0] ?? "");
      if (byLabel[label]) td.dataset.key = byLabel[label][1];
      return td;
    }));
    tr.dataset.pin = p.index.join(",");
    const remove = el("button", { className: "ghost unpin", title: "remove this pin" }, "\u00d7");
    remove.addEventListener("click", () => { pins.splice(i, 1); renderPins(); });
    tr.append(el("td", {}, remove));
    return tr;
  });
  $("#run-pins").replaceChildren(head, ...rows);
  changed("view");
}

/** The pinned points' indices (leading indices, row, column), for the URL. */
export const runPinIndices = () => pins.map((p) => p.index);

/** Pin the points a URL names (``indices``) in the open pair once it is located: those at its leading indices and
 * inside its matrix; their values are the drawn grids'. */
export async function restoreRunPins(indices) {
  await locating;
  const v = runPair.view;
  if (!v) return;
  const lead = runPair.lead.join(",");
  pins = indices.filter((ix) => ix.length === runPair.lead.length + 2 && ix.slice(0, -2).join(",") === lead &&
    ix.every((k) => Number.isInteger(k) && k >= 0) && ix.at(-2) < v.H && ix.at(-1) < v.W)
    .map((ix) => ({ index: ix, rows: pointRows(ix.at(-2), ix.at(-1)) }));
  renderPins();
}

/** Wire the pair's panels (hover, click to pin), its worst-tile button, and locating each pair as it opens. */
export function wireRunWhere() {
  for (const canvas of $$("#run-pair .run-panel > canvas")) {
    canvas.addEventListener("pointermove", (ev) => {
      if (!runPair.grids) return;
      const { r, c } = cellAt(ev, canvas);
      showTooltip([...runPair.lead, r, c], pointRows(r, c), ev.clientX, ev.clientY);
    });
    canvas.addEventListener("pointerleave", () => { $("#tooltip").hidden = true; });
    canvas.addEventListener("click", (ev) => {
      if (!runPair.grids) return;
      const { r, c } = cellAt(ev, canvas);
      togglePin(r, c);
    });
  }
  $("#run-worst-tile").addEventListener("click", goRunWorstTile);
  subscribe("run-pair", (row) => { locating = locatePair(row).catch(reportError); });
}
