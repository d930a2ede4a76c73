"""``mqctl top``: a live terminal view of clusters, topics, groups and the store (Textual, loaded on use)."""

from __future__ import annotations

import sys
from typing import Annotated

import click
import typer

from mqctl.cli.common import cluster_options, cluster_target, request_timeout

app = typer.Typer()  # its help: NOUNS in mqctl.cli.app

SCREENS = ("overview", "topics", "groups", "store")


@app.callback(invoke_without_command=True)
@cluster_options(output=False)
def top(
    interval: Annotated[float, typer.Option("--interval", min=0.2, help="Seconds between refreshes.")] = 2.0,
    screen: Annotated[
        str, typer.Option("--screen", help="Screen to start on.", click_type=click.Choice(SCREENS))
    ] = "overview",
) -> None:
    """Watch a cluster live: brokers and TPS, topics, consumer lag, CommitLog files (keys: 1-4 / s p r Enter ? q)."""
    from mqctl.errors import UsageError

    if not sys.stdout.isatty():  # the screen's escape sequences would go into the pipe or file
        raise UsageError(
            "top draws a live screen and stdout is not a terminal",
            hint="for a script or a log: 'mqctl cluster status --watch 2' (-o json)",
        )
    from mqctl.top.app import run_top
    from mqctl.top.live import LiveSource

    target = cluster_target()
    timeout = request_timeout(3.0, target)
    run_top(
        target.namesrv,
        interval=interval,
        screen=screen,
        make_source=lambda: LiveSource(target.namesrv, timeout=timeout),
    )
