"""``reportdb serve``: the browser page and HTTP API over reports (the web extra)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from reportdb.cli.common import (
    _friendly,
    cli,
)

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _size(text: str) -> int:
    """A byte count such as ``512M``, ``2G`` or ``1048576`` (k, M, G are powers of 1024; an optional iB or B)."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([kmg]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if match is None or int(match.group(1)) == 0:
        raise click.BadParameter(f"{text!r} is not a size: give a number of bytes such as 512M or 2G")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _policies(given: tuple[str, ...]) -> dict[str, Path]:
    """``--policy [NAME=]FILE`` values by name (the file's stem where no NAME is given); a name given twice is an
    error, as the page could offer only one of them."""
    named: dict[str, Path] = {}
    for text in given:
        name, sep, file = text.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            name, file = Path(text).stem, text
        if name in named:
            raise click.BadParameter(f"two policies are named {name!r}: give one as NAME=FILE", param_hint="--policy")
        named[name] = Path(file)
    return named


@cli.command("serve")
@click.argument("reports", metavar="REPORT...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on; another than loopback warns.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port (0: a free one).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default browser.")
@click.option("--allow-host", "allow_hosts", metavar="NAME", multiple=True,
              help="Another host name the server answers to (repeatable; '*' for any, behind a proxy that checks). "
                   "It answers to localhost, 127.0.0.1, [::1] and the address it listens on.")
@click.option("--cors", "cors_origins", metavar="ORIGIN", multiple=True,
              help="An origin (https://host:port) whose pages may read the API's answers (repeatable; '*' for any).")
@click.option("--memory-budget", default="1G", show_default=True, metavar="SIZE",
              help="Bytes the requests being answered may hold together; beyond it a request waits, then gets 503.")
@click.option("--policy", "policies", metavar="[NAME=]FILE", multiple=True,
              help="A tolerance policy (TOML [[rules]]) the page offers besides the defaults, named NAME or after the "
                   "file (repeatable); every verdict on the page follows the one chosen there.")
@_friendly
def serve_(reports: tuple[Path, ...], host: str, port: int, open_browser: bool, allow_hosts: tuple[str, ...],
           cors_origins: tuple[str, ...], memory_budget: str, policies: tuple[str, ...]) -> None:
    """Look at REPORTs' tensors and golden comparisons in a browser: a local web server (read-only) and its page.

    \b
    Example:
        reportdb serve reports/run-a reports/run-b --open
        reportdb serve reports/run-a --policy strict=tolerances/strict.toml
    Each report is served under its folder's name; the URL is printed; Ctrl-C stops the server. The page's Policy
    selector offers the defaults and each --policy; every verdict on the page follows the one chosen.
    """
    budget = _size(memory_budget)
    named = _policies(policies)
    try:
        from reportdb import web
    except ImportError as exc:
        raise click.ClickException(f"serve needs Flask and waitress ({exc}): pip install 'reportdb[web]'") from None
    web.serve(list(reports), host=host, port=port, open_browser=open_browser, allow_hosts=allow_hosts,
              cors_origins=cors_origins, memory_budget=budget, policies=named)
