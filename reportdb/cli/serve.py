"""``reportdb serve``: the browser page and HTTP API over reports (the web extra)."""

from __future__ import annotations

from pathlib import Path

import click

from reportdb.cli.common import (
    _friendly,
    cli,
)


@cli.command("serve")
@click.argument("reports", metavar="REPORT...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on; another than loopback warns.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port (0: a free one).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default browser.")
@_friendly
def serve_(reports: tuple[Path, ...], host: str, port: int, open_browser: bool) -> None:
    """Look at REPORTs' tensors and golden comparisons in a browser: a local web server (read-only) and its page.

    \b
    Example:
        reportdb serve reports/run-a reports/run-b --open
    Each report is served under its folder's name; the URL is printed; Ctrl-C stops the server.
    """
    try:
        from reportdb import web
    except ImportError as exc:
        raise click.ClickException(f"serve needs Flask and waitress ({exc}): pip install 'reportdb[web]'") from None
    web.serve(list(reports), host=host, port=port, open_browser=open_browser)


# --- team store (issue 15): push, pull, reports, delete, history (reportdb.team); merge --------------------------
