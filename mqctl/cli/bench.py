"""``mqctl bench``: produce and consume load, like RocketMQ's benchmark Producer and Consumer."""

from __future__ import annotations

from typing import Annotated

import typer

from mqctl.cli.common import ContextOpt, GroupOpt, NamesrvOpt, OutputOpt, online

app = typer.Typer(
    help="Measure a cluster: send or drain messages and report TPS and latency.", no_args_is_help=True
)


@app.command("produce")
def produce(
    topic: Annotated[
        str, typer.Option("--topic", "-t", help="Topic, or the prefix of PREFIX-0..N-1 with --topics N.")
    ],
    topics: Annotated[
        int, typer.Option("--topics", min=1, help="Spread sends round-robin over N topics (created first).")
    ] = 1,
    write_queues: Annotated[
        int, typer.Option("--write-queues", "-w", min=1, help="Queues of each topic --topics creates.")
    ] = 4,
    threads: Annotated[int, typer.Option("--threads", min=1, help="Concurrent synchronous senders.")] = 16,
    size: Annotated[int, typer.Option("--size", min=1, help="Body size in bytes.")] = 1024,
    count: Annotated[int, typer.Option("--count", min=1, help="Messages to send in all.")] = 100_000,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Send COUNT messages and print TPS, average and max RT, failures."""
    from mqctl.services.bench import produce as run_produce

    online(
        lambda admin: run_produce(
            admin, topic, topics=topics, queues=write_queues, threads=threads, size=size, count=count
        ),
        namesrv=namesrv,
        context=context,
        output=output,
        timeout=30.0,
    )


@app.command("consume")
def consume(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic to drain.")],
    group: GroupOpt,
    count: Annotated[
        int | None, typer.Option("--count", min=1, help="Stop after this many messages.")
    ] = None,
    idle: Annotated[
        float, typer.Option("--idle", min=0.1, help="Stop after this many seconds without a message.")
    ] = 2.0,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
) -> None:
    """Drain a topic from the group's committed offsets and print msgs/s and pull RT; commits where it stopped.

    While it runs it is a member of the group (see 'group connections') and follows 'offset reset'.
    """
    from mqctl.services.bench import consume as run_consume

    online(
        lambda admin: run_consume(admin, topic, group=group, count=count, idle_s=idle),
        namesrv=namesrv,
        context=context,
        output=output,
        timeout=30.0,
    )
