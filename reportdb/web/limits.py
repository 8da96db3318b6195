"""The bounds of the web API: sizes a request may ask for (checked before any byte is read, 413 beyond them), the
memory all requests together may hold, and the page's Content-Security-Policy."""

from __future__ import annotations

#: Elements a values window may hold: as .npy, and as JSON (text is ~10x larger and slower to parse).
MAX_NPY_ELEMENTS = 1 << 20
MAX_JSON_ELEMENTS = 1 << 16
#: Cells per side of a heatmap grid, and cells of a grid sent as JSON (text: ~20 bytes a cell).
MAX_SIDE = 2048
MAX_JSON_CELLS = 1 << 20
#: Source elements one heatmap or histogram request may pool (streamed band by band: this bounds time, not memory).
MAX_POOL_ELEMENTS = 1 << 28
#: Elements per side of a full comparison (streamed window by window: this bounds time, not memory).
MAX_COMPARE_ELEMENTS = 1 << 28
#: Stored tensor bytes per report that run against run compares in one request (every matched output is read, window
#: by window: this bounds time, not memory).
MAX_RUN_BYTES = 4 << 30
#: Operations per page of the operation list.
MAX_PAGE = 1000
#: Bins of an error histogram.
MAX_BINS = 1024

#: Bytes the requests being answered at one time may hold together (``serve --memory-budget``), and how long a
#: request waits for its share before it is answered 503.
MEMORY_BUDGET = 1 << 30
BUDGET_WAIT_SECONDS = 10.0

#: Reports a resolver (the host app's) may have open at once; the least recently used idle one is closed beyond it.
MAX_RESOLVED = 16

#: The page may load only its own files and talk only to its own server.
PAGE_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'self'"
)
