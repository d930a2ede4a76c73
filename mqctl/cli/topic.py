"""``mqctl topic``: create, inspect and delete topics."""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from mqctl.cli.common import (
    BrokerAddrOpt,
    ClusterOpt,
    ExecuteOpt,
    ExistingPath,
    TopicOpt,
    YesOpt,
    cluster_options,
    confirm,
    online,
    warn_not_kept,
)
from store import (
    AUTO_CREATE_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    INTERNAL_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
)

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app

ReadQueuesOpt = Annotated[
    int | None,
    typer.Option("--read-queues", "-r", min=1, help="Read queue count (create: 8; update: as it is)."),
]
WriteQueuesOpt = Annotated[
    int | None,
    typer.Option("--write-queues", "-w", min=1, help="Write queue count (create: 8; update: as it is)."),
]
PermOpt = Annotated[
    str | None, typer.Option("--perm", help="Permission: r, w or rw (create: rw; update: as it is).")
]
OrderOpt = Annotated[
    bool | None, typer.Option("--order/--no-order", help="Ordered topic (create: no; update: as it is).")
]

#: 5.x's TopicMessageType values a topic may be given (MIXED is refused by 5.x's brokers by default, and ours).
MESSAGE_TYPES = tuple("NORMAL FIFO DELAY TRANSACTION".split())  # noqa: SIM905  (one string: see attributes.py)
MessageTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--message-type",
        click_type=click.Choice(MESSAGE_TYPES, case_sensitive=False),
        help="5.x message type the topic takes (attribute message.type; 5.x clients' sends of another type "
        "are refused; a 4.9.8 broker ignores it).",
    ),
]
AttributeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--attribute",
        "-a",
        metavar="[+]KEY=VALUE|-KEY",
        help="5.x topic attribute to set (+KEY=VALUE or KEY=VALUE) or remove (-KEY), as 5.x mqadmin updateTopic "
        "-a takes them: message.type, reserve.time; queue.type and cleanup.policy at creation (repeatable).",
    ),
]


def _attribute_changes(message_type: str | None, attributes: list[str] | None) -> str | None:
    """--message-type and --attribute as 5.x's change text (``+message.type=FIFO,-reserve.time``); a
    malformed one is a usage error before anything is asked of a broker."""
    from daemon.broker.attributes import AttributeRefused, parse_changes
    from mqctl.errors import UsageError

    parts = [f"+message.type={message_type.upper()}"] if message_type else []
    for given in attributes or []:
        if "," in given:
            raise UsageError(f"bad --attribute {given!r}: one attribute per --attribute")
        parts.append(given if given.startswith(("+", "-")) else f"+{given}")
    if not parts:
        return None
    text = ",".join(parts)
    try:
        parse_changes(text)
    except AttributeRefused as refused:
        raise UsageError(f"bad --attribute: {refused.remark}") from None
    return text


def _spec(
    topic: str,
    read: int | None,
    write: int | None,
    perm: str | None,
    order: bool | None,
    message_type: str | None = None,
    attributes: list[str] | None = None,
) -> Any:
    from mqctl.services.topics import TopicSpec

    changes = _attribute_changes(message_type, attributes)
    return TopicSpec(topic, read, write, perm, order, attribute_changes=changes)


@app.command("create")
@cluster_options()
def create(
    topic: TopicOpt,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    read_queues: ReadQueuesOpt = None,
    write_queues: WriteQueuesOpt = None,
    perm: PermOpt = None,
    order: OrderOpt = None,
    message_type: MessageTypeOpt = None,
    attribute: AttributeOpt = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed without change when it exists.")
    ] = False,
) -> None:
    """Create a topic on every master of the cluster (or on one broker); an existing topic is a conflict."""
    from mqctl.services.topics import upsert

    spec = _spec(topic, read_queues, write_queues, perm, order, message_type, attribute)
    online(
        lambda admin: _warned(
            upsert(admin, spec, cluster=cluster, broker=broker, mode="create", soft=if_not_exists)
        ),
        changes=True,
    )


async def _warned(write: Awaitable[Any]) -> Any:
    """The write's result, after a warning line for the queues it leaves unread (more write queues than
    read queues: mqadmin updateTopic says nothing, and those messages wait for no consumer)."""
    from mqctl.output import printable

    result = await write
    for where in result.get("unread_queues", []):
        sys.stderr.write(
            f"mqctl: warning: {printable(where, newlines=False)} take messages that no consumer reads "
            "(write queues beyond the read queues: scale out with -r first, scale in with -w first)\n"
        )
    return warn_not_kept(
        result,
        "a broker without 5.x topic attributes (RocketMQ 4.9.x) drops --message-type and -a: 5.x clients "
        "see the topic as NORMAL",
    )


@app.command("update")
@cluster_options()
def update(
    topic: TopicOpt,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    read_queues: ReadQueuesOpt = None,
    write_queues: WriteQueuesOpt = None,
    perm: PermOpt = None,
    order: OrderOpt = None,
    message_type: MessageTypeOpt = None,
    attribute: AttributeOpt = None,
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="Succeed without change when it is missing.")
    ] = False,
    yes: YesOpt = False,
) -> None:
    """Change an existing topic's queue counts, permission, order flag or 5.x attributes; unchanged fields
    stay.

    Fewer read queues leave the messages in the queues beyond them unread: when those hold messages it
    asks first (off a terminal: --yes)."""
    from mqctl.services.topics import upsert

    spec = _spec(topic, read_queues, write_queues, perm, order, message_type, attribute)

    def ask(question: str) -> None:
        confirm(question, yes=yes)

    online(
        lambda admin: _warned(
            upsert(admin, spec, cluster=cluster, broker=broker, mode="update", soft=if_exists, confirm=ask)
        ),
        changes=True,
    )


@app.command("delete")
@cluster_options()
def delete(
    topic: TopicOpt,
    cluster: ClusterOpt = None,
    if_exists: Annotated[bool, typer.Option("--if-exists", help="Succeed when it is already gone.")] = False,
    yes: YesOpt = False,
) -> None:
    """Delete a topic from its brokers and from every NameServer (asks first, once it is found: a topic
    no NameServer routes exits 3 without asking)."""
    from mqctl.services.topics import delete as delete_topic

    def ask(question: str) -> None:
        confirm(question, yes=yes)

    online(
        lambda admin: delete_topic(admin, topic, cluster=cluster, if_exists=if_exists, confirm=ask),
        changes=True,
    )


@app.command("list")
@cluster_options(watch=True)
def list_(
    cluster: ClusterOpt = None,
    system: Annotated[
        bool,
        typer.Option(
            "--system",
            help=f"Also RocketMQ's own topics ({AUTO_CREATE_TOPIC}, {SCHEDULE_TOPIC}, {INTERNAL_TOPIC_PREFIX}*, the "
            f"clusters' and brokers' names) and the groups' {RETRY_GROUP_TOPIC_PREFIX} and {DLQ_GROUP_TOPIC_PREFIX} "
            "topics, each row with its kind.",
        ),
    ] = False,
) -> None:
    """Every normal topic the NameServer routes (--system: every topic, with its kind).

    As ``group list`` hides the brokers' own groups; a table on a terminal counts what it hid."""
    from mqctl.services.topics import topics

    online(lambda admin: topics(admin, cluster, system=system))


@app.command("show")
@cluster_options(watch=True)
def show(
    topic: TopicOpt,
) -> None:
    """The topic's config on each master holding it: queue counts, permission, order flag and its 5.x
    attributes (message_type: NORMAL when it has none, as 5.x reads it)."""
    from mqctl.services.topics import show as topic_show

    online(lambda admin: topic_show(admin, topic))


@app.command("route")
@cluster_options(watch=True)
def route(
    topic: TopicOpt,
) -> None:
    """Which brokers hold the topic's queues, with their permissions and addresses."""
    from mqctl.services.topics import route as topic_route

    online(lambda admin: topic_route(admin, topic))


@app.command("status")
@cluster_options(watch=True)
def status(
    topic: TopicOpt,
) -> None:
    """Per queue: min/max offset, messages held and last store time."""
    from mqctl.services.topics import status as topic_status

    online(lambda admin: topic_status(admin, topic))


@app.command("stats")
@cluster_options(watch=True)
def stats(
    topic: TopicOpt,
) -> None:
    """Totals over the topic's queues: brokers, queues, messages held, last write, put rate (in_tps, last
    minute) and messages put in the last 24 h (in_msgs_24h), as mqadmin statsAll reads them."""
    from mqctl.services.topics import stats as topic_stats

    online(lambda admin: topic_stats(admin, topic))


@app.command("apply")
@cluster_options()
def apply(
    file: Annotated[
        Path,
        typer.Option(
            "--file", "-f", click_type=ExistingPath(dir_okay=False), help="YAML or JSON topic list."
        ),
    ],
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    execute: ExecuteOpt = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Accepted for one release: planning is the default now.")
    ] = False,
) -> None:
    """Plan making topics match a file (create what is missing, update what differs); --execute applies it.

    The file holds a list (or ``{topics: [...]}``) of ``{name, read_queues, write_queues, perm, order}``,
    and 5.x's ``attributes`` (``{message.type: FIFO}``: all the topic should have; left out: as they are).
    The plan says per topic and broker 'would create', 'would update' or 'unchanged'; applying twice
    changes nothing.
    """
    from mqctl.errors import UsageError
    from mqctl.output import stderr_console
    from mqctl.services.topics import apply_file

    if dry_run and execute:
        raise UsageError("--dry-run and --execute contradict each other")
    if dry_run:
        stderr_console().print("note: --dry-run is the default now and will go; --execute applies the plan")
    specs = _load_specs(file)
    if not execute:
        stderr_console().print("plan only: nothing changed; add --execute to apply it")
    online(
        lambda admin: apply_file(admin, specs, cluster=cluster, broker=broker, dry_run=not execute),
        changes=True,
    )


def _load_specs(file: Path) -> list[Any]:
    import yaml

    from mqctl.cli.common import name_problem
    from mqctl.errors import UsageError
    from mqctl.services.metadata import parse_document, parse_problem
    from mqctl.services.topics import TopicSpec

    try:
        raw = parse_document(file.read_text(encoding="utf-8"))
    except (ValueError, yaml.YAMLError) as exc:
        raise UsageError(f"{file}: not YAML or JSON: {parse_problem(exc)}") from None
    items = raw.get("topics") if isinstance(raw, dict) else raw
    if not isinstance(items, list):
        raise UsageError(f"{file}: expected a list of topics")
    specs = []
    for item in items:
        if not isinstance(item, dict) or "name" not in item:
            raise UsageError(f"{file}: every topic needs a name: {item!r}")
        problem = name_problem("topic", str(item["name"]))
        if problem is not None:
            raise UsageError(f"{file}: {problem}")
        unknown = set(item) - {"name", "read_queues", "write_queues", "perm", "order", "attributes"}
        if unknown:
            raise UsageError(f"{file}: unknown keys {sorted(unknown)} in topic {item['name']!r}")
        attributes = item.get("attributes")
        if attributes is not None and not (
            isinstance(attributes, dict)
            and all(isinstance(t, str) for t in (*attributes, *attributes.values()))
        ):
            raise UsageError(
                f"{file}: topic {item['name']!r}: attributes must map names to strings: {attributes!r}"
            )
        specs.append(TopicSpec(**item))
    return specs
