// The core-grid map of a sharded tensor: each shard of the memory config's shard spec drawn at its core (x, y) of
// the grid, coloured by its max |error| against the golden (reportdb.locate's `cores`), a core with mismatches
// outlined so a wrong one stands out; hovering names the core and shard, clicking takes the heatmaps to its region.

import { SEQUENTIAL } from "./colour.js";
import { $, el, reportError } from "./dom.js";
import { fmt, fmtInt } from "./format.js";
import { fetchHeatmaps, setView } from "./heatmaps.js";
import { setupLeadFields } from "./leadfields.js";
import { state } from "./state.js";
import { changed } from "./store.js";
import { located } from "./where.js";

/** Show the core map of the open tensor when locate finds cores (a sharded memory config); hidden otherwise. */
export async function showCores(t) {
  const card = $("#core-card");
  t.cores = null;
  card.hidden = true;
  const mc = t.info.memory_config;
  if (!t.kind || !mc || !/SHARDED/i.test(String(mc.memory_layout || "")) || !(mc.shard_spec || mc.nd_shard_spec)) return;
  let found;
  try {
    found = await located(t);
  } catch (err) {
    if (state.tensor === t) reportError(err);
    return;
  }
  if (state.tensor !== t || !found.cores.length) return;
  card.hidden = false;
  const map = $("#core-map");
  const perDevice = found.cores.some((k) => k.device);
  $("#core-note").textContent = `${found.memory_layout} \u00b7 shard ${(found.shard_shape || []).join("\u00d7")} \u00b7 ` +
    `${found.shard_orientation || ""} \u00b7 ${found.cores.length} shards`;
  if (perDevice) {
    map.replaceChildren(el("p", { className: "muted" }, "each device holds its own shards: pick a device to see its cores"));
    return;
  }
  t.cores = found.cores;
  changed("cores", t);
  map.replaceChildren(...coreCells(t, found.cores));
  $("#core-info").textContent = "hover a core; click it to see its shard";
}

/** The map's cells: one per core of the grid (row y, column x), an empty cell where no shard lies, and a line for
 * shards without a core (a spec whose grid is smaller than the shards). */
function coreCells(t, cores) {
  const placed = cores.filter((k) => k.core);
  const width = Math.max(1, ...placed.map((k) => k.core[0] + 1));
  const height = Math.max(1, ...placed.map((k) => k.core[1] + 1));
  const worst = Math.max(0, ...cores.map((k) => (k.max_abs_error === null ? 0 : k.max_abs_error)));
  const grid = el("div", { className: "core-grid" });
  grid.style.gridTemplateColumns = `repeat(${width}, minmax(22px, 34px))`;
  const at = new Map();
  for (const k of placed) {
    const key = k.core.join(",");
    if (!at.has(key)) at.set(key, []);
    at.get(key).push(k);
  }
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const here = at.get(`${x},${y}`);
      grid.append(here ? coreButton(t, here, worst) : el("span", { className: "core empty", title: `core (${x}, ${y}): no shard` }));
    }
  }
  const out = [grid];
  const loose = cores.filter((k) => !k.core);
  if (loose.length) out.push(el("p", { className: "muted" }, `shards without a core: ${loose.map((k) => k.shard).join(", ")}`));
  return out;
}

/** One core: coloured by the worst error of its shards (an ND spec places several shards round-robin on one core). */
function coreButton(t, shards, worst) {
  const err = Math.max(...shards.map((k) => (k.max_abs_error === null ? Infinity : k.max_abs_error)));
  const mismatches = shards.reduce((n, k) => n + k.mismatches, 0);
  const elements = shards.reduce((n, k) => n + k.elements, 0);
  const i = Math.round((Number.isFinite(err) ? (worst > 0 ? err / worst : 0) : 1) * 255);
  const b = el("button", { className: "core" + (mismatches ? " wrong" : "") }, `${shards[0].core.join(",")}`);
  b.style.background = `rgb(${SEQUENTIAL[i * 3]}, ${SEQUENTIAL[i * 3 + 1]}, ${SEQUENTIAL[i * 3 + 2]})`;
  b.style.color = i > 150 ? "#111" : "#fff";
  b.dataset.core = shards[0].core.join(",");
  b.dataset.shard = shards.map((k) => k.shard).join(",");
  b.dataset.maxError = String(err);
  b.dataset.mismatches = String(mismatches);
  const text = `core (${shards[0].core.join(", ")}) \u00b7 shard ${b.dataset.shard} \u00b7 max |a\u2212g| ${fmt(err)} \u00b7 ` +
    `${fmtInt(mismatches)} of ${fmtInt(elements)} mismatch`;
  b.title = text;
  b.setAttribute("aria-label", text);
  const info = () => { $("#core-info").textContent = text; };
  b.addEventListener("mouseenter", info);
  b.addEventListener("focus", info);
  b.addEventListener("click", () => goToShard(t, shards[0]));
  return b;
}

/** Take the heatmaps to a shard's region: its leading indices picked, the view on its rows and columns. */
function goToShard(t, core) {
  const g = core.region;
  if (!g || state.tensor !== t) return;
  const leadChanged = g.index.length === t.lead.length && g.index.some((x, i) => x !== t.lead[i]);
  if (leadChanged) {
    t.lead = [...g.index];
    setupLeadFields(t);
  }
  $("#core-map").dataset.selected = core.core ? core.core.join(",") : "";
  setView(g.y[0], g.y[1], g.x[0], g.x[1]);
  if (leadChanged) fetchHeatmaps();
}
