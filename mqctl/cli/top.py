"""``mqctl top``: a live terminal view of clusters, topics, groups and the store (Textual, loaded on use)."""

from __future__ import annotations

import sys
from typing import Annotated

import click
import typer

from mqctl.cli.common import cluster_options, cluster_target, flags, output_given, request_timeout

app = typer.Typer()  # its help: NOUNS in mqctl.cli.app

SCREENS = ("overview", "topics", "groups", "store")


@app.callback(invoke_without_command=True)
@cluster_options()
def top(
    interval: Annotated[
        float,
        typer.Option(
            "--interval", min=0.2, help="Seconds between refreshes (--once: between the Topics' two reads)."
        ),
    ] = 2.0,
    screen: Annotated[
        str,
        typer.Option(
            "--screen", help="Screen to start on (--once: to print).", click_type=click.Choice(SCREENS)
        ),
    ] = "overview",
    system: Annotated[
        bool,
        typer.Option(
            "--system",
            help="Topics: also RocketMQ's own and the groups' retry and DLQ topics (as topic list --system).",
        ),
    ] = False,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Print one frame of --screen and exit (plain text off a terminal; -o json for scripts).",
        ),
    ] = False,
) -> None:
    """Watch a cluster live: brokers and TPS, topics, consumer lag, CommitLog files (keys: 1-4 / s p r Enter ? q)."""
    from mqctl.errors import UsageError
    from mqctl.top.live import LiveSource

    target = cluster_target()
    timeout = request_timeout(3.0, target)
    if once:
        import asyncio
        import time

        from mqctl.output import render
        from mqctl.top.once import csv_rows, document, table, take

        snap = asyncio.run(
            take(lambda: LiveSource(target.namesrv, timeout=timeout, system=system), screen, interval)
        )
        output = flags().output
        frame = {"table": table, "csv": csv_rows}.get(output, document)
        render(frame(snap, screen, time.time()), output)
        return
    if flags().output != "table" and output_given():  # ($MQCTL_OUTPUT alone: a default for scripts)
        raise UsageError("-o applies to a printed frame", hint="add --once")
    if not sys.stdout.isatty():  # the screen's escape sequences would go into the pipe or file
        raise UsageError(
            "top draws a live screen and stdout is not a terminal",
            hint="for a script, a log or a ticket: 'mqctl top --once' (-o json); to repeat: 'mqctl cluster status --watch 2'",
        )
    from mqctl.top.app import run_top

    run_top(
        target.namesrv,
        interval=interval,
        screen=screen,
        make_source=lambda: LiveSource(target.namesrv, timeout=timeout, system=system),
    )
