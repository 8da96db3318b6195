// Value and error histograms.

import { ApiError, api } from "./api.js";
import { $, reportError } from "./dom.js";
import { fmt, num } from "./format.js";
import { currentErrorKind } from "./heatmaps.js";
import { state } from "./state.js";

export async function refreshHistograms() {
  const t = state.tensor;
  if (!t) return;
  const values = [];
  if (t.info?.histogram) values.push({ h: t.info.histogram, colour: "rgba(47,111,219,.75)", label: `actual t${t.ref.tensor_id}` });
  if (t.device && t.goldenPart?.histogram) {
    values.push({ h: t.goldenPart.histogram, colour: "rgba(230,120,20,.9)", label: `golden t${t.goldenPart.golden_tensor_id} @${t.device} part`, line: true });
  } else if (t.goldenInfo?.histogram) values.push({ h: t.goldenInfo.histogram, colour: "rgba(230,120,20,.9)", label: `golden t${t.goldenInfo.tensor_id}`, line: true });
  drawHistogram($("#hist-values"), values, false);
  $("#hist-values-title").textContent = values.length ? `Values: ${values.map((x) => x.label).join(" (bars), ")}${values.length > 1 ? " (line)" : ""}` : "Values: no stored histogram";
  if (!t.kind) return;
  const kind = currentErrorKind() === "mask" ? "abs" : currentErrorKind();
  try {
    const h = await api(`api/compare-tensor/${t.kind}/${t.ref.tensor_id}/histogram`, {
      report: state.report, error: kind, bins: 64, rank: t.ref.rank, device: t.device,
    });
    if (state.tensor !== t) return;
    drawHistogram($("#hist-error"), [{ h, colour: "rgba(120,60,170,.8)" }], true);
    $("#hist-error-title").textContent = `Error (${kind}), log count`;
  } catch (err) {
    drawHistogram($("#hist-error"), [], true);
    $("#hist-error-title").textContent = `Error: ${err.message}`;
    if (!(err instanceof ApiError) || err.status >= 500) reportError(err);
  }
}

/** Bars (or a step line) of one or more histograms over their common value range; log1p counts if asked. */
function drawHistogram(canvas, series, logCount) {
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  if (!series.length) return;
  const pad = { l: 4, r: 4, t: 4, b: 16 };
  const w = canvas.width - pad.l - pad.r;
  const h = canvas.height - pad.t - pad.b;
  const edges = series.flatMap((s) => s.h.edges.map(num)).filter(Number.isFinite);
  const lo = Math.min(...edges);
  const hi = Math.max(...edges);
  const span = hi > lo ? hi - lo : 1;
  const f = (c) => (logCount ? Math.log1p(c) : c);
  const top = Math.max(1e-9, ...series.flatMap((s) => s.h.counts.map(f)));
  const X = (x) => pad.l + ((x - lo) / span) * w;
  const Y = (c) => pad.t + h - (f(c) / top) * h;
  for (const s of series) {
    const e = s.h.edges.map(num);
    ctx.fillStyle = s.colour;
    ctx.strokeStyle = s.colour;
    ctx.lineWidth = 1.5;
    if (s.line) ctx.beginPath();
    s.h.counts.forEach((c, i) => {
      const x0 = X(e[i]);
      const x1 = X(e[i + 1]);
      if (s.line) {
        if (i === 0) ctx.moveTo(x0, Y(c));
        else ctx.lineTo(x0, Y(c));
        ctx.lineTo(x1, Y(c));
      } else if (c > 0) {
        ctx.fillRect(x0, Y(c), Math.max(1, x1 - x0 - 0.5), pad.t + h - Y(c));
      }
    });
    if (s.line) ctx.stroke();
  }
  ctx.fillStyle = "#667085";
  ctx.font = "10px system-ui, sans-serif";
  ctx.textBaseline = "bottom";
  ctx.textAlign = "left";
  ctx.fillText(fmt(lo, 3), pad.l, canvas.height);
  ctx.textAlign = "right";
  ctx.fillText(fmt(hi, 3), canvas.width - pad.r, canvas.height);
  if (lo < 0 && hi > 0) {
    ctx.strokeStyle = "rgba(0,0,0,.25)";
    ctx.beginPath();
    ctx.moveTo(X(0), pad.t);
    ctx.lineTo(X(0), pad.t + h);
    ctx.stroke();
  }
}
