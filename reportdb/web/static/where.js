// Where in the tensor (reportdb.locate through api/locate): the worst tile and the per-device table.

import { api } from "./api.js";
import { $, el, reportError, showStatus } from "./dom.js";
import { fmt, fmtPcc } from "./format.js";
import { fetchHeatmaps, setView } from "./heatmaps.js";
import { setupLeadFields } from "./leadfields.js";
import { state } from "./state.js";
import { badge } from "./tables.js";

/** What `reportdb locate` says about the open tensor against its golden (kept on the tensor for the devices and the
 * worst tile). */
export async function located(t) {
  if (!t.located) {
    t.located = api(`api/locate/${t.kind}/${t.ref.tensor_id}`, { report: state.report, rank: t.ref.rank, device: t.device, top: 1 });
  }
  return t.located;
}

/** Zoom onto the tile with the largest error: its leading indices picked, the view on the tile and a tile around it. */
export async function goWorstTile() {
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
export async function showDevices(t) {
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

/** In device view, what the shard is compared with (api/golden-part): the box of the golden its shard covers by the
 * distribution and that part's statistics, kept on the tensor for the golden panel and the statistics table. */
export async function loadGoldenPart(t) {
  t.goldenPart = null;
  if (!t.device || !t.kind) return;
  try {
    t.goldenPart = await api(`api/golden-part/${t.kind}/${t.ref.tensor_id}`, { report: state.report, rank: t.ref.rank, device: t.device });
  } catch (err) {
    t.goldenPart = { error: err.message };
  }
}
