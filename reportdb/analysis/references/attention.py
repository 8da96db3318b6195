"""Attention operations of ttnn's transformer models: splitting a fused QKV projection into heads and concatenating
heads back (prefill and decode layouts), the llama rotary embedding with its transformation matrix, decode
attention over a KV cache (contiguous or paged) in float64 rounded once to float32 where they compute, and chunked
prefill attention over a paged one in float32, as ttnn's golden computes it."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, elements, float64s, floats, reference, shape
from .transformer import scaled_dot_product_attention

#: The tile edge: rotary_embedding_llama applies its transformation matrix to each 32-wide tile of a head.
TILE = 32


def _heads(x: np.ndarray, rows: int, count: int, head: int, start: int) -> np.ndarray:
    """``count`` heads of width ``head`` from column ``start`` of ``x`` [B, rows, width] as [B, count, rows, head]."""
    part = x[..., start : start + count * head].reshape(x.shape[0], rows, count, head)
    return np.ascontiguousarray(part.transpose(0, 2, 1, 3))


@reference("ttnn.experimental.nlp_create_qkv_heads", params=(
    Param("input", "tensor", 0, required=True), Param("input_kv", "tensor", 1), Param("num_heads", "int", required=True),
    Param("num_kv_heads", "int"), Param("transpose_k_heads", "bool", default=True), Param("kv_tied", "bool", default=False),
    Param("output_tensors", "output"),
), size=lambda values: sum(elements(shape(values[n])) for n in ("input", "input_kv")))
def nlp_create_qkv_heads(input: Any, input_kv: Any, num_heads: int, num_kv_heads: int | None,
                         transpose_k_heads: bool, kv_tied: bool, **_: Any) -> tuple[np.ndarray, ...]:
    """ttnn.experimental.nlp_create_qkv_heads as its documentation (tt-metal ``nlp_create_qkv_heads_nanobind.cpp``)
    and unit test (``test_nlp_create_qkv_heads.py``) define it: ``[B, 1, S, (nh + 2 nkv) * d]`` split in column
    order into Q, K and V (K and V from ``input_kv`` when given; with ``kv_tied`` one K/V section read twice), each
    as [B, heads, S, d]; K transposed to [B, nkv, d, S] by default."""
    q_in = np.asarray(input)
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    sections = 1 if kv_tied else 2
    x = q_in if input_kv is None else np.concatenate([q_in, np.asarray(input_kv)], axis=-1)
    if x.ndim != 4 or x.shape[1] != 1 or num_heads < 1 or kv_heads < 1 or x.shape[-1] % (num_heads + sections * kv_heads):
        raise UnsupportedArguments(["input"], f"a fused QKV of shape {x.shape} for {num_heads} / {kv_heads} heads")
    head = x.shape[-1] // (num_heads + sections * kv_heads)
    if input_kv is not None and q_in.shape[-1] != num_heads * head:
        raise UnsupportedArguments(["input"], f"a query of width {q_in.shape[-1]} for {num_heads} heads of {head}")
    flat = x[:, 0]
    query = _heads(flat, x.shape[2], num_heads, head, 0)
    key = _heads(flat, x.shape[2], kv_heads, head, num_heads * head)
    value = key.copy() if kv_tied else _heads(flat, x.shape[2], kv_heads, head, (num_heads + kv_heads) * head)
    if transpose_k_heads:
        key = np.ascontiguousarray(key.transpose(0, 1, 3, 2))
    return query, key, value


@reference("ttnn.experimental.nlp_create_qkv_heads_decode", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("num_heads", "int", required=True),
    Param("num_kv_heads", "int"), Param("output_tensors", "output"), Param("overlap_qk_coregrid", "ignored"),
    Param("batch_offset", "tensor"), Param("slice_size", "int"),
))
def nlp_create_qkv_heads_decode(input_tensor: Any, num_heads: int, num_kv_heads: int | None, batch_offset: Any,
                                slice_size: int | None, **_: Any) -> tuple[np.ndarray, ...]:
    """ttnn.experimental.nlp_create_qkv_heads_decode as its documentation (tt-metal
    ``nlp_create_qkv_heads_decode_nanobind.cpp``) defines it: ``[1, S=1, B, (nh + 2 nkv) * d]`` split in column
    order (as nlp_create_qkv_heads) into Q [S, B, nh, d], K and V [S, B, nkv, d]. A batch slice (``batch_offset``,
    ``slice_size``) is not modelled."""
    if batch_offset is not None or slice_size is not None:
        raise UnsupportedArguments(["batch_offset" if batch_offset is not None else "slice_size"],
                                   "a batch slice is not modelled")
    x = np.asarray(input_tensor)
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if x.ndim != 4 or x.shape[0] != 1 or num_heads < 1 or kv_heads < 1 or x.shape[-1] % (num_heads + 2 * kv_heads):
        raise UnsupportedArguments(["input_tensor"], f"a fused QKV of shape {x.shape} for {num_heads} / {kv_heads} heads")
    head = x.shape[-1] // (num_heads + 2 * kv_heads)
    seq, batch = x.shape[1], x.shape[2]
    bounds = np.cumsum([0, num_heads * head, kv_heads * head, kv_heads * head])
    counts = (num_heads, kv_heads, kv_heads)
    return tuple(np.ascontiguousarray(x[0, :, :, bounds[i] : bounds[i + 1]].reshape(seq, batch, counts[i], head))
                 for i in range(3))


@reference("ttnn.experimental.nlp_concat_heads", params=(Param("input_tensor", "tensor", 0, required=True),))
def nlp_concat_heads(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.experimental.nlp_concat_heads as its documentation (tt-metal ``nlp_concat_heads_nanobind.cpp``) defines
    it: [B, nh, S, d] shuffled to [B, 1, S, nh * d]."""
    x = np.asarray(input_tensor)
    if x.ndim != 4:
        raise UnsupportedArguments(["input_tensor"], f"an input of shape {x.shape} ([B, heads, S, d] expected)")
    b, heads, s, d = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(b, 1, s, heads * d)


@reference("ttnn.transformer.concatenate_heads", "ttnn.experimental.concatenate_heads",
           params=(Param("input_tensor", "tensor", 0, required=True),))
def concatenate_heads(input_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.transformer.concatenate_heads as its golden (tt-metal ``ttnn/ttnn/operations/transformer.py``):
    [B, nh, S, d] permuted and reshaped to [B, S, nh * d]."""
    x = np.asarray(input_tensor)
    if x.ndim != 4:
        raise UnsupportedArguments(["input_tensor"], f"an input of shape {x.shape} ([B, heads, S, d] expected)")
    b, heads, s, d = x.shape
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(b, s, heads * d)


@reference("ttnn.experimental.nlp_concat_heads_decode", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("num_heads", "int", required=True),
    Param("output_tensor", "output"),
))
def nlp_concat_heads_decode(input_tensor: Any, num_heads: int, **_: Any) -> np.ndarray:
    """ttnn.experimental.nlp_concat_heads_decode as its documentation (tt-metal
    ``nlp_concat_heads_decode_nanobind.cpp``) defines it: [S=1, B, heads (padded), d], its first ``num_heads`` heads
    concatenated to [S=1, 1, B, num_heads * d]."""
    x = np.asarray(input_tensor)
    if x.ndim != 4 or not 1 <= num_heads <= x.shape[2]:
        raise UnsupportedArguments(["num_heads"], f"{num_heads} heads of an input of shape {x.shape}")
    s, b, _, d = x.shape
    return np.ascontiguousarray(x[:, :, :num_heads, :]).reshape(s, 1, b, num_heads * d)


def _rotary_llama_size(values: Mapping[str, Any]) -> int:
    """The input broadcast against the cos and sin tables (per-head tables over one shared input build more)."""
    return broadcast(*(shape(values[name]) for name in ("input_tensor", "cos_cache", "sin_cache")))


@reference("ttnn.experimental.rotary_embedding_llama", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("cos_cache", "tensor", 1, required=True),
    Param("sin_cache", "tensor", 2, required=True), Param("trans_mat", "tensor", 3, required=True),
    Param("is_decode_mode", "bool", default=False),
), size=_rotary_llama_size)
def rotary_embedding_llama(input_tensor: Any, cos_cache: Any, sin_cache: Any, trans_mat: Any, **_: Any) -> np.ndarray:
    """ttnn.experimental.rotary_embedding_llama as its compute kernel (tt-metal ``.../rotary_embedding_llama/device/
    kernels/compute/rotary_embedding_llama.cpp``) computes it: ``x * cos + (x @ trans_mat) * sin``, the 32x32
    transformation matrix applied to each 32-wide tile of the last axis, cos and sin broadcast as its documentation
    says (over heads when their head axis is 1). Prefill [B, nh, S, d] and decode [1, B, nh, d] alike."""
    x = float64s("input_tensor", input_tensor)
    cos, sin = float64s("cos_cache", cos_cache), float64s("sin_cache", sin_cache)
    mat = float64s("trans_mat", trans_mat)
    if mat.ndim < 2 or mat.shape[-1] != TILE or mat.shape[-2] % TILE or x.shape[-1] % TILE:
        raise UnsupportedArguments(["trans_mat"], f"a matrix of shape {mat.shape} for heads of {x.shape[-1]}")
    tiles = mat.reshape(-1, TILE, TILE)
    if not np.array_equal(tiles, np.broadcast_to(tiles[:1], tiles.shape)):
        raise UnsupportedArguments(["trans_mat"], "transformation tiles that differ (one per core is not modelled)")
    try:
        shaped = np.broadcast_shapes(x.shape, cos.shape, sin.shape)
    except ValueError:
        raise UnsupportedArguments(["cos_cache"], f"cos {cos.shape} and sin {sin.shape} for an input {x.shape}") from None
    if shaped != x.shape:
        raise UnsupportedArguments(["cos_cache"], f"cos {cos.shape} and sin {sin.shape} for an input {x.shape}")
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // TILE, TILE)
    rotated = (blocks @ tiles[0]).reshape(x.shape)
    return (x * cos + rotated * sin).astype(np.float32)


def _decode_size(values: Mapping[str, Any]) -> int:
    """The keys and values repeated over the query heads for one user at a time, and the contiguous copy of a
    paged cache: bounded by the caches' elements times the query heads per KV head."""
    q, k = shape(values["input_tensor_q"]), shape(values["input_tensor_k"])
    if len(q) != 4 or len(k) != 4 or not k[1]:
        return max(elements(q), elements(k))
    table = shape(values.get("page_table_tensor"))
    cache = elements(table) * k[1] * k[2] * k[3] if len(table) == 2 else elements(k)
    return max(cache, cache * max(1, q[2] // k[1]) // max(1, table[0] if len(table) == 2 else k[0]))


def _decode_attention(q: np.ndarray, keys: list[np.ndarray], values: list[np.ndarray], positions: list[int],
                      is_causal: bool, mask: np.ndarray | None, scale: float | None) -> np.ndarray:
    """Attention of each user's query [1, B, nh, d] over its cache (``keys[b]`` [nkv, S, d]): the keys up to its
    position when causal (a negative position gives zeros), all of them with an additive or boolean ``mask``
    [B or 1, 1, nh, S] otherwise; KV heads repeated for grouped queries; [1, B, nh, d]."""
    batch, heads, dim = q.shape[1], q.shape[2], q.shape[3]
    out = np.zeros((1, batch, heads, values[0].shape[-1]))
    for b in range(batch):
        key, value = keys[b], values[b]
        end = positions[b % len(positions)] + 1 if is_causal else key.shape[1]
        if end <= 0:
            continue
        if heads % key.shape[0]:
            raise UnsupportedArguments(["input_tensor_k"], f"{key.shape[0]} KV heads for {heads} query heads")
        key = np.repeat(key[:, :end], heads // key.shape[0], axis=0)
        value = np.repeat(value[:, :end], heads // value.shape[0], axis=0)
        scores = np.einsum("hd,hsd->hs", q[0, b], key) * (dim**-0.5 if scale is None else scale)
        if mask is not None:
            row = mask[b % mask.shape[0], 0, :, :end]
            scores = np.where(row, scores, -np.inf) if row.dtype == bool else scores + row.astype(np.float64)
        with np.errstate(invalid="ignore"):
            weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
            weights /= weights.sum(axis=-1, keepdims=True)
        out[0, b] = np.einsum("hs,hsd->hd", weights, value)
    return out.astype(np.float32)


def _positions(cur_pos: tuple[int, ...] | None, cur_pos_tensor: Any, batch: int, length: int) -> list[int]:
    """Each user's cache position: from ``cur_pos_tensor``, else ``cur_pos``, else the cache's last row."""
    if cur_pos_tensor is not None:
        found = np.asarray(cur_pos_tensor).reshape(-1)
        if found.dtype.kind == "f" and not np.all(np.mod(found, 1) == 0):
            raise UnsupportedArguments(["cur_pos_tensor"], "positions that are not integers")
        return [int(p) for p in found] or [length - 1] * batch
    return list(cur_pos) if cur_pos else [length - 1] * batch


def _decode_checks(q: np.ndarray, attention_sink: Any, sliding_window_size: int | None, mask: Any,
                   is_causal: bool) -> np.ndarray | None:
    """The query's layout checked, the features not modelled refused, and the mask as an array (or None)."""
    if q.ndim != 4 or q.shape[0] != 1:
        raise UnsupportedArguments(["input_tensor_q"], f"a query of shape {q.shape} ([1, B, heads, d] expected)")
    for name, value in (("attention_sink", attention_sink), ("sliding_window_size", sliding_window_size)):
        if value is not None:
            raise UnsupportedArguments([name], "not modelled by this reference")
    if mask is None:
        return None
    if is_causal:
        raise UnsupportedArguments(["attn_mask"], "a mask with causal decode (ttnn takes one only when not causal)")
    array = np.asarray(mask)
    if array.ndim != 4 or array.shape[2] != q.shape[2]:
        raise UnsupportedArguments(["attn_mask"], f"a mask of shape {array.shape} ([B, 1, heads, S] expected)")
    return array if array.dtype == bool else float64s("attn_mask", array)


_DECODE_KEYWORDS = (
    Param("is_causal", "bool", default=True), Param("attn_mask", "tensor"), Param("cur_pos_tensor", "tensor"),
    Param("attention_sink", "tensor"), Param("scale", "float"), Param("sliding_window_size", "int"),
    Param("program_config", "ignored"),
)


@reference("ttnn.transformer.scaled_dot_product_attention_decode", params=(
    Param("input_tensor_q", "tensor", 0, required=True), Param("input_tensor_k", "tensor", 1, required=True),
    Param("input_tensor_v", "tensor", 2, required=True), Param("cur_pos", "ints"), Param("share_cache", "bool"),
) + _DECODE_KEYWORDS, size=_decode_size)
def scaled_dot_product_attention_decode(
    input_tensor_q: Any, input_tensor_k: Any, input_tensor_v: Any, cur_pos: tuple[int, ...] | None, share_cache: bool | None,
    is_causal: bool, attn_mask: Any, cur_pos_tensor: Any, attention_sink: Any, scale: float | None,
    sliding_window_size: int | None, **_: Any,
) -> np.ndarray:
    """ttnn.transformer.scaled_dot_product_attention_decode as its golden (tt-metal
    ``ttnn/ttnn/operations/transformer_golden.py``, ``scaled_dot_product_attention_decode_golden``): per user b, its
    query [1, b, nh, d] over the K/V cache [B, nkv, S, d] (row 0 when shared or of batch 1) up to ``cur_pos[b]``
    when causal, over all of it with ``attn_mask`` otherwise. Attention sinks and sliding windows are refused."""
    q = float64s("input_tensor_q", input_tensor_q)
    k, v = float64s("input_tensor_k", input_tensor_k), float64s("input_tensor_v", input_tensor_v)
    mask = _decode_checks(q, attention_sink, sliding_window_size, attn_mask, is_causal)
    if k.ndim != 4 or v.ndim != 4 or k.shape[:3] != v.shape[:3]:
        raise UnsupportedArguments(["input_tensor_k"], f"caches of shapes {k.shape}, {v.shape} ([B, nkv, S, d])")
    rows = [0 if share_cache or k.shape[0] == 1 else b for b in range(q.shape[1])]
    if max(rows) >= k.shape[0]:
        raise UnsupportedArguments(["input_tensor_k"], f"a cache of {k.shape[0]} users for {q.shape[1]} queries")
    positions = _positions(cur_pos, cur_pos_tensor, q.shape[1], k.shape[2])
    return _decode_attention(q, [k[r] for r in rows], [v[r] for r in rows], positions, is_causal, mask, scale)


def pages(name: str, cache: np.ndarray, table: np.ndarray) -> list[np.ndarray]:
    """A paged cache [pages, nkv, block, d] read through its page table [B, pages per user] as one contiguous cache
    [nkv, pages per user * block, d] per user (tt-metal ``transformer_golden.py``, ``_paged_to_contiguous``)."""
    if cache.ndim != 4 or table.ndim < 2:
        raise UnsupportedArguments([name], f"a paged cache {cache.shape} with a page table {table.shape}")
    index = table.reshape(table.shape[0], -1)
    if index.dtype.kind == "f" and not np.all(np.mod(index, 1) == 0):
        raise UnsupportedArguments(["page_table_tensor"], "page numbers that are not integers")
    index = index.astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= cache.shape[0]):
        raise UnsupportedArguments(["page_table_tensor"], f"a page outside the cache's {cache.shape[0]}")
    return [cache[row].transpose(1, 0, 2, 3).reshape(cache.shape[1], -1, cache.shape[3]) for row in index]


@reference("ttnn.transformer.paged_scaled_dot_product_attention_decode", params=(
    Param("input_tensor_q", "tensor", 0, required=True), Param("input_tensor_k", "tensor", 1, required=True),
    Param("input_tensor_v", "tensor", 2, required=True), Param("page_table_tensor", "tensor", 3, required=True),
    Param("paged_cache_geometry", "none"), Param("cache_position_modulo", "none"), Param("spec_multi_pos_tiles", "ignored"),
) + _DECODE_KEYWORDS, size=_decode_size)
def paged_scaled_dot_product_attention_decode(
    input_tensor_q: Any, input_tensor_k: Any, input_tensor_v: Any, page_table_tensor: Any, is_causal: bool,
    attn_mask: Any, cur_pos_tensor: Any, attention_sink: Any, scale: float | None, sliding_window_size: int | None,
    **_: Any,
) -> np.ndarray:
    """ttnn.transformer.paged_scaled_dot_product_attention_decode as its golden (tt-metal ``transformer_golden.py``,
    ``paged_scaled_dot_product_attention_decode_golden``): the paged K/V caches read through the page table, then
    decode attention as :func:`scaled_dot_product_attention_decode`. A geometry override and a circular cache
    (``cache_position_modulo``) are refused."""
    q = float64s("input_tensor_q", input_tensor_q)
    mask = _decode_checks(q, attention_sink, sliding_window_size, attn_mask, is_causal)
    table = np.asarray(page_table_tensor)
    keys = pages("input_tensor_k", float64s("input_tensor_k", input_tensor_k), table)
    values = pages("input_tensor_v", float64s("input_tensor_v", input_tensor_v), table)
    if len(keys) < q.shape[1]:
        raise UnsupportedArguments(["page_table_tensor"], f"{len(keys)} users' pages for {q.shape[1]} queries")
    positions = _positions(None, cur_pos_tensor, q.shape[1], keys[0].shape[1])
    return _decode_attention(q, keys, values, positions, is_causal, mask, scale)


def _chunked_size(values: Mapping[str, Any]) -> int:
    """The contiguous copy of every user's pages and the score matrix of the chunk's queries over them."""
    q, k, table = (shape(values.get(n)) for n in ("input_tensor_q", "input_tensor_k", "page_table_tensor"))
    if len(q) != 4 or len(k) != 4 or len(table) != 2:
        return max(elements(q), elements(k))
    keys = table[1] * k[2]
    return max(elements(table) * k[1] * k[2] * k[3], q[0] * q[1] * q[2] * keys, q[0] * q[1] * keys * k[3])


@reference("ttnn.transformer.chunked_scaled_dot_product_attention", params=(
    Param("input_tensor_q", "tensor", 0, required=True), Param("input_tensor_k", "tensor", 1, required=True),
    Param("input_tensor_v", "tensor", 2, required=True), Param("page_table_tensor", "tensor", 3, required=True),
    Param("chunk_start_idx", "int", 4), Param("chunk_start_idx_tensor", "tensor"), Param("scale", "float"),
    Param("program_config", "ignored"), Param("paged_cache_geometry", "none"), Param("sliding_window_size", "none"),
    Param("attention_sink", "none"),
), size=_chunked_size)
def chunked_scaled_dot_product_attention(input_tensor_q: Any, input_tensor_k: Any, input_tensor_v: Any,
                                         page_table_tensor: Any, chunk_start_idx: int | None, chunk_start_idx_tensor: Any,
                                         scale: float | None, **_: Any) -> np.ndarray:
    """ttnn.transformer.chunked_scaled_dot_product_attention as its golden (tt-metal ``transformer_golden.py``,
    ``chunked_scaled_dot_product_attention_golden``): the paged caches read through the page table, cut to the
    chunk's end, and causal attention of the chunk's queries, which sit at ``chunk_start_idx`` onwards (in float32, as
    :func:`scaled_dot_product_attention` and the golden compute it)."""
    q = np.asarray(input_tensor_q)
    table = np.asarray(page_table_tensor)
    keys = np.stack(pages("input_tensor_k", floats("input_tensor_k", input_tensor_k), table))
    values = np.stack(pages("input_tensor_v", floats("input_tensor_v", input_tensor_v), table))
    start = chunk_start_idx
    if chunk_start_idx_tensor is not None:
        found = np.asarray(chunk_start_idx_tensor).reshape(-1)
        start = int(found[0]) if found.size == 1 and float(found[0]).is_integer() else None
    if start is None or start < 0 or q.ndim != 4 or start + q.shape[2] > keys.shape[2] or keys.shape[0] != q.shape[0]:
        raise UnsupportedArguments(["chunk_start_idx"], f"a chunk of {q.shape} at {start} over caches of {keys.shape}")
    end = start + q.shape[2]
    return scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], None, True, scale, None, None, None)
