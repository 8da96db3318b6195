// Pinned points: a click on a heatmap pins the element under the pointer (its actual value, golden, error, index,
// tile and core); the pins are listed with their differences from the first, drawn on the heatmaps, removable, and
// kept in the URL (`pins=`), so a linked view shows them again.

import { $, el, reportError } from "./dom.js";
import { fmt } from "./format.js";
import { drawAll } from "./heatmaps.js";
import { fullIndex, localPoint, serverPoint, tileRow } from "./points.js";
import { coreAt, state, viewShape } from "./state.js";
import { changed, subscribe } from "./store.js";

const COLUMNS = [["actual", "actual"], ["golden", "golden"], ["abs_error", "|a\u2212g|"], ["value", "value"]];

/** The view row and column of a full index (a 1-D tensor is one row, a scalar one element). */
function rowCol(index) {
  if (index.length === 0) return [0, 0];
  if (index.length === 1) return [0, index[0]];
  return index.slice(-2);
}

/** Pin element (r, c) of the view at the current leading indices, or unpin it when it is pinned. */
export async function togglePin(r, c) {
  const t = state.tensor;
  if (!t) return;
  const index = fullIndex(r, c);
  const key = index.join(",");
  const i = state.pins.findIndex((p) => p.index.join(",") === key);
  if (i >= 0) {
    removePin(i);
    return;
  }
  await addPin(t, index);
}

/** Add a pin at a full index: its values from the window already fetched when it holds single elements, else asked
 * of the server. */
async function addPin(t, index) {
  const [r, c] = rowCol(index);
  const lead = index.slice(0, Math.max(0, index.length - 2)).join(",");
  const sameLead = lead === t.lead.join(",");
  let rows = sameLead ? localPoint(t, r, c) : null;
  try {
    rows = rows || await serverPoint(t, index);
  } catch (err) {
    reportError(err);
    return;
  }
  if (state.tensor !== t) return;
  const values = Object.fromEntries(rows.map((row) => [row[2], row[4]]));
  const shown = Object.fromEntries(rows.map((row) => [row[2], row[1]]));
  const tile = tileRow(t, r, c)[1].split(" rows")[0];
  state.pins.push({ index, lead, r, c, values, shown, tile, bad: rows.some((row) => row[3]) });
  renderPins();
}

/** The core and shard holding a pin (from the open tensor's core map at the pin's own leading indices), or "". */
function pinCore(p) {
  const t = state.tensor;
  const core = t ? coreAt(t, p.r, p.c, p.index.slice(0, Math.max(0, p.index.length - 2))) : null;
  return core ? `(${core.core ? core.core.join(", ") : "?"}) shard ${core.shard}` : "";
}

/** Remove pin `i`. */
function removePin(i) {
  state.pins.splice(i, 1);
  renderPins();
}

/** Forget the pins (another tensor, device or golden opened). */
export function clearPins() {
  state.pins = [];
  renderPins();
}

/** Pin the points a URL names (`pins=i.j.k.l_...`), in order. */
export async function restorePins(t, text) {
  state.pins = [];
  for (const part of String(text || "").split("_")) {
    if (!/^\d+(\.\d+)*$/.test(part)) continue;
    const index = part.split(".").map(Number);
    if (index.length !== viewShape(t).length || index.some((x, i) => x >= viewShape(t)[i])) continue;
    await addPin(t, index);
  }
  renderPins();
}

/** The pins' table (one row each, the differences from the first pin), their marks on the heatmaps and the URL. */
function renderPins() {
  const pins = state.pins;
  const card = $("#pins-card");
  card.hidden = !pins.length;
  const cols = COLUMNS.filter(([key]) => pins.some((p) => key in p.values));
  const head = el("tr", {}, ...["#", "index", ...cols.map(([, label]) => label), "tile", "core",
    ...(pins.length > 1 ? cols.map(([, label]) => `\u0394 ${label}`) : []), ""].map((h) => el("th", {}, h)));
  const first = pins[0];
  const rows = pins.map((p, i) => {
    const tr = el("tr", {}, el("td", { className: "mono" }, String(i + 1)), el("td", { className: "mono" }, `[${p.index.join(", ")}]`));
    tr.dataset.pin = p.index.join(",");
    if (p.bad) tr.classList.add("mismatch");
    for (const [key] of cols) {
      const td = el("td", { className: "num mono" }, p.shown[key] ?? "\u2014");
      td.dataset.key = key;
      tr.append(td);
    }
    tr.append(el("td", { className: "mono" }, p.tile), el("td", { className: "mono pin-core" }, pinCore(p)));
    if (pins.length > 1) {
      for (const [key] of cols) {
        const d = i === 0 || !(key in p.values) || !(key in first.values) ? null : p.values[key] - first.values[key];
        const td = el("td", { className: "num mono" }, d === null ? "" : (d > 0 ? "+" : "") + fmt(d, 6));
        td.dataset.diff = key;
        tr.append(td);
      }
    }
    const remove = el("button", { className: "ghost unpin", title: "remove this pin" }, "\u00d7");
    remove.setAttribute("aria-label", `remove pin ${i + 1}`);
    remove.addEventListener("click", () => removePin(i));
    tr.append(el("td", {}, remove));
    return tr;
  });
  pins.forEach((p, i) => { p.n = i + 1; });
  $("#pins-table").replaceChildren(head, ...rows);
  drawAll();
  changed("view");
}

// The core map may arrive after the pins: name their cores then.
subscribe("cores", (t) => { if (t === state.tensor && state.pins.length) renderPins(); });
