// Numbers as the API sends them ("nan", "inf") and as the page shows them.

/** A JSON number of the API as a JS number ("nan", "inf", "-inf" are how non-finite values travel). */
export function num(v) {
  if (v === "nan") return NaN;
  if (v === "inf") return Infinity;
  if (v === "-inf") return -Infinity;
  return v === null || v === undefined ? null : Number(v);
}

/** A value with `digits` significant digits, exponent form for very small or large magnitudes. */
export function fmt(v, digits = 6) {
  const x = num(v);
  if (x === null) return "\u2014";
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "+Inf" : "-Inf";
  if (Number.isInteger(x) && Math.abs(x) < 1e9) return String(x);
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(digits - 1).replace(/\.?0+e/, "e");
  return String(Number(x.toPrecision(digits)));
}

export const fmtPcc = (v) => (num(v) === null ? "\u2014" : num(v).toFixed(6));
export const fmtInt = (v) => (v === null || v === undefined ? "\u2014" : Number(v).toLocaleString("en-US"));

export function fmtBytes(n) {
  if (n === null || n === undefined) return "\u2014";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let x = n;
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return `${i ? x.toFixed(1) : x} ${units[i]}`;
}
