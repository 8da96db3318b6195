"""Replay of a Llama-shaped prefill report against what a user has without it: reading every tensor once plus the
model's own numpy forward pass (issue 32 asks replay >= 1.0x that sum on 2 cores, --chain >= 0.5x).

Run: ``python benchmarks/bench_replay_llama.py [--layers 4] [--hidden 1024] [--seq 256] [--repeat 3]``. Writes a
Writer report of ``--layers`` decoder layers (rms_norm, fused QKV linear, head split with grouped-query heads,
rotary embedding of q and k, causal scaled dot-product attention, permute + reshape back, output projection,
residual add, rms_norm, SwiGLU MLP: two linears, silu, multiply, a third linear, residual add): each output its
reference of the stored (bfloat16) inputs rounded to bfloat16. Then times, best of ``--repeat``: reading every
tensor once, the forward pass in float32 numpy, and replay with 1 and 2 workers, with ``--chain``, and with
``--full-stats`` (every output's full metric vector, as replay computed before passing outputs got only what their
verdict reads).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np

import reportdb
from reportdb.analysis import references
from reportdb.analysis.references import Argument

BF16 = ml_dtypes.bfloat16


def summary(tensor_id: int, array: np.ndarray) -> str:
    """A tensor argument as ttnn 0.81's graph report records it."""
    return f"ttnn.Tensor(shape=Shape({list(array.shape)}), dtype=DataType.BFLOAT16, tensor_id={tensor_id})"


class Builder:
    """Writes operations whose outputs are their references, rounded to bfloat16, as a device would store them."""

    def __init__(self, writer: reportdb.Writer) -> None:
        self.w, self.next_tensor, self.next_op, self.bytes = writer, 1, 1, 0

    def tensor(self, array: np.ndarray) -> int:
        """Store one tensor; returns its id."""
        tensor_id, self.next_tensor = self.next_tensor, self.next_tensor + 1
        stored = np.ascontiguousarray(array).astype(BF16)
        self.w.put_tensor(tensor_id, stored, ttnn_dtype="BFLOAT16", layout="TILE")
        self.bytes += stored.nbytes
        return tensor_id

    def op(self, name: str, inputs: list[tuple[int, np.ndarray]], positional: int | None = None,
           **arguments: str) -> list[tuple[int, np.ndarray]]:
        """Record operation ``name`` on ``inputs`` (the first ``positional`` of them, all by default, passed by
        position, the others in ``arguments``); returns its outputs."""
        count = len(inputs) if positional is None else positional
        args = {**{str(i): summary(*t) for i, t in enumerate(inputs[:count])}, **arguments}
        outputs = references.compute_outputs(name, inputs, [Argument(k, v) for k, v in args.items()])
        made = [(self.tensor(o), np.asarray(o).astype(BF16)) for o in outputs]
        self.w.add_operation(self.next_op, name, inputs=[t for t, _ in inputs], outputs=[t for t, _ in made],
                             arguments=args)
        self.next_op += 1
        return made


def rope_tables(seq: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """The rotary embedding's cos and sin caches [1, 1, seq, head]."""
    inv = 1.0 / (10000 ** (np.arange(0, head, 2) / head))
    angles = np.outer(np.arange(seq), inv)
    full = np.concatenate([angles, angles], axis=-1)[None, None]
    return np.cos(full).astype(np.float32), np.sin(full).astype(np.float32)


def write(path: Path, layers: int, hidden: int, seq: int) -> tuple[int, dict[str, Any]]:
    """The report; returns its stored bytes and the model (input, caches, weights) for the forward pass."""
    rng = np.random.default_rng(0)
    heads, kv_heads = hidden // 64, max(1, hidden // 256)
    ffn = int(hidden * 2.75)
    model: dict[str, Any] = {"heads": heads, "kv_heads": kv_heads, "layers": []}
    with reportdb.Writer(path) as w:
        b = Builder(w)
        x = rng.standard_normal((1, seq, hidden)).astype(BF16)
        cos, sin = (t.astype(BF16) for t in rope_tables(seq, 64))
        model.update(x=x, cos=cos, sin=sin)
        cur = (b.tensor(x), x)
        cos_t, sin_t = (b.tensor(cos), cos), (b.tensor(sin), sin)
        for _ in range(layers):
            weights = {name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(BF16) for name, shape in (
                ("qkv", (hidden, (heads + 2 * kv_heads) * 64)), ("o", (hidden, hidden)), ("w1", (hidden, ffn)),
                ("w3", (hidden, ffn)), ("w2", (ffn, hidden)))}
            weights["n1"], weights["n2"] = (rng.uniform(0.5, 1.5, (hidden,)).astype(BF16) for _ in range(2))
            model["layers"].append(weights)
            ids = {name: (b.tensor(array), array) for name, array in weights.items()}
            (h,) = b.op("ttnn.rms_norm", [cur, ids["n1"]], 1, weight=summary(*ids["n1"]), epsilon="1e-05")
            (qkv,) = b.op("ttnn.linear", [h, ids["qkv"]])
            q, k, v = b.op("ttnn.transformer.split_query_key_value_and_split_heads", [qkv], num_heads=str(heads),
                           num_kv_heads=str(kv_heads), transpose_key="False")
            (q,) = b.op("ttnn.experimental.rotary_embedding", [q, cos_t, sin_t])
            (k,) = b.op("ttnn.experimental.rotary_embedding", [k, cos_t, sin_t])
            (attn,) = b.op("ttnn.transformer.scaled_dot_product_attention", [q, k, v], is_causal="True")
            (attn,) = b.op("ttnn.permute", [attn], **{"1": "[0, 2, 1, 3]"})
            (attn,) = b.op("ttnn.reshape", [attn], **{"1": f"[1, {seq}, {hidden}]"})
            (o,) = b.op("ttnn.linear", [attn, ids["o"]])
            (cur,) = b.op("ttnn.add", [cur, o])
            (h,) = b.op("ttnn.rms_norm", [cur, ids["n2"]], 1, weight=summary(*ids["n2"]), epsilon="1e-05")
            (g,) = b.op("ttnn.linear", [h, ids["w1"]])
            (u,) = b.op("ttnn.linear", [h, ids["w3"]])
            (g,) = b.op("ttnn.silu", [g])
            (m,) = b.op("ttnn.multiply", [g, u])
            (d,) = b.op("ttnn.linear", [m, ids["w2"]])
            (cur,) = b.op("ttnn.add", [cur, d])
    return b.bytes, model


def forward(model: dict[str, Any]) -> np.ndarray:
    """The model's own forward pass in float32 numpy, as a user would run it beside the device."""
    f = np.float32
    x = model["x"].astype(f)
    cos, sin = model["cos"].astype(f), model["sin"].astype(f)
    heads, kv = model["heads"], model["kv_heads"]
    seq = x.shape[1]
    causal = np.triu(np.full((seq, seq), -np.inf, dtype=f), 1)

    def norm(t: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return t / np.sqrt((t * t).mean(axis=-1, keepdims=True) + 1e-5) * weight.astype(f)

    def rope(t: np.ndarray) -> np.ndarray:
        half = t.shape[-1] // 2
        return t * cos + np.concatenate((-t[..., half:], t[..., :half]), axis=-1) * sin

    for w in model["layers"]:
        qkv = norm(x, w["n1"]) @ w["qkv"].astype(f)
        q = qkv[..., : heads * 64].reshape(1, seq, heads, 64).transpose(0, 2, 1, 3)
        k = qkv[..., heads * 64 : (heads + kv) * 64].reshape(1, seq, kv, 64).transpose(0, 2, 1, 3)
        v = qkv[..., (heads + kv) * 64 :].reshape(1, seq, kv, 64).transpose(0, 2, 1, 3)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
        scores = q @ k.transpose(0, 1, 3, 2) / f(8.0) + causal
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attn = (scores / scores.sum(axis=-1, keepdims=True)) @ v
        x = x + attn.transpose(0, 2, 1, 3).reshape(1, seq, -1) @ w["o"].astype(f)
        h = norm(x, w["n2"])
        g = h @ w["w1"].astype(f)
        x = x + ((g / (1 + np.exp(-g))) * (h @ w["w3"].astype(f))) @ w["w2"].astype(f)
    return x


def best(repeat: int, run: Callable[[], Any]) -> tuple[float, float, Any]:
    """Best wall time and its CPU time over ``repeat`` runs, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        result = run()
        times.append((time.perf_counter() - start, time.process_time() - cpu))
    wall, cpu_time = min(times)
    return wall, cpu_time, result


def read_all(path: Path) -> None:
    """Every stored tensor read once."""
    with reportdb.open(path) as report:
        for tensor_id in report.tensor_ids():
            report.tensor(tensor_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama.sqlite"
        stored, model = write(path, options.layers, options.hidden, options.seq)
        reportdb.replay(path)  # warm: imports, thread pools, the file's pages
        read, read_cpu, _ = best(options.repeat, lambda: read_all(path))
        fwd, fwd_cpu, _ = best(options.repeat, lambda: forward(model))
        base, base_cpu = read + fwd, read_cpu + fwd_cpu
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {options.layers} layers, hidden "
              f"{options.hidden}, sequence {options.seq}: {stored / 2**20:.0f} MiB of tensors")
        print(f"read every tensor once {read:.2f} s (CPU {read_cpu:.2f}); forward pass {fwd:.2f} s (CPU {fwd_cpu:.2f});"
              f" sum {base:.2f} s (CPU {base_cpu:.2f})")
        for label, kwargs in (("replay, 1 worker", {"workers": 1}), ("replay, 2 workers", {"workers": 2}),
                              ("replay --chain", {"chain": True}),
                              ("replay --full-stats, 2 workers", {"workers": 2, "full_stats": True})):
            wall, cpu, result = best(options.repeat, lambda: reportdb.replay(path, **kwargs))
            print(f"{label}: {wall:.2f} s (CPU {cpu:.2f}), {base / wall:.2f}x the sum by wall, {base_cpu / cpu:.2f}x "
                  f"by CPU; compared {result.compared} of {result.operations}, {result.failed_outputs} failed")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
