"""``mqctl topic``: create, inspect and delete topics."""

from __future__ import annotations

from typing import Annotated

import typer

from mqctl.cli.common import ContextOpt, NamesrvOpt, OutputOpt, WatchOpt, online

app = typer.Typer(help="Create, inspect and delete topics.", no_args_is_help=True)

TopicOpt = Annotated[str, typer.Option("--topic", "-t", help="Topic name.")]


@app.command("list")
def list_(
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Only topics of this cluster.")] = None,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
    watch: WatchOpt = None,
) -> None:
    """Every topic the NameServer routes (system topics included)."""
    from mqctl.services.topics import topics

    online(lambda admin: topics(admin, cluster), namesrv=namesrv, context=context, output=output, watch=watch)


@app.command("route")
def route(
    topic: TopicOpt,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
    watch: WatchOpt = None,
) -> None:
    """Which brokers hold the topic's queues, with their permissions and addresses."""
    from mqctl.services.topics import route as topic_route

    online(lambda admin: topic_route(admin, topic), namesrv=namesrv, context=context, output=output, watch=watch)
