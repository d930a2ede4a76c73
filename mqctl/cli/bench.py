"""``mqctl bench``: produce and consume load, like RocketMQ's benchmark Producer and Consumer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from mqctl.admin.client import Admin
    from mqctl.services.bench import BenchResult

from mqctl.cli.common import GroupOpt, cluster_options, online

GRPC_HELP = (
    "Through the first master's gRPC front with the official 5.x Python client (the grpc extra): consuming "
    "with a SimpleConsumer (POP, acked), producing with one Producer shared by the senders."
)

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app


@app.command("produce")
@cluster_options()
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
    count: Annotated[
        int | None,
        typer.Option("--count", min=1, help="Messages to send in all (default 100000 without --duration)."),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration", min=0.1, help="Send for this many seconds (with --count: whichever ends first)."
        ),
    ] = None,
    rate: Annotated[
        float | None, typer.Option("--rate", min=0.1, help="At most this many messages/s in all.")
    ] = None,
    grpc: Annotated[bool, typer.Option("--grpc", help=GRPC_HELP)] = False,
) -> None:
    """Send messages and print TPS, RT average and percentiles (p50/p90/p99/p99.9/max), failures.

    TPS and RTs count the sends the broker accepted; a refused one is a failure, and the first one's
    reason is shown (first_failure, and a warning); with none accepted the run fails with that reason.

    On a terminal a progress line comes every second; Ctrl-C stops the senders and still reports (exit 130).
    """
    from mqctl.services.bench import produce as run_produce

    total = count if count is not None or duration is not None else 100_000
    if grpc:
        from mqctl.errors import UsageError
        from mqctl.services.bench_grpc import produce_grpc

        if topics > 1:
            raise UsageError("--grpc sends to one topic: leave out --topics")
        _report(
            lambda admin: produce_grpc(
                admin,
                topic,
                threads=threads,
                size=size,
                count=total,
                duration=duration,
                rate=rate,
                tick=_ticker(),
            )
        )
        return
    _report(
        lambda admin: run_produce(
            admin,
            topic,
            topics=topics,
            queues=write_queues,
            threads=threads,
            size=size,
            count=total,
            duration=duration,
            rate=rate,
            tick=_ticker(),
        ),
    )


@app.command("consume")
@cluster_options()
def consume(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic to drain.")],
    group: GroupOpt,
    count: Annotated[
        int | None, typer.Option("--count", min=1, help="Stop after this many messages.")
    ] = None,
    idle: Annotated[
        float, typer.Option("--idle", min=0.1, help="Stop after this many seconds without a message.")
    ] = 2.0,
    grpc: Annotated[bool, typer.Option("--grpc", help=GRPC_HELP)] = False,
) -> None:
    """Drain a topic from the group's committed offsets and print msgs/s and pull RT; commits where it stopped.

    With --count it consumes exactly that many. While it runs it is a member of the group (see 'group
    connections') and follows 'offset reset'. A progress line every second on a terminal; Ctrl-C still
    reports (exit 130).
    """
    from mqctl.services.bench import consume as run_consume

    if grpc:
        from mqctl.services.bench_grpc import consume_grpc

        _report(
            lambda admin: consume_grpc(admin, topic, group=group, count=count, idle_s=idle, tick=_ticker())
        )
        return
    _report(
        lambda admin: run_consume(admin, topic, group=group, count=count, idle_s=idle, tick=_ticker()),
    )


def _report(work: Callable[[Admin], Awaitable[BenchResult]]) -> None:
    """Run a benchmark and print its result; after Ctrl-C the result covers the run so far and the
    exit code is still 130, so a script can tell an interrupted run from a finished one."""
    from mqctl.errors import Interrupted

    results: list[BenchResult] = []

    async def run(admin: Admin) -> BenchResult:
        results.append(await work(admin))
        return results[-1]

    online(run, timeout=30.0, changes=True)  # (a workload, not a read: it runs its --count/--duration)
    if results and results[-1].first_failure:  # some sends refused (all refused: the error instead)
        from mqctl.output import printable, stderr_console

        failure = printable(results[-1].first_failure, newlines=False)  # (a broker's remark in it)
        stderr_console().print(f"mqctl: warning: {failure}", style="yellow", markup=False)
    if results and results[-1].interrupted:
        raise Interrupted("interrupted: the result above covers the run until Ctrl-C")


def _ticker() -> Callable[[BenchResult], None] | None:
    """A progress line a second on stderr, only on a terminal (pipes and logs get the summary alone)."""
    from mqctl.output import stderr_console

    console = stderr_console()
    if not console.is_terminal:
        return None

    def tick(r: BenchResult) -> None:
        console.print(
            f"{r.seconds:6.1f}s {r.messages:>10,} msgs {r.tps:>10,.1f}/s  "
            f"RT p50 {r.rt_p50_ms:.2f} ms p99 {r.rt_p99_ms:.2f} ms  failures {r.failures}",
            style="dim",
        )

    return tick
