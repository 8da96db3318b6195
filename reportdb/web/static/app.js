// reportdb page: operations, tensors and their goldens, side by side, over the reportdb.web HTTP API.
// Plain ES2020 modules, no framework and no build step; this entry wires the page. Every request URL is relative to
// the page, so the page works under any mount prefix. Heatmaps are JSON grids pooled by the server (max |value| per
// cell) and painted on canvases here, so the colour scale, legend, zoom and hover stay on the client.
//
// Modules: dom, api, format, store (plumbing; store: views say what changed, subscribers react) -> colour, state ->
// tables, verdict, panel, heatmaps, points, hover, pins, histograms, leadfields, where, coremap (the tensor view) ->
// opview, oplist, context, runs, runwhere, replay (views) -> hash (the URL writer, subscribed to "view") -> app (wiring). No
// module imports one that imports it back (tests/test_web_static_modules.py).

import { api, enc } from "./api.js";
import { showCores } from "./coremap.js";
import { $, $$, debounce, reportError } from "./dom.js";
import { keepUrl } from "./hash.js";
import { fetchHeatmaps, recolour, resetView, setView, zoom } from "./heatmaps.js";
import { refreshHistograms } from "./histograms.js";
import { onHeatmapKey, wirePanel } from "./hover.js";
import { setupLeadFields } from "./leadfields.js";
import { jumpToCulprit, loadOps, loadReports, openOperationById, setSort, showReportSummary, switchTab } from "./oplist.js";
import { onTolerance, openTensor, selectOp } from "./opview.js";
import { mountOverview } from "./overview.js";
import { Panel } from "./panel.js";
import { clearPins } from "./pins.js";
import { mountPolicy } from "./policy.js";
import { loadReplay, openFirstFailure, openReplayOperation, setReplayMode } from "./replay.js";
import { compareRuns, jumpToDivergence, openRunPair, openRunRow, runData, runPair, zoomRunPair } from "./runs.js";
import { restoreRunPins, wireRunWhere } from "./runwhere.js";
import { panels, state, syncSlider } from "./state.js";
import { changed, hashParams, subscribe } from "./store.js";
import { refreshCompare, renderStats } from "./tables.js";
import { goWorstTile, loadGoldenPart, showDevices } from "./where.js";

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
    changed("view");
    loadOps();
    if (!$("#view-replay").hidden) loadReplay();
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
    // by local error where the engine ranks by it (its column shows it), else by the PCC shown
    setSort(on ? "id" : state.ops.judged && !state.ops.globalOnly ? "error" : "pcc", "asc");
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

  for (const id of ["#rtol", "#atol"]) $(id).addEventListener("input", () => { state.tolTouched = true; onTolerance(); });
  $("#pcc").addEventListener("input", () => {
    state.pccTouched = $("#pcc").value.trim() !== ""; // emptied: the policy's threshold again
    syncSlider();
    onTolerance();
  });
  $("#pcc-slider").addEventListener("input", (ev) => {
    const p = 1 - Math.pow(10, (-Number(ev.target.value) / 1000) * 6);
    $("#pcc").value = String(Number(p.toPrecision(6)));
    state.pccTouched = true;
    onTolerance();
  });
  $("#error-kind").addEventListener("change", () => { fetchHeatmaps(); refreshHistograms(); changed("view"); });
  $("#log-scale").addEventListener("change", () => { recolour(); changed("view"); });
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
      [t.info] = await Promise.all([
        api(`api/reports/${enc(state.report)}/tensors/${t.ref.tensor_id}`, { rank: t.ref.rank, device: t.device }), loadGoldenPart(t)]);
    } catch (err) {
      reportError(err);
    }
    if (state.tensor !== t) return;
    clearPins();
    changed("view");
    renderStats(t);
    setupLeadFields(t);
    resetView();
    refreshCompare();
    refreshHistograms();
    showCores(t);
  });
  $("#zoom-in").addEventListener("click", () => zoom(1.5));
  $("#zoom-out").addEventListener("click", () => zoom(1 / 1.5));
  $("#zoom-reset").addEventListener("click", () => { const v = state.view; if (v) setView(0, v.H, 0, v.W); });
  $("#heatmaps").addEventListener("keydown", onHeatmapKey);

  $("#tab-ops").addEventListener("click", () => { switchTab("ops"); changed("view"); });
  $("#tab-runs").addEventListener("click", () => { switchTab("runs"); changed("view"); });
  $("#tab-replay").addEventListener("click", () => { switchTab("replay"); changed("view"); loadReplay(); });
  $("#replay-mode").addEventListener("change", (ev) => setReplayMode(ev.target.value));
  $("#replay-first").addEventListener("click", openFirstFailure);
  const replayBody = $("#replay-table tbody");
  const replayOpen = (ev) => {
    const tr = ev.target.closest("tr[data-op-id]");
    if (tr && (ev.type === "click" || ev.key === "Enter")) openReplayOperation(Number(tr.dataset.opId));
  };
  replayBody.addEventListener("click", replayOpen);
  replayBody.addEventListener("keydown", replayOpen);
  $("#run-compare").addEventListener("click", compareRuns);
  $("#run-jump").addEventListener("click", jumpToDivergence);
  $("#jump-culprit").addEventListener("click", jumpToCulprit);
  $("#worst-tile").addEventListener("click", goWorstTile);
  wireRunWhere();
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

/** Reopen the runs tab a URL names: its reports and tolerances, compared, and its open output at its zoom window,
 * leading indices and pins. */
async function restoreRuns(hash) {
  const names = state.reports.map((r) => r.name);
  if (names.includes(hash.get("a"))) $("#run-a").value = hash.get("a");
  if (names.includes(hash.get("b"))) $("#run-b").value = hash.get("b");
  for (const k of ["rtol", "atol", "pcc"]) if (hash.has(k)) $(`#run-${k}`).value = hash.get(k);
  switchTab("runs");
  await loadOps();
  await compareRuns();
  const row = Number(hash.get("row"));
  if (!hash.has("row") || !Number.isInteger(row)) return;
  const indices = (text) => (text ? text.split(".").map(Number) : []);
  await openRunPair(row, hash.get("view"), indices(hash.get("lead")));
  const pins = (hash.get("pins") || "").split("_").filter(Boolean).map(indices);
  if (pins.length) await restoreRunPins(pins);
}

async function main() {
  keepUrl();
  subscribe("wanted-operation", ({ id }) => openOperationById(id));
  subscribe("tab", ({ which }) => { switchTab(which); changed("view"); });
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
  } else if (hash.get("tab") === "replay") {
    switchTab("replay");
    loadOps();
    await setReplayMode(hash.get("mode"));
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
