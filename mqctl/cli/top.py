"""``mqctl top``: a live terminal view of clusters, topics, groups and the store (Textual, loaded on use)."""

from __future__ import annotations

from typing import Annotated

import click
import typer

from mqctl.cli.common import ContextOpt, NamesrvOpt

app = typer.Typer(help="Live view of clusters, topics, groups and the store (q quits, ? help).")

SCREENS = ("overview", "topics", "groups", "store")


@app.callback(invoke_without_command=True)
def top(
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    interval: Annotated[float, typer.Option("--interval", min=0.2, help="Seconds between refreshes.")] = 2.0,
    screen: Annotated[
        str, typer.Option("--screen", help="Screen to start on.", click_type=click.Choice(SCREENS))
    ] = "overview",
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each request.")] = 3.0,
) -> None:
    """Watch a cluster live: brokers and TPS, topics, consumer lag, CommitLog files (keys: 1-4 / s p r Enter ? q)."""
    from mqctl.config import resolve_target
    from mqctl.top.app import run_top
    from mqctl.top.live import LiveSource

    target = resolve_target(namesrv_flag=namesrv, context_flag=context)
    run_top(
        target.namesrv,
        interval=interval,
        screen=screen,
        make_source=lambda: LiveSource(target.namesrv, timeout=timeout),
    )
