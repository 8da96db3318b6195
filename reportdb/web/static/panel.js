// One heatmap panel: its canvas, the grid last fetched, drawing (cells, mismatches, tile grid, crosshair).

import { gridImage } from "./colour.js";
import { $ } from "./dom.js";
import { num } from "./format.js";
import { state, tileShape } from "./state.js";

/** One heatmap: its canvas, the last grid the server sent (kept as an image to redraw while zooming). */
export class Panel {
  constructor(figure) {
    this.figure = figure;
    this.role = figure.dataset.role;
    this.canvas = $(".canvas-wrap canvas", figure);
    this.ctx = this.canvas.getContext("2d");
    this.grid = null; // the JSON heatmap answer
    this.image = null; // an offscreen canvas, one pixel per grid cell
    this.overlayGrid = null; // mismatch cells of the same region (error panel)
    this.controller = null;
    this.scale = null;
    this.message = ""; // why there is no grid (e.g. no per-device golden), drawn in place of one
  }

  get visible() {
    return !this.figure.hidden;
  }

  /** Size the canvas backing store to its box (device pixels); true when it changed. */
  fit() {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(this.canvas.clientWidth * dpr));
    const h = Math.max(1, Math.round(this.canvas.clientHeight * dpr));
    if (this.canvas.width === w && this.canvas.height === h) return false;
    this.canvas.width = w;
    this.canvas.height = h;
    return true;
  }

  /** Paint the grid's cells with a scale into an offscreen image, one pixel per cell. */
  paint(scale) {
    this.scale = scale;
    this.image = gridImage(this.grid, (x) => {
      const i = scale.index(x) * 3;
      return [scale.table[i], scale.table[i + 1], scale.table[i + 2], 255];
    });
    scale.legend(this.figure);
  }

  /** Redraw: the cached image placed where its region lies in the current view, then the crosshair. */
  draw() {
    const { ctx, canvas } = this;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    const v = state.view;
    if (!v) return;
    if (!this.grid && this.message) {
      ctx.fillStyle = "#667085";
      ctx.font = `${Math.round(12 * (window.devicePixelRatio || 1))}px system-ui, sans-serif`;
      ctx.textAlign = "center";
      wrapText(ctx, this.message, canvas.width / 2, canvas.height / 2, canvas.width * 0.85);
      return;
    }
    for (const [grid, image] of [[this.grid, this.image]]) {
      if (!grid || !image) continue;
      const sx = canvas.width / (v.x1 - v.x0);
      const sy = canvas.height / (v.y1 - v.y0);
      const [gy0, gy1] = grid.y;
      const [gx0, gx1] = grid.x;
      const [cy, cx] = grid.cell;
      ctx.save();
      ctx.beginPath();
      ctx.rect((gx0 - v.x0) * sx, (gy0 - v.y0) * sy, (gx1 - gx0) * sx, (gy1 - gy0) * sy);
      ctx.clip();
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(image, (gx0 - v.x0) * sx, (gy0 - v.y0) * sy, image.width * cx * sx, image.height * cy * sy);
      ctx.restore();
    }
    if (this.overlayGrid) this.drawMismatches(v);
    this.drawTiles(v);
    const h = state.hover;
    if (h) {
      const sx = canvas.width / (v.x1 - v.x0);
      const sy = canvas.height / (v.y1 - v.y0);
      const x = (h.c - v.x0) * sx;
      const y = (h.r - v.y0) * sy;
      const w = Math.max(sx, 1);
      const hh = Math.max(sy, 1);
      ctx.strokeStyle = "rgba(20,20,20,.85)";
      ctx.lineWidth = 1;
      ctx.strokeRect(Math.round(x) - 1.5, Math.round(y) - 1.5, Math.round(w) + 3, Math.round(hh) + 3);
      ctx.strokeStyle = "rgba(255,255,255,.9)";
      ctx.strokeRect(Math.round(x) - 0.5, Math.round(y) - 0.5, Math.round(w) + 1, Math.round(hh) + 1);
    }
  }

  /** Mark the cells of the mismatch grid that hold a mismatch: filled when small, outlined when large enough to
   *  keep the error colour visible inside. */
  drawMismatches(v) {
    const { ctx, canvas } = this;
    const g = this.overlayGrid;
    const sx = canvas.width / (v.x1 - v.x0);
    const sy = canvas.height / (v.y1 - v.y0);
    const [cy, cx] = g.cell;
    const w = cx * sx;
    const h = cy * sy;
    const outline = w >= 6 && h >= 6;
    ctx.save();
    ctx.fillStyle = "rgba(255, 32, 64, 0.85)";
    ctx.strokeStyle = "rgb(255, 32, 64)";
    ctx.lineWidth = Math.max(1.5, Math.min(w, h) / 8);
    g.grid.forEach((row, i) => {
      const y = (g.y[0] + i * cy - v.y0) * sy;
      if (y > canvas.height || y + h < 0) return;
      row.forEach((val, j) => {
        if (!(num(val) > 0)) return;
        const x = (g.x[0] + j * cx - v.x0) * sx;
        if (x > canvas.width || x + w < 0) return;
        if (outline) ctx.strokeRect(x + ctx.lineWidth / 2, y + ctx.lineWidth / 2, w - ctx.lineWidth, h - ctx.lineWidth);
        else ctx.fillRect(x, y, Math.max(w, 1), Math.max(h, 1));
      });
    });
    ctx.restore();
  }

  /** The tensor's tile grid (its own tile shape, 32x32 by default) over the view, once a tile is 12 pixels or more. */
  drawTiles(v) {
    const t = state.tensor;
    if (!t?.info) return;
    const [th, tw] = tileShape(t);
    const { ctx, canvas } = this;
    const sx = canvas.width / (v.x1 - v.x0);
    const sy = canvas.height / (v.y1 - v.y0);
    if (tw * sx < 12 || th * sy < 12) {
      this.figure.dataset.tiles = "";
      return;
    }
    ctx.save();
    ctx.strokeStyle = "rgba(255,255,255,.75)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let c = Math.ceil(v.x0 / tw) * tw; c <= v.x1; c += tw) {
      const x = Math.round((c - v.x0) * sx) + 0.5;
      ctx.moveTo(x, 0);
      ctx.lineTo(x, canvas.height);
    }
    for (let r = Math.ceil(v.y0 / th) * th; r <= v.y1; r += th) {
      const y = Math.round((r - v.y0) * sy) + 0.5;
      ctx.moveTo(0, y);
      ctx.lineTo(canvas.width, y);
    }
    ctx.stroke();
    ctx.restore();
    this.figure.dataset.tiles = `${th}x${tw}`;
  }

  /** The value of the pooled cell holding source element (r, c), or undefined outside the grid. */
  cellValue(r, c) {
    const g = this.grid;
    if (!g || r < g.y[0] || r >= g.y[1] || c < g.x[0] || c >= g.x[1]) return undefined;
    return g.grid[Math.floor((r - g.y[0]) / g.cell[0])]?.[Math.floor((c - g.x[0]) / g.cell[1])];
  }
}

/** Centred text broken into lines of at most `width` pixels. */
export function wrapText(ctx, text, x, y, width) {
  const lines = [];
  let line = "";
  for (const word of text.split(" ")) {
    const next = line ? `${line} ${word}` : word;
    if (ctx.measureText(next).width > width && line) {
      lines.push(line);
      line = word;
    } else {
      line = next;
    }
  }
  lines.push(line);
  const step = parseInt(ctx.font, 10) * 1.4;
  lines.forEach((l, i) => ctx.fillText(l, x, y + (i - (lines.length - 1) / 2) * step));
}
