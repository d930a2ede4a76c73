"""``mqctl group``: subscription groups, their online clients and their progress."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqctl.cli.common import (
    BrokerAddrOpt,
    ClusterOpt,
    CreatedGroupOpt,
    GroupOpt,
    NewGroupOpt,
    YesOpt,
    check_group,
    cluster_options,
    confirm,
    online,
    warn_not_kept,
)

if TYPE_CHECKING:
    from mqctl.admin.client import Admin

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app

RetryQueuesOpt = Annotated[
    int | None, typer.Option("--retry-queues", min=1, help="Retry queue count (default 1).")
]
MaxRetriesOpt = Annotated[
    int | None, typer.Option("--max-retries", min=0, help="Redeliveries before the DLQ (default 16).")
]
BroadcastOpt = Annotated[
    bool | None,
    typer.Option(
        "--broadcast/--no-broadcast",
        help="Allow broadcast consumption (default on, RocketMQ's and the dashboard's; mqadmin updateSubGroup "
        "without -d turns it off).",
    ),
]
FromMinOpt = Annotated[
    bool | None,
    typer.Option(
        "--consume-from-min/--no-consume-from-min",
        help="New groups start at the min offset (default on; mqadmin updateSubGroup without -m: off).",
    ),
]
EnabledOpt = Annotated[bool | None, typer.Option("--enable/--disable", help="Allow the group to consume.")]
BrokerIdOpt = Annotated[
    int | None,
    typer.Option(
        "--broker-id",
        min=0,
        help="Broker id the master sends its consumers to read from (brokerId, mqadmin updateSubGroup -i; "
        "0: the master), when the broker has slaveReadEnable.",
    ),
]
SlowBrokerIdOpt = Annotated[
    int | None,
    typer.Option(
        "--slow-broker-id",
        min=0,
        help="Broker id the master sends its consumers to when they fall behind to messages no longer in "
        "memory (whichBrokerWhenConsumeSlowly, -w; 1: the first slave, when the broker has slaveReadEnable).",
    ),
]
NotifyOpt = Annotated[
    bool | None,
    typer.Option(
        "--notify-ids-changed/--no-notify-ids-changed",
        help="Tell its consumers when a member joins or leaves, to rebalance at once "
        "(notifyConsumerIdsChangedEnable, -a; on).",
    ),
]

OrderlyOpt = Annotated[
    bool | None,
    typer.Option(
        "--orderly/--no-orderly",
        help="5.x FIFO group: its 5.x consumers receive each message group in order (consumeMessageOrderly, "
        "5.x mqadmin updateSubGroup -o; off; a 4.9.8 broker ignores it).",
    ),
]


def _spec(
    group: str,
    retry: int | None,
    retries: int | None,
    broadcast: bool | None,
    from_min: bool | None,
    enabled: bool | None,
    broker_id: int | None,
    slow_broker_id: int | None,
    notify: bool | None,
    orderly: bool | None = None,
) -> Any:
    from mqctl.services.groups import GroupSpec

    return GroupSpec(
        group, retry, retries, broadcast, from_min, enabled, broker_id, slow_broker_id, notify, orderly
    )


async def _warned(write: Awaitable[Any]) -> Any:
    """The write's result, after a warning for a broker that dropped --orderly (a 4.9.x broker)."""
    return warn_not_kept(
        await write,
        "a broker without 5.x's consumeMessageOrderly (RocketMQ 4.9.x) drops --orderly: the group's 5.x "
        "consumers get no FIFO delivery",
    )


@app.command("create")
@cluster_options()
def create(
    group: CreatedGroupOpt,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    retry_queues: RetryQueuesOpt = None,
    max_retries: MaxRetriesOpt = None,
    broadcast: BroadcastOpt = None,
    from_min: FromMinOpt = None,
    enabled: EnabledOpt = None,
    broker_id: BrokerIdOpt = None,
    slow_id: SlowBrokerIdOpt = None,
    notify: NotifyOpt = None,
    orderly: OrderlyOpt = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed without change when it exists.")
    ] = False,
) -> None:
    """Create a subscription group on every master of the cluster (or on one broker)."""
    from mqctl.services.groups import upsert

    spec = _spec(
        group, retry_queues, max_retries, broadcast, from_min, enabled, broker_id, slow_id, notify, orderly
    )
    online(
        lambda admin: _warned(
            upsert(admin, spec, cluster=cluster, broker=broker, mode="create", soft=if_not_exists)
        ),
        changes=True,
    )


@app.command("update")
@cluster_options()
def update(
    group: NewGroupOpt,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    retry_queues: RetryQueuesOpt = None,
    max_retries: MaxRetriesOpt = None,
    broadcast: BroadcastOpt = None,
    from_min: FromMinOpt = None,
    enabled: EnabledOpt = None,
    broker_id: BrokerIdOpt = None,
    slow_id: SlowBrokerIdOpt = None,
    notify: NotifyOpt = None,
    orderly: OrderlyOpt = None,
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="Succeed without change when it is missing.")
    ] = False,
) -> None:
    """Change an existing group's settings; fields not given stay as they are."""
    from mqctl.services.groups import upsert

    spec = _spec(
        group, retry_queues, max_retries, broadcast, from_min, enabled, broker_id, slow_id, notify, orderly
    )
    online(
        lambda admin: _warned(
            upsert(admin, spec, cluster=cluster, broker=broker, mode="update", soft=if_exists)
        ),
        changes=True,
    )


@app.command("delete")
@cluster_options()
def delete(
    group: GroupOpt,
    cluster: ClusterOpt = None,
    remove_offsets: Annotated[
        bool, typer.Option("--remove-offsets", help="Also drop its committed offsets.")
    ] = False,
    if_exists: Annotated[bool, typer.Option("--if-exists", help="Succeed when it is already gone.")] = False,
    yes: YesOpt = False,
) -> None:
    """Delete a subscription group from every master that has it (asks first, once it is found: a group
    no master holds exits 3 without asking). Its consumers online do not stop it, as with mqadmin: the
    question and the result (online_consumers) say how many there are."""
    from mqctl.services.groups import delete as delete_group

    def ask(question: str) -> None:
        confirm(question, yes=yes)

    online(
        lambda admin: delete_group(
            admin, group, cluster=cluster, remove_offsets=remove_offsets, if_exists=if_exists, confirm=ask
        ),
        changes=True,
    )


@app.command("list")
@cluster_options(watch=True)
def list_(
    cluster: ClusterOpt = None,
    system: Annotated[bool, typer.Option("--system", help="Include RocketMQ's built-in groups.")] = False,
    progress: Annotated[
        bool,
        typer.Option(
            "--progress",
            help="Also each group's online clients, consume type and model, consume TPS and lag (mqadmin "
            "consumerProgress without -g; the dashboard's consumer list). Two requests per group and broker, "
            "plus a broker's offset table where a group's offset reads 0 and one request per such queue that "
            "holds messages and the group never committed on. The lag counts each queue as 'group progress' "
            "does; queues of unknown lag (never committed on, or a broker's offsets unread) are left out and "
            "counted in uncounted_queues.",
        ),
    ] = False,
) -> None:
    """Every subscription group on the masters (--progress: how each one is doing)."""
    from mqctl.services.groups import list_groups

    online(lambda admin: list_groups(admin, cluster=cluster, system=system, progress=progress))


@app.command("connections")
@cluster_options(watch=True)
def connections(
    group: GroupOpt,
    cluster: ClusterOpt = None,
) -> None:
    """The group's online clients (id, address, language, version) and subscriptions; with none, a line
    on stderr says so.

    A broker that cannot be read (ACL denied, timed out, down) is named on stderr and in ``errors``."""
    from mqctl.services.groups import GroupConnections, connections as group_connections

    async def work(admin: Admin) -> GroupConnections:
        found = await group_connections(admin, group, cluster=cluster)
        if not found["clients"]:
            import sys

            from mqctl.output import printable

            read = " of the brokers that answered" if found["errors"] else ""
            sys.stderr.write(
                f"no online clients of group {printable(group, newlines=False)}{read} "
                "(a consumer shows while it heartbeats)\n"
            )
        return found

    online(work)


@app.command("producers")
@cluster_options(watch=True)
def producers(
    group: Annotated[str, typer.Option("--group", "-g", help="Producer group name.", callback=check_group)],
    topic: Annotated[
        str | None, typer.Option("--topic", "-t", help="Only the brokers of this topic (as mqadmin -t).")
    ] = None,
) -> None:
    """A producer group's online clients (id, address, language, version) and the brokers they reach
    (mqadmin producerConnection); exit 3 when none is online."""
    from mqctl.services.producers import producers as group_producers

    online(lambda admin: group_producers(admin, group, topic=topic))


@app.command("show")
@cluster_options(watch=True)
def show(
    group: GroupOpt,
    cluster: ClusterOpt = None,
) -> None:
    """The group's config, online clients, total lag and pull rate (consume_tps, last minute).

    A broker that cannot be read (ACL denied, timed out, down) is named on stderr and in ``errors``."""
    from mqctl.services.groups import show as group_show

    online(lambda admin: group_show(admin, group, cluster=cluster))


@app.command("progress")
@cluster_options(watch=True)
def progress(
    group: GroupOpt,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")] = None,
    lag_over: Annotated[
        int | None, typer.Option("--lag-over", min=0, help="Only queues with lag above N.")
    ] = None,
    cluster: ClusterOpt = None,
) -> None:
    """Per queue: its max offset, the group's consumer (committed) offset, lag, last consumed store time
    and the owning client's id (the names offset show uses).

    A queue the group never committed on shows no consumer offset ('-'; null in JSON and YAML), where the
    broker's ConsumeStats (and mqadmin consumerProgress) say 0; its lag counts from 0 only where the broker
    starts a consumer there (a young queue), else it is '-' (consumeFromWhere decides) and --lag-over
    leaves it out. A group the brokers hold that never committed (created, never consumed) has no rows.

    A broker that cannot be read (ACL denied, timed out, down) is named on stderr; where only its offset
    table or start offsets could not be read, its queues' offsets and lags it would tell are '-'."""
    from mqctl.services.groups import progress as group_progress

    online(lambda admin: group_progress(admin, group, topic=topic, lag_over=lag_over, cluster=cluster))
