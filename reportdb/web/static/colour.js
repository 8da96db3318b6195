// Colour scales (diverging, sequential, mask), their legends, and grids painted into offscreen images.

import { $ } from "./dom.js";
import { fmt, num } from "./format.js";

/** A 256-entry lookup table interpolated between evenly spaced anchor colours. */
function lut(anchors) {
  const out = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = (i / 255) * (anchors.length - 1);
    const k = Math.min(Math.floor(t), anchors.length - 2);
    const f = t - k;
    for (let c = 0; c < 3; c++) out[i * 3 + c] = anchors[k][c] + (anchors[k + 1][c] - anchors[k][c]) * f;
  }
  return out;
}

// Diverging (signed values): blue below zero, white at zero, red above (ColorBrewer RdBu, reversed).
const DIVERGING = lut([[5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43], [103, 0, 31]]);
// Sequential (magnitudes, errors): viridis.
export const SEQUENTIAL = lut([[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
  [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]]);
const MASK = lut([[236, 239, 243], [206, 32, 41]]);
const NAN_RGB = [255, 0, 255];

/**
 * How a panel maps values to colours: the colour table, the value range and whether it is symmetric around
 * zero (diverging) or logarithmic. `lo`/`hi` are the legend ends.
 */
export class Scale {
  constructor(kind, lo, hi, log = false) {
    this.kind = kind;
    this.log = log && kind === "sequential" && hi > 0;
    this.table = kind === "diverging" ? DIVERGING : kind === "mask" ? MASK : SEQUENTIAL;
    if (this.log) {
      this.lo = lo > 0 ? lo : hi * 1e-6;
      this.hi = hi;
    } else {
      this.lo = lo;
      this.hi = hi > lo ? hi : lo + (lo === 0 ? 1 : Math.abs(lo));
    }
  }

  /** The colour table index of a finite value. */
  index(x) {
    let t;
    if (this.log) t = x <= this.lo ? 0 : Math.log(x / this.lo) / Math.log(this.hi / this.lo);
    else t = (x - this.lo) / (this.hi - this.lo);
    return Math.max(0, Math.min(255, Math.round(t * 255)));
  }

  /** Paint the legend bar and its end labels. */
  legend(figure) {
    const bar = $(".legend canvas", figure);
    const ctx = bar.getContext("2d");
    const img = ctx.createImageData(bar.width, bar.height);
    for (let x = 0; x < bar.width; x++) {
      const i = Math.round((x / (bar.width - 1)) * 255);
      for (let y = 0; y < bar.height; y++) {
        const p = (y * bar.width + x) * 4;
        img.data[p] = this.table[i * 3];
        img.data[p + 1] = this.table[i * 3 + 1];
        img.data[p + 2] = this.table[i * 3 + 2];
        img.data[p + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    if (this.kind === "mask") {
      $(".legend .lo", figure).textContent = "within tol";
      $(".legend .hi", figure).textContent = "mismatch";
    } else {
      $(".legend .lo", figure).textContent = fmt(this.lo, 3) + (this.log ? " (log)" : "");
      $(".legend .hi", figure).textContent = fmt(this.hi, 3);
    }
  }
}
/** An offscreen canvas with one pixel per grid cell coloured by `colour(x)` (NaN magenta, +-Inf the scale's ends). */
export function gridImage(grid, colour) {
  const rows = grid.grid;
  const h = rows.length;
  const w = h ? rows[0].length : 0;
  const image = document.createElement("canvas");
  image.width = Math.max(1, w);
  image.height = Math.max(1, h);
  const ctx = image.getContext("2d");
  const data = ctx.createImageData(image.width, image.height);
  const px = data.data;
  for (let y = 0; y < h; y++) {
    const row = rows[y];
    for (let x = 0; x < w; x++) {
      const v = num(row[x]);
      const p = (y * w + x) * 4;
      let rgba;
      if (v === null || Number.isNaN(v)) rgba = [...NAN_RGB, 255];
      else if (!Number.isFinite(v)) rgba = colour(v > 0 ? Number.MAX_VALUE : -Number.MAX_VALUE);
      else rgba = colour(v);
      if (!rgba) continue;
      px[p] = rgba[0];
      px[p + 1] = rgba[1];
      px[p + 2] = rgba[2];
      px[p + 3] = rgba[3];
    }
  }
  ctx.putImageData(data, 0, 0);
  return image;
}
