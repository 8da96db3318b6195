"""The ``op`` command: one operation's context (arguments, stack trace and source, duration, device, its tensors with
their producers and consumers, their golden comparisons and verdicts)."""

from __future__ import annotations

from pathlib import Path

import click

import reportdb
from reportdb.cli.common import _echo, _emit, _friendly, _num, cli


@cli.command(name="op")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.argument("operation_id", metavar="OP_ID", type=int)
@click.option("--rank", type=int, default=0, show_default=True)
@click.option(
    "--policy", "policy_path", type=click.Path(path_type=Path),
    help="A tolerance policy (TOML) judging the tensors' golden comparisons; default: the dtype-aware defaults.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def op_(report_path: Path, operation_id: int, rank: int, policy_path: Path | None, as_json: bool) -> None:
    """Show one operation: name, arguments, stack trace with the source lines the report holds, duration, device,
    and each input and output tensor with the operation that produced it, those that consume it, and its golden
    comparisons with their verdicts.

    Reads the report only. Exit status 0; 1 on an error (among them an operation the report does not have).

    \b
    Examples:
        reportdb op migrated/1234 21
        reportdb op migrated/1234 21 --json
    """
    policy = reportdb.Policy.load(policy_path) if policy_path is not None else None
    ctx = reportdb.operation_context(report_path, operation_id, rank=rank, policy=policy)
    if as_json:
        _emit(ctx.to_dict())
        return
    _echo(f"operation {ctx.operation_id} {ctx.name}" + (f" (rank {ctx.rank})" if ctx.rank else ""))
    _echo(f"  duration: {_num(ctx.duration)}" + (" s" if ctx.duration is not None else ""))
    _echo("  device: " + (", ".join(map(str, ctx.device_ids)) or "-"))
    if ctx.arguments:
        _echo("  arguments:")
        for name, value in ctx.arguments:
            _echo(f"    {name} = {value if value is not None else '-'}")
    if ctx.stack_trace:
        _echo("  stack trace:")
        for line in ctx.stack_trace.splitlines():
            _echo(f"    {line}")
    for src in ctx.source:
        _echo(f"  {src.path}:{src.line}")
        for number, text in enumerate(src.lines, src.first_line):
            _echo(f"  {'>' if number == src.line else ' '}{number:>6} | {text}")
    for title, tensors in (("inputs", ctx.inputs), ("outputs", ctx.outputs)):
        _echo(f"  {title}:" + ("" if tensors else " none"))
        for t in tensors:
            made = "-" if t.producer is None else f"op {t.producer.operation_id} {t.producer.name}"
            users = ", ".join(f"op {c.operation_id} {c.name}" for c in t.consumers) or "-"
            users += f" and {t.consumer_count - len(t.consumers)} more" if t.consumer_count > len(t.consumers) else ""
            _echo(f"    [{t.index}] tensor {t.tensor_id}  {t.shape or '-'}  {t.dtype or '-'}  {t.layout or '-'}"
                  f"  {'stored' if t.stored else 'not stored'}")
            _echo(f"        produced by: {made}; consumed by: {users}")
            for c in t.comparisons:
                result = c.status if c.verdict is None else (c.verdict + (f" ({','.join(c.failed)})" if c.failed else ""))
                _echo(f"        {c.kind} golden {_num(c.golden_tensor_id)}: recorded pcc {_num(c.recorded_pcc)}, pcc "
                      f"{_num(c.pcc)}, sqnr {_num(c.sqnr_db)} dB, max abs err {_num(c.max_abs_error)}: {result}"
                      + (f" [{c.role}]" if c.role else ""))
