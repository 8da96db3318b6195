// URL state: the view kept in the location hash, so it can be linked and reloaded. Views never call the writer:
// it subscribes to the store's "view" changes (keepUrl).

import { $, debounce } from "./dom.js";
import { requestRegion } from "./heatmaps.js";
import { policyParams } from "./policy.js";
import { replayView } from "./replay.js";
import { runData, runPair, runTolerances } from "./runs.js";
import { runPinIndices } from "./runwhere.js";
import { state } from "./state.js";
import { hashParams, subscribe } from "./store.js";

/** Keep the view in the URL: report, operation, tensor, golden kind, device, zoom window, the tolerances the user
 * chose (a PCC threshold only when typed: otherwise the policy's, so a link follows the policy), error kind, log
 * scale and pins; on the replay tab its report and mode; on
 * the runs tab its reports, tolerances, the open output, its zoom window, leading indices and pins. */
export function writeHash() {
  if (state.restore) return; // a pasted URL is still being opened
  const p = new URLSearchParams(policyParams());
  if (!$("#view-runs").hidden) {
    p.set("tab", "runs");
    p.set("a", $("#run-a").value);
    p.set("b", $("#run-b").value);
    for (const [k, v] of Object.entries(runTolerances())) p.set(k, v);
    if (runData && runPair.row !== null) {
      p.set("row", runPair.row);
      const v = runPair.view;
      if (v) p.set("view", `${v.y0}:${v.y1},${v.x0}:${v.x1}`);
      if (runPair.lead.length) p.set("lead", runPair.lead.join("."));
      const pins = runPinIndices();
      if (pins.length) p.set("pins", pins.map((index) => index.join(".")).join("_"));
    }
    history.replaceState(null, "", `#${p}`);
    return;
  }
  if (state.report) p.set("report", state.report);
  if (!$("#view-replay").hidden) {
    p.set("tab", "replay");
    p.set("mode", replayView.mode);
    history.replaceState(null, "", `#${p}`);
    return;
  }
  if (state.opId !== null) p.set("op", state.opId);
  const t = state.tensor;
  if (t) {
    p.set("tensor", t.ref.tensor_id);
    if (t.kind) p.set("kind", t.kind);
    if (t.device) p.set("device", t.device);
    if (state.view) {
      const r = requestRegion();
      p.set("view", `${r.y0}:${r.y1},${r.x0}:${r.x1}`);
    }
    if (state.tolTouched) {
      p.set("rtol", $("#rtol").value);
      p.set("atol", $("#atol").value);
    }
    if (t.kind && state.pccTouched) p.set("pcc", $("#pcc").value);
    if (t.kind && $("#error-kind").value !== "abs") p.set("err", $("#error-kind").value);
    if ($("#log-scale").checked) p.set("log", "1");
    if (state.pins.length) p.set("pins", state.pins.map((pin) => pin.index.join(".")).join("_"));
  }
  history.replaceState(null, "", `#${p}`);
}

const writeHashSoon = debounce(writeHash, 200);

/** Keep the URL in step with the view: every change of the view (``soon``: as a zoom settles) rewrites it. */
export function keepUrl() {
  subscribe("view", ({ soon = false } = {}) => (soon ? writeHashSoon() : writeHash()));
}

export { hashParams };
