// The leading-index boxes of the tensor view: one number box per axis before the last two, picking the 2-D slice
// the heatmaps show.

import { $ } from "./dom.js";
import { fetchHeatmaps } from "./heatmaps.js";
import { state, viewShape } from "./state.js";

/** One number box per leading axis (all but the last two) to pick the 2-D slice shown. */
export function setupLeadFields(t) {
  const shape = viewShape(t);
  const lead = shape.slice(0, Math.max(0, shape.length - 2));
  t.lead = lead.map((_, i) => Math.min(t.lead[i] ?? 0, lead[i] - 1));
  const box = $("#lead-fields");
  box.replaceChildren();
  const text = (t) => {
    const span = document.createElement("span");
    span.className = "mono";
    span.textContent = t;
    box.append(span);
  };
  if (lead.length) text("view [");
  lead.forEach((n, i) => {
    if (i) text(",");
    const label = box;
    const input = document.createElement("input");
    input.title = `index along axis ${i} (size ${n})`;
    Object.assign(input, { type: "number", min: 0, max: n - 1, step: 1, value: t.lead[i] });
    input.setAttribute("aria-label", `index along axis ${i}`);
    input.disabled = n <= 1;
    input.addEventListener("change", () => {
      const v = Math.max(0, Math.min(n - 1, Math.trunc(Number(input.value)) || 0));
      input.value = v;
      t.lead[i] = v;
      state.hover = null;
      fetchHeatmaps();
    });
    label.append(input);
  });
  if (lead.length) text(", :, :]");
}
