// One operation and one of its tensors: the tensor chips, opening a tensor with its golden, its controls.

import { api, enc } from "./api.js";
import { loadContext } from "./context.js";
import { showCores } from "./coremap.js";
import { $, $$, el, reportError } from "./dom.js";
import { fmtPcc } from "./format.js";
import { fetchHeatmapsSoon, resetView } from "./heatmaps.js";
import { refreshHistograms } from "./histograms.js";
import { setupLeadFields } from "./leadfields.js";
import { clearPins, restorePins } from "./pins.js";
import { defaultTolerances, state, syncSlider } from "./state.js";
import { changed } from "./store.js";
import { badge, refreshCompare, renderSpec, renderStats, roleBadge } from "./tables.js";
import { clearVerdictReasons } from "./verdict.js";
import { loadGoldenPart, showDevices } from "./where.js";

export function selectOp(op, { tensorId = null } = {}) {
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
  changed("view");
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

// One tensor (with its golden when it has a comparison record)

export async function openTensor(ref, { kind: wantedKind = null } = {}) {
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
  Object.assign($("#verdict"), { textContent: "\u2026", title: "being compared" }); // never another tensor's verdict
  $("#verdict").dataset.passed = "";
  clearVerdictReasons();
  if (restore && (restore.rtol || restore.atol)) {
    $("#rtol").value = restore.rtol ?? $("#rtol").value;
    $("#atol").value = restore.atol ?? $("#atol").value;
    state.tolTouched = true;
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
  if (restore?.pcc) {
    $("#pcc").value = restore.pcc;
    state.pccTouched = true;
  } else if (!state.pccTouched) {
    $("#pcc").value = (t.info.policy?.rule_pcc ? t.info.policy.pcc : null) ?? t.record?.desired_pcc ?? t.info.policy?.pcc ?? 0.99;
  }
  if (restore) restoreErrorView(restore);
  defaultTolerances(t.info.policy);
  syncSlider();
  setupTensorControls(t);
  await loadGoldenPart(t);
  if (state.tensor !== t) return;
  renderSpec(t);
  renderStats(t);
  resetView();
  refreshCompare();
  refreshHistograms();
  $("#worst-tile").hidden = !t.kind;
  showDevices(t);
  clearPins();
  const cores = showCores(t);
  changed("view");
  if (restore?.pins) {
    await cores; // each pin names its core: the core map first
    if (state.tensor === t) restorePins(t, restore.pins);
  }
}

/** The error kind and colour scale a URL names (``err=``, ``log=1``). */
function restoreErrorView(restore) {
  const kinds = [...$("#error-kind").options].map((o) => o.value);
  if (kinds.includes(restore.err)) $("#error-kind").value = restore.err;
  $("#log-scale").checked = restore.log === "1";
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
  if (!compare) {
    const verdict = $("#verdict");
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

export function onTolerance() {
  refreshCompare();
  fetchHeatmapsSoon();
  changed("view");
}
