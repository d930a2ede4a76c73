"""``mqctl msg``: send, find, show, tail and re-send messages on a running cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer

from mqctl.cli import trace as _trace
from mqctl.cli.common import (
    DlqIdsOpt,
    DlqTagOpt,
    ExecuteOpt,
    GroupOpt,
    KeyOpt,
    NoBodyOpt,
    QueueBrokerOpt,
    QueueOpt,
    SinceOpt,
    TopicOpt,
    UntilOpt,
    YesOpt,
    check_group,
    check_topic,
    cluster_options,
    cluster_target,
    confirm,
    flags,
    key_window,
    one_key,
    online,
    progress,
    request_timeout,
)
from mqctl.completion import complete_topic
from mqctl.errors import Interrupted, UsageError
from mqctl.units import duration_text, plural

if TYPE_CHECKING:
    from mqctl.admin.client import Admin
    from mqctl.services.messages import MessageRow

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app

RawOpt = Annotated[
    bool,
    typer.Option(
        "--raw", help="Print user data as it is: control characters (ESC, TAB, ...) are not escaped."
    ),
]
OptionalTopicOpt = Annotated[
    str | None,
    typer.Option("--topic", "-t", help="Topic name.", autocompletion=complete_topic, callback=check_topic),
]


def _deliver_ms(deliver_at: str | None, delay: str | None, delay_level: int) -> int | None:
    """The delivery time --deliver-at or --delay asks for (epoch ms), None for neither."""
    import time

    from mqctl.errors import UsageError
    from mqctl.timespec import parse_duration, parse_time

    if sum(bool(x) for x in (deliver_at, delay, delay_level)) > 1:
        raise UsageError("give one of --deliver-at, --delay and --delay-level")
    now = int(time.time() * 1000)
    if deliver_at:
        return parse_time(deliver_at, now_ms=now, flag="--deliver-at")
    if delay:
        if delay.strip().isdecimal():  # a level (RocketMQ's DELAY) or seconds? neither is taken for the other
            raise UsageError(
                f"--delay {delay.strip()} has no unit: give a duration such as 90s, 15m or 2h30m (up to the "
                "broker's timerMaxDelaySec, 3 days by default), or a delay level 1-18 with --delay-level"
            )
        return now + parse_duration(delay, flag="--delay")
    return None


def _limit_text(sec: int) -> str:
    return plural(sec // 86400, "day") if sec and sec % 86400 == 0 else duration_text(sec * 1000)


async def _within_max_delay(
    admin: Admin,
    topic: str,
    due_ms: int,
    given: tuple[str, str],
    *,
    broker: str | None,
    queue: int | None,
    create: bool,
) -> None:
    """Refuse (exit 2, naming ``given``'s flag) a delivery time further ahead than a broker the send may go
    to holds a timer message (its timerMaxDelaySec), rather than have it come back a wire error (exit 8).
    Within the default nothing is read: a broker set lower still refuses on the wire."""
    import time

    from daemon.broker.config import TIMER_MAX_DELAY_SEC
    from mqctl.services.messages import timer_limits

    if due_ms - int(time.time() * 1000) <= TIMER_MAX_DELAY_SEC * 1000:
        return
    limits = await timer_limits(admin, topic, broker=broker, queue=queue, create=create)
    if not limits:
        return  # no broker said: it decides
    name, sec = min(limits.items(), key=lambda item: (item[1], item[0]))
    if due_ms - int(time.time() * 1000) > sec * 1000:
        flag, value = given
        default = (
            "the default" if sec == TIMER_MAX_DELAY_SEC else f"{_limit_text(TIMER_MAX_DELAY_SEC)} by default"
        )
        raise UsageError(
            f"bad {flag} {value!r}: further ahead than broker {name!r} holds a timer message (its "
            f"timerMaxDelaySec, {_limit_text(sec)}; {default})"
        )


def _properties(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--property wants NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # the broker's maxMessageSize default


def _body(text: str | None, file: str | None, limit: int = MAX_MESSAGE_SIZE) -> bytes:
    """The body from the argument, ``--file PATH`` or ``--file -``/a piped stdin; never reads more
    than ``limit`` + 1 bytes, so a huge file is refused at once instead of travelling to the broker."""
    if text is not None and file is not None:
        raise UsageError("give the body as an argument or with --file, not both")
    if text is not None:
        data = text.encode("utf-8")
    elif file == "-" or (file is None and not sys.stdin.isatty()):
        data = sys.stdin.buffer.read(limit + 1)
    elif file is None:
        raise UsageError("no body: pass it as an argument, with --file PATH, or on stdin")
    else:
        with Path(file).open("rb") as source:
            data = source.read(limit + 1)
    if not data:
        raise UsageError("the message body is empty")
    if len(data) > limit:
        raise UsageError(
            f"the body is over {limit} bytes, the broker's maxMessageSize; raise --max-size if the broker allows more"
        )
    return data


@app.command("send")
@cluster_options()
def send(
    topic: TopicOpt,
    body: Annotated[
        str | None, typer.Argument(help="Message body (or use --file, or pipe it on stdin).")
    ] = None,
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="Read the body from this file ('-': stdin).")
    ] = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Message tag (TAGS).")] = None,
    keys: Annotated[
        list[str] | None,
        typer.Option(
            "--key",
            "-k",
            help="Message key (repeatable; no spaces: KEYS joins them with one).",
            callback=one_key,
        ),
    ] = None,
    prop: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            help="User property NAME=VALUE (repeatable; system names such as TAGS or TRAN_MSG are refused).",
        ),
    ] = None,
    delay_level: Annotated[
        int, typer.Option("--delay-level", min=0, max=18, help="Delay level 1-18 (0: none).")
    ] = 0,
    deliver_at: Annotated[
        str | None,
        typer.Option(
            "--deliver-at",
            help="Deliver at this time (ISO 8601, epoch ms, or relative like +90s): a timer message "
            "(TIMER_DELIVER_MS), which mqctl's brokers and RocketMQ 5.x hold until then; 4.x delivers at once. "
            "Further ahead than timerMaxDelaySec (3 days by default) of a broker the send may go to is refused "
            "before sending (exit 2); a broker set below the default refuses on the wire (exit 8).",
        ),
    ] = None,
    delay: Annotated[
        str | None,
        typer.Option(
            "--delay",
            help="Deliver after this long (90s, 15m, 2h30m; at most the brokers' timerMaxDelaySec, 3d by "
            "default): --deliver-at now + DURATION.",
        ),
    ] = None,
    max_size: Annotated[
        int,
        typer.Option("--max-size", min=1, help="Refuse bodies over this many bytes (maxMessageSize, 4 MiB)."),
    ] = MAX_MESSAGE_SIZE,
    queue: QueueOpt = None,
    broker: QueueBrokerOpt = None,
    no_create: Annotated[
        bool,
        typer.Option(
            "--no-create", help="Refuse a topic the NameServer does not know instead of auto-creating it."
        ),
    ] = False,
    lines: Annotated[
        bool,
        typer.Option(
            "--lines",
            "-l",
            help="One message per line of stdin (or --file), without its \\n; empty lines are skipped, as "
            "kcat -P skips them; prints a summary at the end. Without it all of the input is one message.",
        ),
    ] = False,
) -> None:
    """Send one message; prints where it was stored (ids, broker, queue, offset).

    The body is sent as it is: ``echo hi |`` sends "hi\\n"; -l sends each line as a message.
    A topic that does not exist is auto-created by brokers with autoCreateTopicEnable, as for RocketMQ's
    producers, and a line on stderr says so; --no-create refuses it (exit 3)."""
    from mqctl.services.messages import message_properties, send_message
    from mqctl.services.timers import held

    deliver_ms = _deliver_ms(deliver_at, delay, delay_level)
    props = message_properties(
        tags=tag,
        keys=keys or [],
        properties=_properties(prop or []),
        delay_level=delay_level,
        deliver_ms=deliver_ms,
    )

    async def checked(admin: Admin) -> None:
        if deliver_ms is not None:
            given = ("--deliver-at", deliver_at) if deliver_at else ("--delay", delay or "")
            await _within_max_delay(
                admin, topic, deliver_ms, given, broker=broker, queue=queue, create=not no_create
            )

    if lines:
        if body is not None:
            raise UsageError("--lines reads stdin or --file, not a body argument")

        async def sent_lines(admin: Admin) -> dict[str, Any]:
            await checked(admin)
            return await _send_lines(
                admin, topic, file, max_size, props, broker=broker, queue=queue, create=not no_create
            )

        online(sent_lines, changes=True)
        return
    payload = _body(body, file, max_size)

    async def sent(admin: Admin) -> Any:
        await checked(admin)
        result = await send_message(
            admin, topic, payload, properties=props, broker=broker, queue=queue, create=not no_create
        )
        if result.auto_created:
            _say_auto_created(topic, result.broker)
        answer = await held(admin, result)
        if answer.held_by is not None:
            from mqctl.output import printable, stderr_console
            from mqctl.units import when

            until = when(answer.deliver_time_ms) if answer.deliver_time_ms else "its delay level falls due"
            stderr_console().print(
                f"mqctl: held in {answer.held_by} until {until}: msg_id and queue_offset are that record's, as "
                f"RocketMQ answers; once delivered, find it with 'mqctl msg query -t {printable(topic)} --id "
                f"{answer.unique_key}'",
                markup=False,
            )
        if result.status in _STORED_BUT:
            from mqctl.output import stderr_console

            stderr_console().print(
                f"mqctl: warning: stored on {result.broker} but {result.status}: {_STORED_BUT[result.status]}; "
                "sending again would store it twice",
                style="yellow",
                markup=False,
            )
        return answer

    online(sent, changes=True)


#: A send's status other than SEND_OK: what a producer that wants SEND_OK was not given.
_STORED_BUT = {
    "SLAVE_NOT_AVAILABLE": "a SYNC_MASTER with no slave to copy it to (see 'mqctl broker ha status')",
    "FLUSH_SLAVE_TIMEOUT": "its slave did not confirm the copy in time (see 'mqctl broker ha status')",
    "FLUSH_DISK_TIMEOUT": "not flushed to disk in time (flushDiskType=SYNC_FLUSH)",
}


def _say_auto_created(topic: str, broker: str) -> None:
    from mqctl.output import printable, stderr_console

    stderr_console().print(
        f"mqctl: topic {topic!r} did not exist: broker {printable(broker, newlines=False)} created it with "
        "this message (autoCreateTopicEnable); --no-create refuses unknown topics",
        style="yellow",
        markup=False,  # (the broker's name is its word)
    )


async def _send_lines(
    admin: Admin,
    topic: str,
    file: str | None,
    limit: int,
    props: dict[str, str],
    *,
    broker: str | None,
    queue: int | None,
    create: bool,
) -> dict[str, Any]:
    """Each line of stdin (or ``file``) as a message as it is read (``tail -f`` works), without its "\\n"
    (a "\\r" before it is data); empty lines skipped, as kcat's producer skips them. The summary: how
    many were sent, skipped, and where they went."""
    import asyncio
    from collections import Counter

    from mqctl.services.messages import send_message

    source = sys.stdin.buffer if file in (None, "-") else Path(file).open("rb")  # noqa: SIM115
    sent = skipped = size = 0
    where: Counter[str] = Counter()
    try:
        number = 0
        while line := await asyncio.to_thread(source.readline, limit + 1):
            number += 1
            payload = line.removesuffix(b"\n")
            if not payload:
                skipped += 1
                continue
            if len(payload) > limit:
                raise UsageError(
                    f"line {number} is over {limit} bytes, the broker's maxMessageSize ({sent} sent before it); "
                    "raise --max-size if the broker allows more"
                )
            result = await send_message(
                admin,
                topic,
                payload,
                properties=props,
                broker=broker,
                queue=queue,
                create=create,
            )
            if result.auto_created and not sent:  # (later sends may find the route not yet registered)
                _say_auto_created(topic, result.broker)
            sent += 1
            size += len(payload)
            where[result.broker] += 1
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    return {
        "topic": topic,
        "sent": sent,
        "empty_lines_skipped": skipped,
        "bytes": size,
        "brokers": dict(where),
    }


@app.command("query")
@cluster_options(watch=True)
def query(
    topic: OptionalTopicOpt = None,
    key: KeyOpt = None,
    msg_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="Either message id: the offset id (msg_id) or the client id (unique_key) 'msg send' prints "
            "(a 5.x client's id has 34 hex digits); a client id is looked up in --topic, else in every topic.",
        ),
    ] = None,
    unique_key: Annotated[
        str | None,
        typer.Option(
            "--unique-key",
            help="Client message id (UNIQ_KEY), looked up in --topic, else in every topic; printed as --id prints it.",
        ),
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    max_num: Annotated[
        int, typer.Option("--max", min=1, max=64, help="At most this many messages per broker.")
    ] = 64,
    no_body: NoBodyOpt = False,
) -> None:
    """Find messages by key (--key with --topic), by either message id (--id) or by client id (--unique-key).

    A key query goes through the brokers' index; every hit is checked against the stored keys. Every
    message carries its body: UTF-8 text, or base64 when it is not UTF-8 (body_encoding says which).
    The store-time window searched is printed on stderr when --since or --until gives one.
    """
    from mqctl.output import stderr_console
    from mqctl.services import messages

    chosen = [
        name for name, value in (("--key", key), ("--id", msg_id), ("--unique-key", unique_key)) if value
    ]
    if len(chosen) != 1:
        by_time = " (messages by store time: msg tail -t TOPIC --since TIME [--until TIME])"
        raise UsageError("give exactly one of --key, --id or --unique-key" + ("" if chosen else by_time))
    if (since or until) and key is None:
        raise UsageError("--since/--until only apply to --key")
    if msg_id is not None:

        async def by_id(admin: Admin) -> messages.MessageDetail:
            found = await messages.query_by_id(admin, msg_id, topic=topic, body=not no_body)
            kind = "an offset id (msg_id)" if found["found_by"] == "msg_id" else "a client id (unique_key)"
            stderr_console().print(f"{msg_id} is {kind}", style="dim")
            return found

        online(by_id)
        return
    if unique_key is not None:
        online(lambda admin: messages.query_by_unique_key(admin, topic, unique_key, body=not no_body))
        return
    if topic is None:
        raise UsageError(f"{chosen[0]} needs --topic")
    assert key is not None
    window = key_window(since, until)
    online(
        lambda admin: messages.query_by_key(admin, topic, key, window, max_num=max_num, body=not no_body),
    )


@app.command("show")
@cluster_options(watch=True)
def show(
    topic: TopicOpt,
    queue: Annotated[int, typer.Option("--queue", "-q", min=0, help="Queue id.")],
    offset: Annotated[int, typer.Option("--offset", min=0, help="Queue offset.")],
    broker: QueueBrokerOpt = None,
    no_body: NoBodyOpt = False,
    raw: RawOpt = False,
) -> None:
    """The message at a queue offset, with its properties and body (nothing is committed).

    Control characters in the message are shown escaped (\\x1b, \\t) unless --raw."""
    from mqctl.output import set_raw
    from mqctl.services.messages import show as show_message

    set_raw(raw)
    online(
        lambda admin: show_message(admin, topic, queue, offset, broker=broker, body=not no_body),
    )


TAIL_COLUMNS = ("store_time", "topic", "queue_id", "queue_offset", "msg_id", "tags", "keys", "body")


@app.command("tail")
@cluster_options()
def tail(
    topic: TopicOpt,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Start at this consumer group's committed offsets, as a live member of the group "
            "(listed by `group connections`, follows an offset reset; the group's consumers rebalance "
            "around it). Never commits where it read.",
            callback=check_group,
        ),
    ] = None,
    start: Annotated[
        str,
        typer.Option(
            "--from",
            click_type=click.Choice(["latest", "earliest"]),
            help="Where queues without a committed offset start.",
        ),
    ] = "latest",
    tag: Annotated[str | None, typer.Option("--tag", help="Only these tags: 'TagA || TagB'.")] = None,
    max_messages: Annotated[
        int | None, typer.Option("--max-messages", min=1, help="Stop after this many messages.")
    ] = None,
    exit_at_end: Annotated[
        bool, typer.Option("--exit", help="Stop at the end of every queue instead of waiting.")
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Start each queue at its first message stored at or after TIME (ISO 8601, UTC default; "
            "epoch ms; -2h), as the dashboard's search by topic and time (not with -g or --from).",
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            help="Stop each queue at its first message stored after TIME, or at its end (implies --exit; "
            "without --since, queues start at --from earliest).",
        ),
    ] = None,
    raw: RawOpt = False,
) -> None:
    """Stream messages as they arrive (like kcat -C); -o json prints one JSON object per line.

    Messages by store time (mqadmin printMsg, the dashboard's topic and time search): --since FROM
    [--until TO]. A body that is not UTF-8 shows as base64:... (JSON: body_encoding says base64).
    Control characters in messages are shown escaped (\\x1b, \\t) unless --raw."""
    import time

    from mqctl.admin.client import run_admin
    from mqctl.interrupts import unless_reader_leaves
    from mqctl.output import RowStream, set_raw, stderr_console
    from mqctl.services.messages import Window, tail as tail_messages
    from mqctl.timespec import iso, parse_time

    since_ms = until_ms = None
    said: str | None = None  # the window, said once the topic's queues are found (not before its error)
    if since is not None or until is not None:
        if group is not None:
            raise UsageError("--since/--until read by store time: not with -g (the group's offsets)")
        source = click.get_current_context().get_parameter_source("start")
        if since is not None and source is not click.core.ParameterSource.DEFAULT:
            raise UsageError("--since sets where each queue starts: not with --from")
        if until is None:  # from --since on, as long as it runs (a time to come included)
            since_ms = parse_time(str(since), now_ms=int(time.time() * 1000), flag="--since")
            said = f"from {iso(since_ms)}"
        else:
            window = Window.of(since, until)
            since_ms = window.begin_ms if since is not None else None
            until_ms = window.end_ms
            exit_at_end = True
            if since is None and source is click.core.ParameterSource.DEFAULT:
                start = "earliest"  # everything stored until TIME
            said = window.describe()

    set_raw(raw)
    target = cluster_target()
    output = flags().output
    writer = RowStream(output, columns=TAIL_COLUMNS if output == "table" else None)
    console = stderr_console()

    def started(queues: int) -> None:
        if said is not None:
            console.print(f"window: {said} (store time, UTC)", style="dim", markup=False)
        console.print(
            f"tailing {topic}: {plural(queues, 'queue')}{'' if exit_at_end else ', Ctrl-C to stop'}",
            style="dim",
            markup=False,
        )

    emitted = [0]

    def emit(row: MessageRow) -> None:
        writer(row)
        emitted[0] += 1

    try:
        count = run_admin(
            target.namesrv,
            lambda admin: unless_reader_leaves(
                tail_messages(
                    admin,
                    topic,
                    emit,
                    group=group,
                    start=start,
                    subscription=tag or "*",
                    max_messages=max_messages,
                    exit_at_end=exit_at_end,
                    since_ms=since_ms,
                    until_ms=until_ms,
                    on_start=started,
                )
            ),
            timeout=request_timeout(10.0, target),
        )
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted after {plural(emitted[0], 'message')}") from None
    console.print(plural(count, "message"), style="dim")


@app.command("resend")
@cluster_options()
def resend(
    group: GroupOpt,
    ids: DlqIdsOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    tag: DlqTagOpt = None,
    key: KeyOpt = None,
    to_topic: Annotated[
        str | None,
        typer.Option("--to-topic", help="Send here instead of the original topic.", callback=check_topic),
    ] = None,
    execute: ExecuteOpt = False,
    yes: YesOpt = False,
) -> None:
    """Preview, and with --execute send again, dead letters of a group (%DLQ%<group>) to their original topic.

    Without --execute nothing is sent: one row per dead letter says WOULD RESEND, ALREADY RESENT or
    SKIPPED (no original topic: use --to-topic). --execute asks first on a terminal (off one it needs
    --yes), then prints RESENT with the new id, FAILED or SKIPPED. Each copy carries the property
    MQCTL_DLQ_MSG_ID (the dead letter's id) and each re-sent dead letter is recorded for the group (NameServer
    KV namespace MQCTL_DLQ_RESENT), so a second run skips it. Filters: --id, --since/--until (store time
    in the DLQ), --tag, --key. Exit 8 when a send FAILED, 2 when a message was SKIPPED. The DLQ is left as is.
    """
    from mqctl.admin.client import run_admin
    from mqctl.errors import BrokerError
    from mqctl.output import Rows, render, stderr_console
    from mqctl.services.messages import DlqFilter, Resent, Window, dlq_messages, resend as resend_messages
    from store import dlq_topic

    window = Window.of(since, until) if since or until else None
    only = DlqFilter(frozenset(i.upper() for i in ids or []), window=window, tag=tag, key=key)
    target = cluster_target()
    seconds = request_timeout(5.0, target)
    found = run_admin(target.namesrv, lambda admin: dlq_messages(admin, group, only), timeout=seconds)
    err = stderr_console()
    if not found:
        err.print(f"{dlq_topic(group)} holds nothing that matches; nothing to re-send")
        render(Rows.of(Resent), flags().output)
        return
    if execute:
        destination = f"topic {to_topic!r}" if to_topic else "their original topics"
        confirm(f"Re-send {plural(len(found), 'message')} of {dlq_topic(group)} to {destination}?", yes=yes)
    outcomes: list[Resent] = []
    try:
        with progress(len(found), "re-sending" if execute else "reading") as advance:
            run_admin(
                target.namesrv,
                lambda admin: resend_messages(
                    admin, group, found, to_topic, execute=execute, progress=advance, into=outcomes
                ),
                timeout=seconds,
            )
    except KeyboardInterrupt:
        render(outcomes, flags().output)  # what this run did before Ctrl-C
        sent = sum(o.outcome == "RESENT" for o in outcomes)
        raise Interrupted(
            f"interrupted after re-sending {sent} of {plural(len(found), 'message')}; each is recorded, "
            "so the next run skips them"
        ) from None
    render(outcomes, flags().output)
    counts = {
        name: sum(o.outcome == name for o in outcomes)
        for name in ("RESENT", "WOULD RESEND", "ALREADY RESENT", "FAILED", "SKIPPED")
    }
    err.print(", ".join(f"{n} {name.lower()}" for name, n in counts.items() if n))
    if not execute:
        err.print("preview only: nothing sent; add --execute to re-send")
    if counts["FAILED"]:
        raise BrokerError(
            f"{plural(counts['FAILED'], 'message')} could not be re-sent (see the table)", code=1
        )
    if counts["SKIPPED"]:
        raise UsageError(
            f"{plural(counts['SKIPPED'], 'message')} skipped: no original topic", hint="use --to-topic"
        )


app.command("trace")(_trace.trace)
