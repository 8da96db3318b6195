"""Attention: scaled dot-product attention (causal or not, an additive or boolean mask, grouped-query heads, a sliding
window) in float32 as ttnn's golden computes it, and the rotary embedding in float64 rounded once to float32, as ttnn's
golden functions define them, and the split of a fused QKV projection into heads (three outputs)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import Param, UnsupportedArguments, broadcast, elements, float64s, floats, reference, shape


def _allowed(query_length: int, key_length: int, causal: bool, window: int | None) -> np.ndarray:
    """Which key each query may attend to: queries sit at the end of the keys, as ttnn's golden places them."""
    q = np.arange(max(0, key_length - query_length), max(0, key_length - query_length) + query_length)[:, None]
    k = np.arange(key_length)[None, :]
    allowed = np.ones((query_length, key_length), dtype=bool)
    if causal:
        allowed &= k <= q
    if window is not None:
        allowed &= (k > q - window) if causal else ((k >= q - window // 2) & (k <= q + window // 2))
    return allowed


def _attention_size(values: Mapping[str, Any]) -> int:
    """The score matrix [batch, heads, queries, keys] (with the mask broadcast over it), the keys and values repeated
    over the query heads, and the output: 10^5 queries and keys one wide build 10^10 scores from 2 * 10^5 values."""
    q, k, v = (shape(values[name]) for name in ("input_tensor_q", "input_tensor_k", "input_tensor_v"))
    if len(q) != 4 or len(k) != 4 or len(v) != 4:  # the reference refuses them
        return max(elements(q), elements(k), elements(v))
    scores = (max(q[0], k[0]), q[1], q[2], k[2])
    repeated = scores[0] * q[1] * k[2] * max(k[3], v[3])
    return max(broadcast(scores, shape(values.get("attn_mask"))), repeated, scores[0] * q[1] * q[2] * v[3])


@reference("ttnn.transformer.scaled_dot_product_attention", params=(
    Param("input_tensor_q", "tensor", 0, required=True), Param("input_tensor_k", "tensor", 1, required=True),
    Param("input_tensor_v", "tensor", 2, required=True), Param("attn_mask", "tensor"), Param("is_causal", "bool", default=True),
    Param("scale", "float"), Param("sliding_window_size", "int"), Param("attention_sink", "tensor"),
    Param("cu_window_seqlens", "tensor"), Param("program_config", "ignored"),
), size=_attention_size)
def scaled_dot_product_attention(input_tensor_q: Any, input_tensor_k: Any, input_tensor_v: Any, attn_mask: Any,
                                 is_causal: bool, scale: float | None, sliding_window_size: int | None,
                                 attention_sink: Any, cu_window_seqlens: Any, **_: Any) -> np.ndarray:
    """softmax(q k^T * scale + mask) v over [batch, heads, sequence, head_dim]; K/V heads repeated for grouped queries.

    In float32 throughout, as ttnn's golden (ttnn 0.81.1 ``ttnn/operations/transformer_golden.py``,
    ``scaled_dot_product_attention_golden`` through ``_scaled_attention``) computes it: its inputs, scores, mask and
    softmax are torch float32. The scores are
    scaled, masked and normalised in place (one score array, no float64 copies: for a prefill the [heads, S, S] scores
    are most of the reference's memory and time)."""
    for name, value in (("attention_sink", attention_sink), ("cu_window_seqlens", cu_window_seqlens)):
        if value is not None:
            raise UnsupportedArguments([name], "not modelled by this reference")
    q, k, v = (floats(n, t) for n, t in (("input_tensor_q", input_tensor_q), ("input_tensor_k", input_tensor_k),
                                           ("input_tensor_v", input_tensor_v)))
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or q.shape[1] % k.shape[1] or k.shape[1] != v.shape[1]:
        raise UnsupportedArguments(["input_tensor_q"], f"shapes {q.shape}, {k.shape}, {v.shape} are not [b, heads, s, d]")
    if sliding_window_size is not None and sliding_window_size < 1:  # a negative one would wrap in int64 arithmetic
        raise UnsupportedArguments(["sliding_window_size"], f"a window of {sliding_window_size} keys")
    k, v = (np.repeat(t, q.shape[1] // t.shape[1], axis=1) for t in (k, v))
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    scores *= np.float32(q.shape[-1] ** -0.5 if scale is None else scale)  # torch rounds the scale to float32
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        if mask.dtype == bool:
            scores = np.where(mask, scores, np.float32(-np.inf))
        else:
            scores = scores + floats("attn_mask", mask)  # a broadcast mask may widen the scores' batch axes
    if is_causal or sliding_window_size is not None:
        np.copyto(scores, np.float32(-np.inf),
                  where=~_allowed(q.shape[-2], k.shape[-2], is_causal, sliding_window_size))
    with np.errstate(invalid="ignore"):
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
    return np.matmul(scores, v)


def _rotary_size(values: Mapping[str, Any]) -> int:
    """The input broadcast against the cos and sin caches (one row of each at a token index)."""
    index = values.get("token_index") if values.get("token_index") is not None else values.get("token_idx")
    caches = [shape(values[name]) for name in ("cos_cache", "sin_cache")]
    if index is not None:
        caches = [c[:2] + (min(1, c[2]),) + c[3:] if len(c) > 2 else c for c in caches]
    return broadcast(shape(values["input_tensor"]), *caches)


@reference("ttnn.experimental.rotary_embedding", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("cos_cache", "tensor", 1, required=True),
    Param("sin_cache", "tensor", 2, required=True), Param("token_index", "int", 3), Param("token_idx", "int"),
), size=_rotary_size)
def rotary_embedding(input_tensor: Any, cos_cache: Any, sin_cache: Any, token_index: int | None,
                     token_idx: int | None, **_: Any) -> np.ndarray:
    """x * cos + rotate_half(x) * sin, with cos/sin taken at ``token_index`` (one row) when it is given."""
    x, cos, sin = float64s("input_tensor", input_tensor), float64s("cos_cache", cos_cache), float64s("sin_cache", sin_cache)
    index = token_index if token_index is not None else token_idx
    if index is not None:
        cos, sin = cos[:, :, index : index + 1, ...], sin[:, :, index : index + 1, ...]
    half = x.shape[-1] // 2
    rotated = np.concatenate((-x[..., half:], x[..., :half]), axis=-1)
    return (x * cos + rotated * sin).astype(np.float32)


@reference("ttnn.transformer.split_query_key_value_and_split_heads",
           "ttnn.experimental.split_query_key_value_and_split_heads", params=(
    Param("input_tensor", "tensor", 0, required=True), Param("kv_input_tensor", "tensor", 1),
    Param("num_heads", "int", required=True), Param("num_kv_heads", "int"), Param("transpose_key", "bool", default=True),
), size=lambda values: sum(elements(shape(values[n])) for n in ("input_tensor", "kv_input_tensor")))
def split_query_key_value_and_split_heads(input_tensor: Any, kv_input_tensor: Any, num_heads: int,
                                          num_kv_heads: int | None, transpose_key: bool,
                                          **_: Any) -> tuple[np.ndarray, ...]:
    """A fused [batch, sequence, hidden] QKV (or Q and a separate KV) split into query, key and value heads
    [batch, heads, sequence, head_size], the key transposed to [batch, heads, head_size, sequence] by default."""
    x = np.asarray(input_tensor)
    if kv_input_tensor is not None:
        x = np.concatenate([x, np.asarray(kv_input_tensor)], axis=-1)
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if x.ndim != 3 or num_heads < 1 or kv_heads < 1 or x.shape[-1] % (num_heads + 2 * kv_heads):
        raise UnsupportedArguments(["input_tensor"], f"a fused QKV of shape {x.shape} for {num_heads}/{kv_heads} heads")
    batch, sequence, hidden = x.shape
    head = hidden // (num_heads + 2 * kv_heads)
    query = x[..., : num_heads * head].reshape(batch, sequence, num_heads, head)
    kv = x[..., num_heads * head : (num_heads + 2 * kv_heads) * head].reshape(batch, sequence, 2 * kv_heads, head)
    key, value = kv[..., :kv_heads, :], kv[..., kv_heads:, :]
    query, key, value = (np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (query, key, value))
    if transpose_key:
        key = np.ascontiguousarray(key.transpose(0, 1, 3, 2))
    return query, key, value
