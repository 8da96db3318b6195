"""KV-cache updates: fill_cache, update_cache and their paged forms, each giving the cache tensor after the update.

These operations write into their cache argument in place, so a report may hold the cache as it was before the
call or as it was after (one tensor id for both). Every update here overwrites the same rows with the same values
whichever it gets, so the reference is the cache after the update in both cases. Values keep the cache's dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import Param, UnsupportedArguments, reference


def _integers(name: str, values: Any) -> np.ndarray:
    """An index tensor (stored as integers, or as floats holding integers) as int64."""
    array = np.asarray(values)
    if array.dtype.kind == "f" and not np.all(np.mod(array, 1) == 0):
        raise UnsupportedArguments([name], "indices that are not integers")
    if array.dtype.kind not in "iuf":
        raise UnsupportedArguments([name], f"indices of dtype {array.dtype.name}")
    return array.astype(np.int64)


def _rank4(**tensors: Any) -> list[np.ndarray]:
    """The named tensors as arrays, each checked to be of rank 4."""
    arrays = []
    for name, value in tensors.items():
        array = np.asarray(value)
        if array.ndim != 4:
            raise UnsupportedArguments([name], f"a tensor of shape {array.shape} (rank 4 expected)")
        arrays.append(array)
    return arrays


def _written(cache: np.ndarray, rows: Any, source: np.ndarray) -> np.ndarray:
    """A copy of ``cache`` with ``source`` written where ``rows`` index it, in the cache's dtype."""
    out = cache.copy()
    out[rows] = source.astype(out.dtype)
    return out


@reference("ttnn.fill_cache", params=(
    Param("cache_tensor", "tensor", 0, required=True), Param("input_tensor", "tensor", 1, required=True),
    Param("batch_idx", "int", 2, required=True), Param("update_idx", "int", default=0),
), keeps_values=True)
def fill_cache(cache_tensor: Any, input_tensor: Any, batch_idx: int, update_idx: int, **_: Any) -> np.ndarray:
    """ttnn.fill_cache as its golden (tt-metal ``ttnn/ttnn/operations/data_movement.py``): the input's sequence
    written into user ``batch_idx`` of the cache [B, heads, S, d] from row ``update_idx``."""
    cache, x = _rank4(cache_tensor=cache_tensor, input_tensor=input_tensor)
    seq = x.shape[2]
    if not 0 <= batch_idx < cache.shape[0] or update_idx < 0 or update_idx + seq > cache.shape[2] or \
            x.shape[0] != 1 or x.shape[1] != cache.shape[1] or x.shape[3] != cache.shape[3]:
        raise UnsupportedArguments(["input_tensor"], f"an input {x.shape} for user {batch_idx}, row {update_idx} of "
                                                     f"a cache {cache.shape}")
    return _written(cache, np.s_[batch_idx : batch_idx + 1, :, update_idx : update_idx + seq, :], x)


@reference("ttnn.update_cache", params=(
    Param("cache", "tensor", 0, required=True), Param("input", "tensor", 1, required=True),
    Param("update_idx", "int", 2, required=True), Param("batch_offset", "int", default=0),
), keeps_values=True)
def update_cache(cache: Any, input: Any, update_idx: int, batch_offset: int, **_: Any) -> np.ndarray:
    """ttnn.update_cache as its golden (tt-metal ``ttnn/ttnn/operations/data_movement.py``): for every user u of the
    cache [B, heads, S, d], row ``update_idx`` set to ``input[0, :, batch_offset + u, :]`` (input [1, heads, B', d])."""
    c, x = _rank4(cache=cache, input=input)
    users = c.shape[0]
    if not 0 <= update_idx < c.shape[2] or batch_offset < 0 or batch_offset + users > x.shape[2] or \
            x.shape[1] != c.shape[1] or x.shape[3] != c.shape[3]:
        raise UnsupportedArguments(["input"], f"an input {x.shape} at row {update_idx}, offset {batch_offset} of a "
                                              f"cache {c.shape}")
    rows = x[0, :, batch_offset : batch_offset + users, :].transpose(1, 0, 2)  # [users, heads, d]
    return _written(c, np.s_[:, :, update_idx, :], rows)


def _positions(update_idxs: tuple[int, ...] | None, update_idxs_tensor: Any) -> np.ndarray:
    """Each user's cache position, from the tensor when given, else from the list."""
    if update_idxs_tensor is not None:
        return _integers("update_idxs_tensor", update_idxs_tensor).reshape(-1)
    return np.asarray(update_idxs or (), dtype=np.int64)


def _token_update(cache_name: str, cache_tensor: Any, input_tensor: Any, positions: np.ndarray, page_table: Any,
                  batch_offset: int) -> np.ndarray:
    """One decode token per user (input [1, B, heads (padded), d]) written at its position of the cache [B, heads,
    S, d], or through the page table [B, pages per user] into the paged cache [pages, heads, block, d]."""
    cache, x = _rank4(**{cache_name: cache_tensor, "input_tensor": input_tensor})
    users, heads = x.shape[1], cache.shape[1]
    if batch_offset:
        raise UnsupportedArguments(["batch_offset"], "a batch offset is not modelled")
    if positions.size != users or (positions < 0).any() or x.shape[0] != 1 or x.shape[2] < heads or \
            x.shape[3] != cache.shape[3]:
        raise UnsupportedArguments(["update_idxs"], f"positions {positions.tolist()[:8]} for an input {x.shape} and a "
                                                    f"cache {cache.shape}")
    tokens = x[0, :, :heads, :]  # [users, heads, d]
    if page_table is None:
        if users > cache.shape[0] or positions.max(initial=0) >= cache.shape[2]:
            raise UnsupportedArguments(["update_idxs"], f"positions beyond a cache of shape {cache.shape}")
        return _written(cache, (np.arange(users), slice(None), positions), tokens)
    table = _integers("page_table", page_table).reshape(np.asarray(page_table).shape[0], -1)
    block = cache.shape[2]
    if table.shape[0] < users or (positions // block >= table.shape[1]).any():
        raise UnsupportedArguments(["page_table"], f"a page table {table.shape} for positions {positions.tolist()[:8]}")
    physical = table[np.arange(users), positions // block]
    if (physical < 0).any() or (physical >= cache.shape[0]).any():
        raise UnsupportedArguments(["page_table"], f"a page outside the cache's {cache.shape[0]}")
    return _written(cache, (physical, slice(None), positions % block), tokens)


_UPDATE_KEYWORDS = (
    Param("update_idxs", "ints"), Param("update_idxs_tensor", "tensor"), Param("share_cache", "none"),
    Param("page_table", "tensor"), Param("batch_offset", "int", default=0), Param("mesh_coords", "ignored"),
)


@reference("ttnn.experimental.paged_update_cache", params=(
    Param("cache_tensor", "tensor", 0, required=True), Param("input_tensor", "tensor", 1, required=True),
    Param("block_size", "none"), Param("num_kv_heads", "none"), Param("cache_position_modulo", "none"),
) + _UPDATE_KEYWORDS, keeps_values=True)
def paged_update_cache(cache_tensor: Any, input_tensor: Any, update_idxs: tuple[int, ...] | None, update_idxs_tensor: Any,
                       page_table: Any, batch_offset: int, **_: Any) -> np.ndarray:
    """ttnn.experimental.paged_update_cache as its documentation (tt-metal ``paged_cache_nanobind.cpp``)
    defines it: user b's token (input [1, B, heads (padded), d]) written at position ``update_idxs[b]`` of its cache
    [B, heads, S, d], or, with a page table [B, pages per user], at row ``pos % block`` of page
    ``page_table[b, pos // block]`` of the paged cache [pages, heads, block, d]. Negative positions, a batch offset,
    a shared cache and the view overrides are refused."""
    positions = _positions(update_idxs, update_idxs_tensor)
    return _token_update("cache_tensor", cache_tensor, input_tensor, positions, page_table, batch_offset)


@reference("ttnn.experimental.paged_fused_update_cache", params=(
    Param("cache_tensor1", "tensor", 0, required=True), Param("input_tensor1", "tensor", 1, required=True),
    Param("cache_tensor2", "tensor", 2, required=True), Param("input_tensor2", "tensor", 3, required=True),
) + _UPDATE_KEYWORDS, keeps_values=True)
def paged_fused_update_cache(cache_tensor1: Any, input_tensor1: Any, cache_tensor2: Any, input_tensor2: Any,
                             update_idxs: tuple[int, ...] | None, update_idxs_tensor: Any, page_table: Any,
                             batch_offset: int, **_: Any) -> tuple[np.ndarray, np.ndarray]:
    """ttnn.experimental.paged_fused_update_cache as its documentation (tt-metal
    ``paged_cache_nanobind.cpp``) defines it: paged_update_cache of both caches (K and V) at the same
    positions, giving both caches after the update."""
    positions = _positions(update_idxs, update_idxs_tensor)
    return (_token_update("cache_tensor1", cache_tensor1, input_tensor1, positions, page_table, batch_offset),
            _token_update("cache_tensor2", cache_tensor2, input_tensor2, positions, page_table, batch_offset))


@reference("ttnn.experimental.paged_fill_cache", params=(
    Param("cache_tensor", "tensor", 0, required=True), Param("input_tensor", "tensor", 1, required=True),
    Param("page_table", "tensor", 2, required=True), Param("batch_idx_tensor", "tensor"),
    Param("batch_idx", "int", default=0), Param("mesh_coords", "ignored"), Param("block_size", "none"),
    Param("cache_position_modulo", "none"), Param("valid_seq_len_tensor", "tensor"),
), keeps_values=True)
def paged_fill_cache(cache_tensor: Any, input_tensor: Any, page_table: Any, batch_idx_tensor: Any, batch_idx: int,
                     valid_seq_len_tensor: Any, **_: Any) -> np.ndarray:
    """ttnn.experimental.paged_fill_cache as its documentation (tt-metal ``paged_cache_nanobind.cpp``) defines
    it: each input row i ([rows, heads, S, d]) is user ``batch_idx_tensor[i]`` (else ``batch_idx``), whose token t
    goes to row ``t % block`` of page ``page_table[user, t // block]`` of the cache [pages, heads, block, d]. A valid
    length tensor and the view overrides are refused."""
    if valid_seq_len_tensor is not None:
        raise UnsupportedArguments(["valid_seq_len_tensor"], "not modelled by this reference")
    cache, x = _rank4(cache_tensor=cache_tensor, input_tensor=input_tensor)
    table = _integers("page_table", page_table)
    table = table.reshape(table.shape[0], -1) if table.ndim >= 2 else table.reshape(1, -1)
    users = _integers("batch_idx_tensor", batch_idx_tensor).reshape(-1) if batch_idx_tensor is not None \
        else np.array([batch_idx] * x.shape[0])
    block, seq = cache.shape[2], x.shape[2]
    if users.size != x.shape[0] or (users < 0).any() or (users >= table.shape[0]).any() or \
            x.shape[1] != cache.shape[1] or x.shape[3] != cache.shape[3] or -(-seq // block) > table.shape[1]:
        raise UnsupportedArguments(["input_tensor"], f"an input {x.shape} for users {users.tolist()[:8]}, a page "
                                                     f"table {table.shape} and a cache {cache.shape}")
    tokens = np.arange(seq)
    physical = table[users[:, None], tokens[None, :] // block]  # [rows, S]
    if (physical < 0).any() or (physical >= cache.shape[0]).any():
        raise UnsupportedArguments(["page_table"], f"a page outside the cache's {cache.shape[0]}")
    rows = x.transpose(0, 2, 1, 3)  # [rows, S, heads, d]
    return _written(cache, (physical, slice(None), np.broadcast_to(tokens % block, physical.shape)), rows)
