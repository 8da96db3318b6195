// Pointer and keyboard on the heatmaps: hover values from the window already fetched (no request per move), the
// tooltip, drag, box zoom and keys.

import { $, debounce, el, reportError } from "./dom.js";
import { fmt } from "./format.js";
import { drawAll, pan, setView, zoom } from "./heatmaps.js";
import { placement } from "./panel.js";
import { togglePin } from "./pins.js";
import { coreRow, fullIndex, localPoint, serverPoint, tileRow } from "./points.js";
import { panels, state } from "./state.js";

let hoverSeq = 0;
/** The source element (r, c) under a pointer event on a panel canvas, and the fractions of the view (clamped to the
 * drawn area: the letterbox bands around it count as its nearest edge). */
function pointerCell(ev, canvas) {
  const v = state.view;
  const rect = canvas.getBoundingClientRect();
  const at = placement(canvas, v);
  const px = ((ev.clientX - rect.left) * canvas.width) / rect.width;
  const py = ((ev.clientY - rect.top) * canvas.height) / rect.height;
  const fx = Math.min(Math.max((px - at.ox) / (at.s * (v.x1 - v.x0)), 0), 0.999999);
  const fy = Math.min(Math.max((py - at.oy) / (at.s * (v.y1 - v.y0)), 0), 0.999999);
  const r = Math.min(v.H - 1, Math.max(0, Math.floor(v.y0 + fy * (v.y1 - v.y0))));
  const c = Math.min(v.W - 1, Math.max(0, Math.floor(v.x0 + fx * (v.x1 - v.x0))));
  return { r, c, fy, fx };
}

/** The hover of element (r, c) from the window already fetched, at once (no request); false when the server must
 * be asked. */
function showLocal(r, c, clientX, clientY) {
  const t = state.tensor;
  const local = t && localPoint(t, r, c);
  if (!local) return false;
  hoverSeq++;
  showTooltip(fullIndex(r, c), [...local, tileRow(t, r, c), ...coreRow(t, r, c)], clientX, clientY);
  $("#tooltip").dataset.source = "grid";
  return true;
}

/** The hover asked of the server (pooled cells, other dtypes), a moment after the pointer rests. */
const fetchPoint = debounce(async (r, c, clientX, clientY) => {
  const t = state.tensor;
  if (!t) return;
  const seq = ++hoverSeq;
  const index = fullIndex(r, c);
  try {
    const rows = await serverPoint(t, index);
    if (seq !== hoverSeq || !state.hover || state.hover.r !== r || state.hover.c !== c) return;
    const pooledCell = panels.actual.grid && (panels.actual.grid.cell[0] > 1 || panels.actual.grid.cell[1] > 1);
    if (pooledCell) {
      rows.push(["cell max|x|", fmt(panels.actual.cellValue(r, c), 5), "cell"]);
      if (t.kind && panels.error.grid) rows.push(["cell max err", fmt(panels.error.cellValue(r, c), 5), "cell_error"]);
    }
    showTooltip(index, [...rows, tileRow(t, r, c), ...coreRow(t, r, c)], clientX, clientY);
    $("#tooltip").dataset.source = "server";
  } catch (err) {
    if (seq === hoverSeq) reportError(err);
  }
}, 60);

/** Show the tooltip at (x, y): its rows' texts updated in place when it has the same rows as before (a pointer move
 * then changes text only, and the tooltip's size measured once, so no move waits for a layout of the page). */
export function showTooltip(index, rows, x, y) {
  const tip = $("#tooltip");
  const keys = rows.map((row) => row[2]).join(" ");
  if (tip.dataset.keys !== keys || tip.hidden) {
    const head = el("div", { className: "idx" });
    const table = el("table", {}, ...rows.map(([label, , key]) => {
      const tr = el("tr", {}, el("td", {}, label), el("td"));
      tr.dataset.key = key;
      return tr;
    }));
    tip.replaceChildren(head, table);
    tip.dataset.keys = keys;
    tip.hidden = false;
    tip.style.left = "0px";
    tip.style.top = "0px";
    tip.size = null;
  }
  const head = tip.firstChild;
  head.dataset.index = index.join(",");
  head.textContent = `[${index.join(", ")}]`;
  const trs = tip.querySelectorAll("tr");
  rows.forEach(([, value, , bad], i) => {
    trs[i].lastChild.textContent = value;
    trs[i].className = bad ? "mismatch" : "";
  });
  tip.size = tip.size || [tip.offsetWidth + 24, tip.offsetHeight]; // room for longer numbers than the first
  const [w, h] = tip.size;
  const pad = 16;
  tip.style.left = `${Math.max(0, Math.min(window.innerWidth - w - 4, x + pad))}px`;
  tip.style.top = `${y + pad + h > window.innerHeight ? y - h - pad : y + pad}px`;
}

function hideTooltip() {
  $("#tooltip").hidden = true;
  state.hover = null;
  hoverSeq++;
  drawAll();
}

export function wirePanel(p) {
  const c = p.canvas;
  let drag = null;
  c.addEventListener("wheel", (ev) => {
    if (!state.view) return;
    ev.preventDefault();
    const { fy, fx } = pointerCell(ev, c);
    zoom(Math.pow(1.25, -Math.sign(ev.deltaY)), fy, fx);
  }, { passive: false });
  c.addEventListener("pointerdown", (ev) => {
    if (!state.view || ev.button !== 0) return;
    c.setPointerCapture(ev.pointerId);
    drag = { x: ev.clientX, y: ev.clientY, view: { ...state.view }, box: ev.shiftKey, start: pointerCell(ev, c) };
    c.classList.toggle("dragging", !drag.box);
  });
  c.addEventListener("pointermove", (ev) => {
    if (!state.view) return;
    if (drag && !drag.box) {
      const rect = c.getBoundingClientRect();
      const v = drag.view;
      const perPx = c.width / rect.width / placement(c, v).s; // elements per CSS pixel
      const dy = (ev.clientY - drag.y) * perPx;
      const dx = (ev.clientX - drag.x) * perPx;
      setView(v.y0 - dy, v.y1 - dy, v.x0 - dx, v.x1 - dx);
      return;
    }
    const cell = pointerCell(ev, c);
    if (drag?.box) {
      drawAll();
      const rect = c.getBoundingClientRect();
      const ctx = p.ctx;
      const sx = c.width / rect.width;
      const sy = c.height / rect.height;
      ctx.strokeStyle = "#111";
      ctx.setLineDash([4, 3]);
      ctx.strokeRect((drag.x - rect.left) * sx, (drag.y - rect.top) * sy, (ev.clientX - drag.x) * sx, (ev.clientY - drag.y) * sy);
      ctx.setLineDash([]);
      return;
    }
    if (!state.hover || state.hover.r !== cell.r || state.hover.c !== cell.c) {
      state.hover = { r: cell.r, c: cell.c };
      drawAll();
      if (!showLocal(cell.r, cell.c, ev.clientX, ev.clientY)) fetchPoint(cell.r, cell.c, ev.clientX, ev.clientY);
    }
  });
  const end = (ev) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    c.classList.remove("dragging");
    if (d.box) {
      const e = pointerCell(ev, c);
      const [r0, r1] = [Math.min(d.start.r, e.r), Math.max(d.start.r, e.r) + 1];
      const [c0, c1] = [Math.min(d.start.c, e.c), Math.max(d.start.c, e.c) + 1];
      if (r1 - r0 >= 1 && c1 - c0 >= 1 && (Math.abs(ev.clientX - d.x) > 3 || Math.abs(ev.clientY - d.y) > 3)) setView(r0, r1, c0, c1);
      else drawAll();
    } else if (ev.type === "pointerup" && Math.abs(ev.clientX - d.x) <= 3 && Math.abs(ev.clientY - d.y) <= 3) {
      const at = pointerCell(ev, c); // a click, not a drag: pin the point (or unpin it)
      togglePin(at.r, at.c);
    }
  };
  c.addEventListener("pointerup", end);
  c.addEventListener("pointercancel", end);
  c.addEventListener("pointerleave", () => { if (!drag) hideTooltip(); });
}

export function onHeatmapKey(ev) {
  const v = state.view;
  if (!v || ev.altKey || ev.ctrlKey || ev.metaKey) return;
  const stepY = (v.y1 - v.y0) * 0.15;
  const stepX = (v.x1 - v.x0) * 0.15;
  const actions = {
    "+": () => zoom(1.5), "=": () => zoom(1.5), "-": () => zoom(1 / 1.5), _: () => zoom(1 / 1.5),
    0: () => setView(0, v.H, 0, v.W),
    ArrowUp: () => pan(-stepY, 0), ArrowDown: () => pan(stepY, 0),
    ArrowLeft: () => pan(0, -stepX), ArrowRight: () => pan(0, stepX),
    e: () => cycleErrorKind(),
    p: () => { if (state.hover) togglePin(state.hover.r, state.hover.c); },
  };
  const act = actions[ev.key];
  if (act) {
    ev.preventDefault();
    act();
  }
}

function cycleErrorKind() {
  const sel = $("#error-kind");
  sel.selectedIndex = (sel.selectedIndex + 1) % sel.options.length;
  sel.dispatchEvent(new Event("change"));
}
