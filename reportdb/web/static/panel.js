// One heatmap panel: its canvas, the grid last fetched, drawing (cells, mismatches, tile grid, crosshair).

import { gridImage } from "./colour.js";
import { $ } from "./dom.js";
import { num } from "./format.js";
import { state, tileShape } from "./state.js";

/** Where view `v` lies on `canvas`: `s` canvas pixels per element both ways (square cells: a 64x64 block draws
 * square whatever the panel's aspect), centred with empty bands (letterbox) where the panel's aspect differs from
 * the view's; X/Y map a source column/row to canvas pixels. */
export function placement(canvas, v) {
  const s = Math.min(canvas.width / (v.x1 - v.x0), canvas.height / (v.y1 - v.y0));
  const ox = (canvas.width - s * (v.x1 - v.x0)) / 2;
  const oy = (canvas.height - s * (v.y1 - v.y0)) / 2;
  return { s, ox, oy, X: (c) => ox + (c - v.x0) * s, Y: (r) => oy + (r - v.y0) * s };
}

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

  /** Redraw: the cached image placed where its region lies in the current view, then the marks over it. */
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
    const at = placement(canvas, v);
    ctx.drawImage(this.layer(v, at), 0, 0);
    for (const pin of state.pins) if (pin.lead === state.tensor?.lead.join(",")) this.mark(at, pin.r, pin.c, "rgba(255,196,0,.95)", pin.n);
    const h = state.hover;
    if (h) this.mark(at, h.r, h.c);
  }

  /** The panel's picture without the marks (cells, mismatches, tile grid) as an offscreen canvas, drawn again only
   * when the view, the size or a grid changed: a pointer move redraws the marks over it alone (one frame or less). */
  layer(v, at) {
    const { canvas } = this;
    const key = [v.y0, v.y1, v.x0, v.x1, canvas.width, canvas.height, this.grid, this.image, this.overlayGrid,
      state.tensor, state.tensor?.info];
    if (this.layerCanvas && this.layerKey.every((k, i) => k === key[i])) return this.layerCanvas;
    this.layerKey = key;
    const off = this.layerCanvas || document.createElement("canvas");
    this.layerCanvas = off;
    off.width = canvas.width;
    off.height = canvas.height;
    const ctx = off.getContext("2d");
    ctx.clearRect(0, 0, off.width, off.height);
    const { grid, image } = this;
    if (grid && image) {
      const [gy0, gy1] = grid.y;
      const [gx0, gx1] = grid.x;
      const [cy, cx] = grid.cell;
      ctx.save();
      ctx.beginPath();
      ctx.rect(at.X(gx0), at.Y(gy0), (gx1 - gx0) * at.s, (gy1 - gy0) * at.s);
      ctx.clip();
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(image, at.X(gx0), at.Y(gy0), image.width * cx * at.s, image.height * cy * at.s);
      ctx.restore();
    }
    if (this.overlayGrid) this.drawMismatches(ctx, at);
    this.drawTiles(ctx, v, at);
    return off;
  }

  /** Outline element (r, c): a dark and a light ring (a pin's in its colour, with its number). */
  mark(at, r, c, colour = null, label = null) {
    const { ctx } = this;
    const x = Math.round(at.X(c));
    const y = Math.round(at.Y(r));
    const w = Math.round(Math.max(at.s, 1));
    ctx.lineWidth = 1;
    ctx.strokeStyle = "rgba(20,20,20,.85)";
    ctx.strokeRect(x - 1.5, y - 1.5, w + 3, w + 3);
    ctx.strokeStyle = colour || "rgba(255,255,255,.9)";
    ctx.lineWidth = colour ? 2 : 1;
    ctx.strokeRect(x - 0.5, y - 0.5, w + 1, w + 1);
    if (label !== null) {
      ctx.fillStyle = colour;
      ctx.font = `bold ${Math.round(11 * (window.devicePixelRatio || 1))}px system-ui, sans-serif`;
      ctx.textAlign = "left";
      ctx.fillText(String(label), x + w + 3, y - 2);
    }
  }

  /** Mark the cells of the mismatch grid that hold a mismatch: filled when small (one image of the whole grid,
   *  scaled), outlined when large enough to keep the error colour visible inside (few cells are visible then). */
  drawMismatches(ctx, at) {
    const { canvas } = this;
    const g = this.overlayGrid;
    const [cy, cx] = g.cell;
    const w = cx * at.s;
    const h = cy * at.s;
    if (!(w >= 6 && h >= 6)) {
      if (this.maskImage?.grid !== g) this.maskImage = { grid: g, image: gridImage(g, (x) => (x > 0 ? [255, 32, 64, 217] : null)) };
      const image = this.maskImage.image;
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(image, at.X(g.x[0]), at.Y(g.y[0]), image.width * w, image.height * h);
      return;
    }
    ctx.save();
    ctx.strokeStyle = "rgb(255, 32, 64)";
    ctx.lineWidth = Math.max(1.5, Math.min(w, h) / 8);
    g.grid.forEach((row, i) => {
      const y = at.Y(g.y[0] + i * cy);
      if (y > canvas.height || y + h < 0) return;
      row.forEach((val, j) => {
        if (!(num(val) > 0)) return;
        const x = at.X(g.x[0] + j * cx);
        if (x > canvas.width || x + w < 0) return;
        ctx.strokeRect(x + ctx.lineWidth / 2, y + ctx.lineWidth / 2, w - ctx.lineWidth, h - ctx.lineWidth);
      });
    });
    ctx.restore();
  }

  /** The tensor's tile grid (its own tile shape, 32x32 by default) over the drawn view, once a tile is 12 pixels or
   * more. */
  drawTiles(ctx, v, at) {
    const t = state.tensor;
    if (!t?.info) return;
    const [th, tw] = tileShape(t);
    if (tw * at.s < 12 || th * at.s < 12) {
      this.figure.dataset.tiles = "";
      return;
    }
    const [left, top, right, bottom] = [at.X(v.x0), at.Y(v.y0), at.X(v.x1), at.Y(v.y1)];
    ctx.save();
    ctx.strokeStyle = "rgba(255,255,255,.75)";
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let c = Math.ceil(v.x0 / tw) * tw; c <= v.x1; c += tw) {
      const x = Math.round(at.X(c)) + 0.5;
      ctx.moveTo(x, top);
      ctx.lineTo(x, bottom);
    }
    for (let r = Math.ceil(v.y0 / th) * th; r <= v.y1; r += th) {
      const y = Math.round(at.Y(r)) + 0.5;
      ctx.moveTo(left, y);
      ctx.lineTo(right, y);
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
function wrapText(ctx, text, x, y, width) {
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
