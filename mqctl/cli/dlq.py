"""``mqctl dlq``: the dead-letter queues (``%DLQ%<group>``) of a cluster: which groups have one and what
they hold. Re-sending is ``mqctl msg resend``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mqctl.cli.common import ContextOpt, GroupOpt, KeyOpt, NamesrvOpt, OutputOpt, SinceOpt, UntilOpt, online

app = typer.Typer(help="Dead-letter queues: list them, export their messages.", no_args_is_help=True)


@app.command("ls")
def ls(namesrv: NamesrvOpt = None, context: ContextOpt = None, output: OutputOpt = "table") -> None:
    """Every group's dead-letter queue: messages held and how many 'msg resend --execute' re-sent."""
    from mqctl.services.messages import dlq_topics

    online(dlq_topics, namesrv=namesrv, context=context, output=output)


@app.command("export")
def export(
    group: GroupOpt,
    out: Annotated[
        Path, typer.Option("--out", help="File to write, one JSON object per line ('-': stdout).")
    ],
    ids: Annotated[
        list[str] | None, typer.Option("--id", help="Only this message (offset id or UNIQ_KEY; repeatable).")
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Only dead letters with this tag.")] = None,
    key: KeyOpt = None,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
) -> None:
    """Write the dead letters of a group as JSON lines: every stored field, properties, the body (UTF-8
    text, or base64 per body_encoding) and whether it was re-sent. The DLQ is left as is.

    Filters as 'msg resend': --id, --since/--until (store time in the DLQ), --tag, --key. The file is
    written whole or not at all (a temporary file renamed into place).
    """
    import os
    import sys
    import tempfile

    from mqctl.admin.client import run_admin
    from mqctl.cli.common import request_timeout
    from mqctl.config import resolve_target
    from mqctl.output import stderr_console
    from mqctl.services.messages import DlqFilter, Window, dlq_export

    window = Window.of(since, until) if since or until else None
    only = DlqFilter(frozenset(i.upper() for i in ids or []), window=window, tag=tag, key=key)
    target = resolve_target(namesrv_flag=namesrv, context_flag=context)
    seconds = request_timeout(5.0)
    if str(out) == "-":
        count = run_admin(
            target.namesrv, lambda a: dlq_export(a, group, only, sys.stdout.write), timeout=seconds
        )
    else:
        directory = out.resolve().parent
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                count = run_admin(
                    target.namesrv, lambda a: dlq_export(a, group, only, f.write), timeout=seconds
                )
            os.replace(tmp, out)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    stderr_console().print(f"{count} dead letter(s) of %DLQ%{group} written to {out}")
