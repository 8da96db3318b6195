"""The page's overview of every operation (issue 24): the API's compact per-operation summary and the page drawing it.

Usage: python benchmarks/bench_overview.py [--ops 5000] [--repeat 5] [--no-browser] [--report DIR] [--first-paint-mib 1024]

A report is made in a temporary folder: ``--ops`` operations in a chain, each with one 1 x 32 float32 output and its
local and global golden tensors and comparison records (one operation in the middle wrong by itself, those after it
inheriting its error). Figures:

* server, in-process (Flask's test client, so no HTTP in the figure): the first ``GET api/reports/R/overview``
  (which recomputes every golden record under the policy: ``compare_golden``), then the summary made again with the
  golden analysis kept (the answer's own cache entry dropped before each run: the ~200 ms target is for this part),
  and the answer's size in bytes;
* browser: ``reportdb serve`` in a subprocess and Chromium (Playwright): the page opened once on the fresh server (the
  list and overview shown from the recorded verdicts while the golden analysis runs in the background, then its final
  roles drawn: three figures),
  then in fresh pages the overview's load (request, JSON parse and draw: ``#overview[data-load-ms]``) and its draw
  alone (``data-draw-ms``), medians of ``--repeat`` pages; and a redraw on a resize.

With ``--first-paint-mib``, also the page's first paint on a report that large (the list shown, the overview drawn).

Nothing here is a test. The figures go to the report, with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import reportdb

ROOT = Path(__file__).resolve().parents[1]


def build(path: Path, ops: int) -> int:
    """A chain of ``ops`` operations with local and global golden records; returns the culprit's id."""
    rng = np.random.default_rng(1)
    culprit = ops // 2
    x = rng.standard_normal((1, 32)).astype(np.float32)
    g = x
    with reportdb.Writer(path) as w:
        w.put_tensor(0, x)
        for op in range(1, ops + 1):
            local = np.tanh(x * 1.01).astype(np.float32)
            g = np.tanh(g * 1.01).astype(np.float32)
            out = -local if op == culprit else local
            w.put_tensor(op, out, role="output")
            w.put_tensor(1_000_000 + op, local)
            w.put_tensor(2_000_000 + op, g)
            w.add_operation(op, f"ttnn.op_{op % 17}", inputs=[op - 1], outputs=[op])
            x = out
        w.add_rows("local_tensor_comparison_records", [
            {"tensor_id": op, "golden_tensor_id": 1_000_000 + op, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 1.0}
            for op in range(1, ops + 1)])
        w.add_rows("global_tensor_comparison_records", [
            {"tensor_id": op, "golden_tensor_id": 2_000_000 + op, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 1.0}
            for op in range(1, ops + 1)])
    return culprit


def server_side(path: Path, repeat: int) -> dict[str, float]:
    """Milliseconds of the first overview request and of the summary made again with the golden analysis kept."""
    import reportdb.web as web

    app = web.create_app([path])
    client = app.test_client()
    served = app.extensions["reportdb"].served
    name = next(iter(served.by_name))
    url = f"api/reports/{name}/overview"
    t0 = time.perf_counter()
    response = client.get(url)
    cold = time.perf_counter() - t0
    assert response.status_code == 200, response.get_data(as_text=True)
    size = len(response.get_data())
    times, cpu = [], []
    for _ in range(repeat):
        with served._lock:  # drop the answer, keep the golden analysis: the summary is made again
            for key in [k for k in served._cache if k[1][0] == "overview"]:
                del served._cache[key]
        t0, c0 = time.perf_counter(), time.thread_time()
        assert client.get(url).status_code == 200
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    t0 = time.perf_counter()
    client.get(url)
    cached = time.perf_counter() - t0
    app.extensions["reportdb"].close()
    return {"first_ms": cold * 1e3, "summary_ms": statistics.median(times) * 1e3, "cached_ms": cached * 1e3,
            "summary_cpu_ms": statistics.median(cpu) * 1e3, "bytes": float(size)}


#: True once the list and the overview show the server's final roles (no ``pending`` answer left; a page without
#: the attribute, before the background analysis, always showed final ones).
FINAL = ("() => document.querySelector('#overview').dataset.pending !== 'true'"
         " && document.querySelector('#op-table').dataset.pending !== 'true'")


def browser_side(path: Path, repeat: int) -> dict[str, float]:
    """Medians of the overview's load and draw in fresh Chromium pages, and a redraw after a resize."""
    sys.path.insert(0, str(ROOT / "tests"))
    from served import VIEWPORT, chromium, serving

    with serving(path, cwd=Path.cwd()) as url, chromium() as browser:
        loads, draws, pages, ready_ms, cold = [], [], [], [], {}
        for i in range(repeat + 1):
            context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
            page = context.new_page()
            page.set_default_timeout(600_000)
            t0 = time.perf_counter()
            page.goto(url)
            page.wait_for_selector("body[data-ready=true]")
            listed = time.perf_counter() - t0
            page.wait_for_selector("#overview[data-ready=true]")
            shown = time.perf_counter() - t0
            page.wait_for_function(FINAL)
            final = time.perf_counter() - t0
            if i == 0:  # the first page warms the server (the golden analysis): its figures apart
                cold = {"cold_list_ms": listed * 1e3, "cold_overview_ms": shown * 1e3, "cold_final_ms": final * 1e3}
            else:
                loads.append(float(page.get_attribute("#overview", "data-load-ms") or "nan"))
                draws.append(float(page.get_attribute("#overview", "data-draw-ms") or "nan"))
                pages.append(shown * 1e3)
                ready_ms.append(listed * 1e3)
            if i == repeat:
                page.set_viewport_size({"width": 1000, "height": 768})
                page.wait_for_timeout(300)
                redraw = float(page.get_attribute("#overview", "data-draw-ms") or "nan")
            context.close()
    return {"load_ms": statistics.median(loads), "draw_ms": statistics.median(draws), "redraw_ms": redraw,
            "page_to_overview_ms": statistics.median(pages), "page_to_list_ms": statistics.median(ready_ms), **cold}


def first_paint(mib: int, repeat: int) -> None:
    """The page's first paint on a report of about ``mib`` MiB (bench_web.py's report: a 256 MiB tensor, a 64 MiB
    golden pair with its local record, 8 MiB outputs to the size): fresh pages until the operation list is shown
    (``body[data-ready]``) and until the overview is drawn; the first page, on a fresh server, apart."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_web import make_report

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        report = make_report(Path(tmp), 1 << 26, 1 << 24, mib)
        size = (report / "db.sqlite").stat().st_size / 2**20
        print(f"first paint: report of {size:.0f} MiB made in {time.perf_counter() - t0:.0f} s; load average "
              f"{os.getloadavg()[0]:.1f}")
        b = browser_side(report, repeat)
        print(f"first paint: fresh server, first page: list shown {b['cold_list_ms']:.0f} ms, overview drawn "
              f"{b['cold_overview_ms']:.0f} ms, final roles drawn {b['cold_final_ms']:.0f} ms (the golden pair recomputed); then list shown {b['page_to_list_ms']:.0f} ms, "
              f"overview drawn {b['page_to_overview_ms']:.0f} ms (medians of {repeat} fresh pages, from navigation)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--first-paint-mib", type=int, default=0, help="also the first paint on a report this large")
    parser.add_argument("--report", type=Path, help="made here when missing, else used as it is (a rerun skips the build)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.report or Path(tmp) / "overview"
        t0 = time.perf_counter()
        if not path.exists():
            build(path, args.ops)
        print(f"report: {args.ops} operations, {2 * args.ops} golden records, made in {time.perf_counter() - t0:.1f} s; "
              f"load average {os.getloadavg()[0]:.1f}")
        s = server_side(path, args.repeat)
        print(f"server: first overview {s['first_ms']:.0f} ms (recomputes the golden records), summary with the "
              f"analysis kept {s['summary_ms']:.1f} ms wall, {s['summary_cpu_ms']:.1f} ms CPU (medians of {args.repeat}), cached answer {s['cached_ms']:.1f} ms, "
              f"{s['bytes'] / 1024:.0f} KiB")
        if not args.no_browser:
            b = browser_side(path, args.repeat)
            print(f"browser: overview load (request + parse + draw) {b['load_ms']:.1f} ms, draw {b['draw_ms']:.1f} ms, "
                  f"redraw after a resize {b['redraw_ms']:.1f} ms, page open to overview drawn {b['page_to_overview_ms']:.0f} ms "
                  f"(medians of {args.repeat} fresh pages); first page on a fresh server: list {b['cold_list_ms']:.0f} ms, "
                  f"overview {b['cold_overview_ms']:.0f} ms, final roles {b['cold_final_ms']:.0f} ms; list shown {b['page_to_list_ms']:.0f} ms")
    if args.first_paint_mib:
        first_paint(args.first_paint_mib, args.repeat)


if __name__ == "__main__":
    main()
