// The overview of a report: every operation in execution order as one strip on a canvas, each coloured by its
// local comparison's verdict (culprit, victim, pass, no record) and as tall as its local error (SQNR), the first
// culprit marked; a click (or Enter) opens that operation in the page's operation view.
// One request (api/reports/<r>/overview: compact columns) and one putImageData per draw, so 5,000 or 500,000
// operations draw alike: with more operations than pixels, each pixel column shows its worst operation.

/** Colours by role letter (see the overview endpoint): culprit, recorded fail, victim, pass, recorded pass, none. */
const COLOURS = { c: [196, 48, 43], f: [196, 48, 43], v: [228, 154, 37], p: [58, 160, 105], o: [58, 160, 105], "-": [197, 202, 211] };
const WORSE = { c: 5, f: 4, v: 3, p: 2, o: 1, "-": 0 };
const LABELS = { c: "culprit", f: "fails (recorded)", v: "victim", p: "pass", o: "passes (recorded)", "-": "no golden record" };
const HEIGHT = 56;
/** The anomaly marker's colour: an output far below its peers' SQNR (passing or not), distinct from every role. */
const ANOMALY = "#7a3fc0";
/** Milliseconds before the first poll while the server recomputes the roles (the answer says ``pending``), each next
 * one half as long again up to POLL_MAX_MS. */
const POLL_MS = 500;
const POLL_MAX_MS = 4000;

const STYLE = `
.overview { margin: 0 0 10px; border: 1px solid var(--line, #e2e5ea); border-radius: 6px; background: var(--panel, #fff); padding: 6px 10px 8px; }
.overview-head { display: flex; gap: 14px; align-items: baseline; flex-wrap: wrap; font-size: 12px; }
.overview-head b { font-size: 13px; }
.overview-legend span { display: inline-flex; align-items: center; gap: 4px; margin-right: 10px; }
.overview-legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; }
.overview canvas { display: block; width: 100%; height: ${HEIGHT}px; margin-top: 6px; cursor: pointer; }
.overview canvas:focus-visible { outline: 2px solid var(--accent, #2f6fdb); }
.overview-readout { font-size: 12px; min-height: 1.3em; color: var(--muted, #667085); font-family: var(--mono, monospace); }
`;

/** Why the overview names no culprit: the operations failing globally though each passes locally, if any. */
function noCulprit(victims) {
  return victims ? `no culprit: every operation passes locally; ${victims.toLocaleString("en-US")} fail${victims === 1 ? "s" : ""} ` +
    "globally (victims of their inputs)" : "no culprit";
}

function node(tag, props = {}, ...children) {
  const n = Object.assign(document.createElement(tag), props);
  n.append(...children);
  return n;
}

/** Mount the overview in ``container``: ``api(path, params)`` is the page's GET (it adds the chosen policy),
 * ``report()`` the open report's name, ``open(id)`` opens an operation. Redraws when the report select changes. */
export function mountOverview(container, { api, report, open }) {
  if (!document.getElementById("overview-style")) document.head.append(node("style", { id: "overview-style", textContent: STYLE }));
  container.classList.add("overview");
  const first = node("span", { className: "overview-first" });
  const legend = node("span", { className: "overview-legend" },
    ...["c", "v", "p", "-"].map((k) => node("span", {}, node("i", { style: `background: rgb(${COLOURS[k]})` }), LABELS[k])),
    node("span", { title: "an output far below its peers' SQNR (the same operation on the same shape), passing or not" },
      node("i", { style: `background: ${ANOMALY}; border-radius: 50%` }), "anomaly"));
  const canvas = node("canvas", { tabIndex: 0, ariaLabel: "Operations in execution order, coloured by local error; click to open" });
  const readout = node("div", { className: "overview-readout" });
  container.replaceChildren(node("div", { className: "overview-head" }, node("b", {}, "Overview"), first, legend), canvas, readout);
  const ctx = canvas.getContext("2d");
  let data = null;
  let anomalies = new Map(); // operation index -> its anomalies' sentences
  let columns = null; // per pixel column: the index of the operation it shows (-1: none)
  let cursor = -1; // keyboard cursor and last opened operation (index)
  let seq = 0;

  /** Bar height (0..1) of operation ``i``: its local error as SQNR (60 dB and better low, 0 dB full height). */
  const height = (i) => {
    const role = data.roles[i];
    if (role === "-") return 0.3;
    const s = data.sqnr_db[i];
    if (s === null) return data.pcc[i] === null ? 0.5 : 0.15; // exact (infinite SQNR), or not recomputed
    return Math.min(1, Math.max(0.15, (60 - s) / 60));
  };

  function draw() {
    if (!data) return;
    const t0 = performance.now();
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(1, Math.round(canvas.clientWidth * dpr));
    const H = Math.round(HEIGHT * dpr);
    if (canvas.width !== W || canvas.height !== H) Object.assign(canvas, { width: W, height: H });
    const n = data.ids.length;
    columns = new Int32Array(W).fill(-1);
    const colHeight = new Float32Array(W);
    for (let i = 0; i < n; i++) {
      const c0 = Math.floor((i * W) / n);
      const c1 = Math.max(c0 + 1, Math.floor(((i + 1) * W) / n));
      const worse = WORSE[data.roles[i]];
      const h = height(i);
      for (let c = c0; c < c1 && c < W; c++) {
        const j = columns[c];
        if (j < 0 || worse > WORSE[data.roles[j]] || (worse === WORSE[data.roles[j]] && h > colHeight[c])) {
          columns[c] = i;
          colHeight[c] = h;
        }
      }
    }
    const image = ctx.createImageData(W, H);
    const px = image.data;
    const gap = n < W / 3; // wide bars get a 1-pixel gap between operations
    for (let c = 0; c < W; c++) {
      const i = columns[c];
      if (i < 0) continue;
      if (gap && c + 1 < W && columns[c + 1] !== i) continue;
      const [r, g, b] = COLOURS[data.roles[i]];
      const top = Math.round(H * (1 - colHeight[c]));
      for (let y = top; y < H; y++) {
        const o = (y * W + c) * 4;
        px[o] = r; px[o + 1] = g; px[o + 2] = b; px[o + 3] = 255;
      }
    }
    ctx.putImageData(image, 0, 0);
    const mark = (i, colour, full) => {
      const x = ((i + 0.5) * W) / n;
      ctx.fillStyle = colour;
      ctx.fillRect(Math.round(x - dpr), 0, Math.max(1, Math.round(2 * dpr)), full ? H : Math.round(6 * dpr));
      return x / dpr;
    };
    const culprit = data.first_culprit ? data.ids.indexOf(data.first_culprit.operation_id) : -1;
    if (culprit >= 0) {
      ctx.beginPath(); // a triangle above the first culprit
      const x = ((culprit + 0.5) * W) / n;
      ctx.moveTo(x - 6 * dpr, 0); ctx.lineTo(x + 6 * dpr, 0); ctx.lineTo(x, 9 * dpr); ctx.closePath();
      ctx.fillStyle = "#1d2330";
      ctx.fill();
      container.dataset.culpritX = String(mark(culprit, "#1d2330", false));
    } else delete container.dataset.culpritX;
    for (const i of anomalies.keys()) { // a dot above each anomalous operation's bar
      const x = ((i + 0.5) * W) / n;
      const y = Math.max(5 * dpr, Math.round(H * (1 - height(i))) - 6 * dpr);
      ctx.beginPath();
      ctx.arc(x, y, 4 * dpr, 0, 2 * Math.PI);
      ctx.fillStyle = ANOMALY;
      ctx.fill();
    }
    container.dataset.anomalies = [...anomalies.keys()].map((i) => data.ids[i]).join(",");
    if (cursor >= 0 && cursor < n) mark(cursor, "rgba(47, 111, 219, 0.9)", true);
    container.dataset.drawMs = (performance.now() - t0).toFixed(2);
  }

  /** The operation index under a pointer event (the worst one of its pixel column), or -1. */
  function at(ev) {
    if (!columns) return -1;
    const rect = canvas.getBoundingClientRect();
    const c = Math.floor(((ev.clientX - rect.left) / rect.width) * columns.length);
    return c >= 0 && c < columns.length ? columns[c] : -1;
  }

  function describe(i) {
    if (i < 0 || !data) return "";
    const pcc = data.pcc[i] === null ? "" : ` \u00b7 local pcc ${data.pcc[i].toFixed(6)}`;
    const sqnr = data.sqnr_db[i] === null ? "" : ` \u00b7 sqnr ${data.sqnr_db[i].toFixed(1)} dB`;
    const odd = anomalies.has(i) ? ` \u00b7 anomaly: ${anomalies.get(i)}` : "";
    return `#${data.ids[i]} ${data.names[data.name_index[i]]} \u00b7 ${LABELS[data.roles[i]]}${pcc}${sqnr}${odd}`;
  }

  function choose(i) {
    if (i < 0 || !data) return;
    cursor = i;
    container.dataset.selected = String(data.ids[i]);
    readout.textContent = describe(i);
    draw();
    open(data.ids[i]);
  }

  let polling = null; // the timer of the next poll while the server recomputes the roles
  let pollMs = POLL_MS;
  let loading = null; // the AbortController of the request in flight

  /** Load the overview (``wait: 0``: the recorded verdicts at once while the server's golden analysis runs) and, while
   * it is pending, poll every POLL_MS and redraw with the final roles, keeping the operation the cursor is on. */
  async function refresh() {
    clearTimeout(polling);
    loading?.abort();
    const name = report();
    if (!name) return;
    const mine = ++seq;
    const t0 = performance.now();
    container.dataset.ready = "false";
    loading = new AbortController();
    let found;
    try {
      found = await api(`api/reports/${encodeURIComponent(name)}/overview`, { wait: 0 }, loading.signal);
    } catch (err) {
      if (err.name !== "AbortError") readout.textContent = `overview: ${err.message}`;
      return;
    }
    if (mine !== seq || name !== report()) return;
    const kept = data && data.report === found.report && cursor >= 0 ? data.ids[cursor] : null;
    data = found;
    const index = new Map(data.ids.map((id, i) => [id, i]));
    anomalies = new Map((data.anomalies ?? []).filter((a) => index.has(a.operation_id)).map((a) => [index.get(a.operation_id), a.text]));
    cursor = kept === null ? -1 : data.ids.indexOf(kept);
    const f = data.first_culprit;
    const err = data.analysis_error;
    first.textContent = `${data.total.toLocaleString("en-US")} operations \u00b7 ` + (f ? `\u25bc first culprit #${f.operation_id} ${f.name ?? ""}`
      : data.pending ? "verdicts being recomputed\u2026 (recorded verdicts shown)"
      : err ? `roles unknown: ${err.error}`
      : data.judged ? noCulprit([...data.roles].filter((r) => r === "v").length)
      : "roles unknown (report too large for a request): recorded verdicts");
    container.dataset.total = String(data.total);
    container.dataset.firstCulprit = f ? String(f.operation_id) : "";
    container.dataset.policy = data.policy;
    container.dataset.pending = String(!!data.pending);
    draw();
    if (cursor >= 0) readout.textContent = describe(cursor);
    container.dataset.loadMs = (performance.now() - t0).toFixed(1);
    container.dataset.ready = "true";
    if (data.pending) polling = setTimeout(() => { if (name === report()) refresh(); }, pollMs);
    pollMs = data.pending ? Math.min(POLL_MAX_MS, pollMs * 1.5) : POLL_MS;
  }

  canvas.addEventListener("mousemove", (ev) => { readout.textContent = describe(at(ev)) || describe(cursor); });
  canvas.addEventListener("mouseleave", () => { readout.textContent = describe(cursor); });
  canvas.addEventListener("click", (ev) => choose(at(ev)));
  canvas.addEventListener("keydown", (ev) => {
    if (!data) return;
    const n = data.ids.length;
    const step = { ArrowLeft: -1, ArrowRight: 1, Home: -n, End: n }[ev.key];
    if (step !== undefined) {
      ev.preventDefault();
      // the first key lands on the first operation (End on the last) when none is chosen yet
      const from = cursor >= 0 ? cursor : step > 0 && step < n ? -1 : step < 0 && step > -n ? 1 : 0;
      cursor = Math.min(n - 1, Math.max(0, from + step));
      readout.textContent = describe(cursor);
      draw();
    } else if (ev.key === "Enter" && cursor >= 0) {
      ev.preventDefault();
      choose(cursor);
    }
  });
  new ResizeObserver(() => draw()).observe(canvas);
  document.getElementById("report-select")?.addEventListener("change", () => refresh());
  refresh();
  return { refresh };
}
