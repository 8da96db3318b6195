"""Helper thread pools that survive ``fork``.

A ``ThreadPoolExecutor`` made before a fork has no threads in the child, yet counts its idle ones as
ready, so work submitted there never runs and its caller waits forever (Linux multiprocessing forks by
default). Each process therefore gets pools of its own, made on first use.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[tuple[int, str], ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def pool(name: str, workers: int) -> ThreadPoolExecutor:
    """This process's pool called ``name`` (its threads are named ``reportdb-<name>``)."""
    key = (os.getpid(), name)
    found = _POOLS.get(key)
    if found is None:
        with _LOCK:
            found = _POOLS.get(key)
            if found is None:
                from concurrent.futures import ThreadPoolExecutor  # on the first pool: opening a report needs none

                found = _POOLS[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"reportdb-{name}")
    return found
