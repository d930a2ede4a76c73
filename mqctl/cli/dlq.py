"""``mqctl dlq``: the dead-letter queues (``%DLQ%<group>``) of a cluster: which groups have one and what
they hold. Re-sending is ``mqctl msg resend``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mqctl.cli.common import (
    DlqIdsOpt,
    DlqTagOpt,
    GroupOpt,
    KeyOpt,
    SinceOpt,
    UntilOpt,
    cluster_options,
    online,
)
from mqctl.units import plural

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app


@app.command("ls")
@cluster_options()
def ls() -> None:
    """Every group's dead-letter queue: messages held and how many 'msg resend --execute' re-sent."""
    from mqctl.services.messages import dlq_topics

    online(dlq_topics)


@app.command("export")
@cluster_options(output=False)
def export(
    group: GroupOpt,
    out: Annotated[
        Path, typer.Option("--out", help="File to write, one JSON object per line ('-': stdout).")
    ],
    ids: DlqIdsOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    tag: DlqTagOpt = None,
    key: KeyOpt = None,
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
    from mqctl.cli.common import cluster_target, request_timeout
    from mqctl.interrupts import whole
    from mqctl.output import stderr_console
    from mqctl.services.messages import DlqFilter, Window, dlq_export
    from store import dlq_topic

    window = Window.of(since, until) if since or until else None
    only = DlqFilter(frozenset(i.upper() for i in ids or []), window=window, tag=tag, key=key)
    target = cluster_target()
    seconds = request_timeout(5.0, target)
    if str(out) == "-":
        count = run_admin(
            target.namesrv, lambda a: dlq_export(a, group, only, whole(sys.stdout.write)), timeout=seconds
        )
    else:
        directory = out.resolve().parent
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=directory)
        except OSError as exc:  # name --out, not the temporary file beside it
            raise type(exc)(exc.errno, exc.strerror, str(out)) from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                count = run_admin(
                    target.namesrv, lambda a: dlq_export(a, group, only, f.write), timeout=seconds
                )
            try:
                os.replace(tmp, out)
            except OSError as exc:  # --out a directory, say
                raise type(exc)(exc.errno, exc.strerror, str(out)) from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    stderr_console().print(f"{plural(count, 'dead letter')} of {dlq_topic(group)} written to {out}")
