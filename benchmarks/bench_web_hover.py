"""The page's hover in Chromium (issue 25): the time of the pointer-move handler on a heatmap, from the event to the
tooltip and the redrawn panels, measured in the page with ``performance.now()`` around ``dispatchEvent`` of each
move (the handler runs synchronously inside it), over ``--moves`` moves to different elements, one a frame (Chromium
delivers pointer moves aligned to frames), so the previous frame's paint is not counted in the next move.

Usage: python benchmarks/bench_web_hover.py [--side 1024] [--moves 200]

A report with one ``--side`` x ``--side`` float32 tensor and its golden (a local comparison record) is made in a
temporary folder and served by ``reportdb serve`` on a loopback port; Debian's Chromium (Playwright) opens it at a
zoom of 1x1 cells (``view=0:160,0:240``, 160 x 240 elements over three panels), where hover values come from the
window already fetched: the run fails if a move makes a request. The target is one frame (16 ms). Nothing here is a
test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

import reportdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from served import VIEWPORT, chromium, serving

MEASURE = """async (moves) => {
  const canvas = document.querySelector('#panel-actual .canvas-wrap canvas');
  const rect = canvas.getBoundingClientRect();
  const times = [];
  for (let i = 0; i < moves; i++) {
    const x = rect.left + 2 + ((i * 37) % Math.max(1, Math.floor(rect.width - 4)));
    const y = rect.top + 2 + ((i * 53) % Math.max(1, Math.floor(rect.height - 4)));
    const ev = new PointerEvent('pointermove', { clientX: x, clientY: y, bubbles: true, pointerId: 1 });
    const t0 = performance.now();
    canvas.dispatchEvent(ev);
    times.push(performance.now() - t0);
    await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0))); // one move a frame, as Chromium sends them
  }
  return { times, source: document.querySelector('#tooltip').dataset.source };
}"""


def _report(path: Path, side: int) -> None:
    rng = np.random.default_rng(1)
    golden = rng.standard_normal((1, 1, side, side)).astype(np.float32)
    actual = (golden + rng.standard_normal(golden.shape).astype(np.float32) * 1e-3).astype(np.float32)
    with reportdb.Writer(path) as w:
        w.put_tensor(0, golden)
        w.put_tensor(1, actual, role="output")
        w.put_tensor(101, golden)
        w.add_operation(1, "ttnn.add", inputs=[0], outputs=[1])
        w.add_rows("local_tensor_comparison_records",
                   [{"tensor_id": 1, "golden_tensor_id": 101, "matches": 1, "desired_pcc": 0.99, "actual_pcc": 1.0}])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--side", type=int, default=1024)
    ap.add_argument("--moves", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hover"
        _report(path, args.side)
        with serving(path, cwd=Path.cwd()) as url, chromium() as browser:
            page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
            asked: list[str] = []
            page.on("request", lambda r: asked.append(r.url) if "/point" in r.url or "/values" in r.url else None)
            page.goto(url + "#report=hover&op=1&tensor=1&kind=local&view=0%3A160%2C0%3A240")
            page.wait_for_selector("body[data-ready=true]")
            page.wait_for_function("() => document.querySelector('#panel-golden').dataset.cell === '1,1'")
            page.evaluate(MEASURE, 20)  # warm
            out = page.evaluate(MEASURE, args.moves)
    times = sorted(out["times"])
    if asked or out["source"] != "grid":
        sys.exit(f"hover asked the server: {asked[:3]} (tooltip source {out['source']})")
    p95 = times[int(0.95 * (len(times) - 1))]
    print(f"hover handler over {len(times)} moves, {args.side}x{args.side} float32 tensor at 1x1 cells, 3 panels: "
          f"median {statistics.median(times):.2f} ms, p95 {p95:.2f} ms, max {times[-1]:.2f} ms (target < 16 ms); "
          f"requests during the moves: {len(asked)}")


if __name__ == "__main__":
    main()
