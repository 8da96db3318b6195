"""Commands of the team store on PostgreSQL (push, pull, reports, delete, history) and merge of per-rank reports."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

import reportdb
from reportdb.cli.common import (
    _echo,
    _emit,
    _friendly,
    _num,
    _size,
    cli,
)


class _BytesProgress:
    """A progress bar over bytes on a terminal (stderr); silent elsewhere and with --json."""

    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled, self.label = enabled, label
        self.bar: Any = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total == 0:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr, show_pos=False)
            self.bar.__enter__()
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def _when(value: Any) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M") if hasattr(value, "strftime") else str(value)


@cli.command("push")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.argument("url")
@click.option("--name", help="The report's name in the store (default: the URL's last part, else REPORT's folder name).")
@click.option("--tag", "tags", multiple=True, help="A tag to find the report by (repeat for more).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=2, show_default=True,
              help="Upload connections (more help when the server has cores of its own).")
@click.option("--chunks", metavar="s3://BUCKET/PREFIX",
              help="A new store keeps chunk bytes in this S3-compatible bucket (reportdb[s3]); remembered after.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def push_(report_path: Path, url: str, name: str | None, tags: tuple[str, ...], jobs: int, chunks: str | None,
          as_json: bool) -> None:
    """Push a report to a team store on PostgreSQL: URL is postgresql://[USER@]HOST[:PORT]/DATABASE[/NAME].

    \b
    Example:
        reportdb push reports/1234 postgresql://ci@db.example.com/team --tag nightly
    Atomic (visible whole or not at all) and idempotent: the same content again stores nothing; chunks other
    reports already hold are not sent; an interrupted push resumes when run again. The password comes from the URL,
    PGPASSWORD or ~/.pgpass. With --chunks (first push to a store only: it remembers), chunk bytes go to object
    storage, credentials, region and endpoint from the AWS_* variables and ~/.aws (AWS_ENDPOINT_URL for MinIO, Ceph).
    """
    from reportdb import team

    bar = _BytesProgress(sys.stderr.isatty() and not as_json, "upload")
    try:
        result = team.push(report_path, url, name=name, tags=tags, jobs=jobs, progress=bar, chunks=chunks)
    finally:
        bar.close()
    if as_json:
        _emit(result.to_dict())
        return
    if result.created:
        _echo(f"pushed {result.name!r}: {result.chunks_uploaded} of {result.chunks} chunks sent "
              f"({_size(result.bytes_uploaded)} of {_size(result.stored_bytes)}), the rest already stored")
    else:
        _echo(f"{result.name!r} is already stored with this content: nothing sent")
    _echo(f"content digest {result.digest} (pull --digest {result.digest} proves this content comes back)")
    if result.left_out:
        _echo(f"left out (reportdb runs no report-supplied SQL): {', '.join(result.left_out)}")
    if result.stale_collected:
        _echo(f"removed {result.stale_collected} interrupted pushes older than the stale bound")


@cli.command("pull")
@click.argument("url")
@click.argument("name", required=False)
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), help="New report folder (default: ./NAME).")
@click.option("--digest", metavar="HEX", help="The content digest push printed: refuse any other content.")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def pull_(url: str, name: str | None, out: Path | None, digest: str | None, as_json: bool) -> None:
    """Pull report NAME of a team store back into a self-contained SQLite report folder.

    \b
    Example:
        reportdb pull postgresql://db.example.com/team nightly-1130 -o reports/nightly-1130
    An existing file is never overwritten; a failed pull leaves nothing behind. Every row and chunk is proven
    against the digest the store keeps; --digest (from push's output) also proves it is the content you pushed.
    """
    from reportdb import team

    bar = _BytesProgress(sys.stderr.isatty() and not as_json, "download")
    try:
        result = team.pull(url, name, out, progress=bar, digest=digest)
    finally:
        bar.close()
    if as_json:
        _emit(result.to_dict())
        return
    _echo(f"pulled {result.name!r} -> {result.path} ({result.chunks} chunks, {_size(result.bytes)})")


@cli.command("reports")
@click.argument("url")
@click.option("--name", help="Only reports whose name contains this.")
@click.option("--tag", help="Only reports with this tag.")
@click.option("--since", help="Only reports pushed since (ISO date or time, UTC unless it says).")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many (newest first).")
@click.option("--all", "everything", is_flag=True, help="Also pushes under way or interrupted (state staging).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def reports_(url: str, name: str | None, tag: str | None, since: str | None, limit: int | None, everything: bool,
             as_json: bool) -> None:
    """List the reports of a team store, newest push first. A push killed and never run again shows with --all
    (staging) until the next push or delete removes it after REPORTDB_TEAM_STALE_HOURS (24 by default)."""
    from reportdb import team

    found = team.list_reports(url, name=name, tag=tag, since=since, limit=limit, include_staging=everything)
    if as_json:
        _emit([r.to_dict() for r in found])
        return
    _echo(f"{'name':<32} {'ttnn':<8} {'captured':<16} {'pushed':<16} {'ops':>6} {'tensors':>7} {'bytes':>10}  tags")
    for r in found:
        shown = r.name if r.state == "ready" else f"{r.name} ({r.state})"
        _echo(f"{shown:<32} {r.ttnn_version or '-':<8} {_when(r.captured_at):<16} {_when(r.pushed_at):<16}"
              f" {_num(r.n_operations):>6} {_num(r.n_tensors):>7} {_size(r.logical_bytes or 0):>10}"
              f"  {','.join(r.tags)}")


@cli.command("delete")
@click.argument("url")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def delete_(url: str, name: str | None, as_json: bool) -> None:
    """Delete report NAME from a team store; chunks no other report uses are removed (safe while others push)."""
    from reportdb import team

    result = team.delete(url, name)
    if as_json:
        _emit(result.to_dict())
        return
    _echo(f"deleted {result.name!r}: {result.chunks_collected} chunks ({_size(result.bytes_collected)}) "
          "no other report used were removed")


@cli.command("gc")
@click.argument("url")
@click.option("--grace-hours", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Leave objects younger than this (the time a push may take between an upload and its commit).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def gc_(url: str, grace_hours: float, as_json: bool) -> None:
    """Collect a team store's garbage: interrupted pushes older than REPORTDB_TEAM_STALE_HOURS (24 by default) with
    the chunks only they used, and objects in its bucket that nothing names. Safe while others push."""
    from datetime import timedelta

    from reportdb import team

    result = team.collect(url, grace=timedelta(hours=grace_hours))
    if as_json:
        _emit(result.to_dict())
        return
    _echo(f"removed {result.stale} interrupted pushes, {result.chunks_collected} chunks "
          f"({_size(result.bytes_collected)}) only they used, {result.objects} objects nothing named")


def verify_store(url: str, repair: bool, as_json: bool) -> None:
    """``reportdb verify URL`` of a team store: its damaged reports (``reports.verify_`` hands a URL here)."""
    from reportdb import team

    result = team.verify(url, repair=repair)
    if as_json:
        _emit(result.to_dict())
    else:
        _echo(f"{result.reports} reports, {result.chunks} chunks ({_size(result.bytes_checked)}) re-hashed in "
              f"{result.chunks_in}")
        for d in result.damaged:
            _echo(f"  damaged: {d.name!r}: {d.missing} chunks missing, {d.changed} changed ({d.first})", err=True)
        if result.damaged and repair:
            _echo("the damaged chunks were forgotten: push those reports again to restore them", err=True)
    if not result.ok:
        raise click.exceptions.Exit(1)


@cli.command("history")
@click.argument("url")
@click.option("--op", "op_name", required=True, help="The operation's name, such as ttnn.matmul.")
@click.option("--name", help="Only reports whose name contains this.")
@click.option("--tag", help="Only reports with this tag.")
@click.option("--limit", type=click.IntRange(min=1), help="Only the newest this many runs.")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path),
              help="Judge each stored metric vector by this tolerance policy (TOML): the passed column says its verdict.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def history_(url: str, op_name: str, name: str | None, tag: str | None, limit: int | None, policy_path: Path | None,
             as_json: bool) -> None:
    """An operation's outputs against golden across the store's runs, oldest first."""
    from reportdb import team

    policy = None if policy_path is None else reportdb.Policy.load(policy_path)
    rows = team.history(url, op_name, name=name, tag=tag, limit=limit, policy=policy)
    if as_json:
        _emit([h.to_dict() for h in rows])
        return
    _echo(f"{'report':<32} {'when':<16} {'op':>5} {'tensor':>7} {'rank':>4} {'kind':<6} {'desired':>8} {'pcc':>10}"
          f" {'recomputed':>10} passed")
    for h in rows:
        passed = "-" if h.passed is None else "yes" if h.passed else "NO"
        if policy is not None:
            passed = "-" if h.verdict is None else "yes" if h.verdict == "pass" else "NO " + ",".join(h.failed)
        _echo(f"{h.report:<32} {_when(h.captured_at or h.pushed_at):<16} {_num(h.operation_id):>5}"
              f" {_num(h.tensor_id):>7} {_num(h.rank):>4} {h.kind:<6} {_num(h.desired_pcc):>8}"
              f" {_num(h.actual_pcc):>10} {_num(h.pcc):>10} {passed}")


@cli.command("merge")
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="New report folder.")
@click.option("--rank", "ranks", type=click.IntRange(min=0), multiple=True,
              help="The rank of each report, in order (default: what each declares, else its position).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def merge_(reports: tuple[Path, ...], out: Path, ranks: tuple[int, ...], as_json: bool) -> None:
    """Merge the per-rank reports of one multi-host run into one report with rank columns.

    \b
    Example:
        reportdb merge host0/reports/1234 host1/reports/1234 -o reports/1234-all
    """
    from reportdb import team

    result = team.merge(reports, out, ranks=list(ranks) if ranks else None)
    if as_json:
        _emit(result.to_dict())
        return
    _echo(f"merged {len(result.ranks)} ranks -> {result.output}: {result.tensors} tensors "
          f"({_size(result.logical_bytes)} logical, {_size(result.stored_bytes)} stored)")
    for conflict in result.conflicts:
        _echo(f"conflict: {conflict}")
