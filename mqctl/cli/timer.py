"""``mqctl timer``: timer messages (any delivery time) waiting in the brokers. Sending one is
``mqctl msg send --deliver-at TIME`` or ``--delay DURATION``."""

from __future__ import annotations

from typing import Annotated

import typer

from mqctl.cli.common import ClusterOpt, check_topic, cluster_options, complete_topic, online

TopicFilterOpt = Annotated[
    str | None,
    typer.Option(
        "--topic", "-t", help="Only this topic.", autocompletion=complete_topic, callback=check_topic
    ),
]

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app


@app.command("ls")
@cluster_options(watch=True)
def ls(topic: TopicFilterOpt = None, cluster: ClusterOpt = None) -> None:
    """Per master broker and topic: how many timer messages wait and when the next one falls due."""
    from mqctl.services.timers import timer_backlog

    online(lambda admin: timer_backlog(admin, topic, cluster))
