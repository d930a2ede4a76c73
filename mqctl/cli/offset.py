"""``mqctl offset``: show consumer offsets, and reset them with a plan before anything changes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mqctl.cli.common import (
    ExecuteOpt,
    ExistingPath,
    GroupOpt,
    TopicOpt,
    YesOpt,
    check_group,
    check_topic,
    cluster_options,
    confirm,
    online,
)
from mqctl.completion import complete_group, complete_topic
from mqctl.units import plural

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app


@app.command("show")
@cluster_options(watch=True)
def show(
    group: GroupOpt,
    topic: TopicOpt,
) -> None:
    """Per queue: min and max offset, the group's committed offset and lag.

    A queue the group never committed on shows no committed offset ('-'; null in JSON and YAML). Its lag
    counts from where the broker starts a consumer of the group there: 0 on a young queue (its first
    message still in memory: the broker answers 0 whatever the consumer's consumeFromWhere); elsewhere
    the consumer's consumeFromWhere decides, and the lag is '-' too. A broker whose offset table cannot be
    read leaves its 0s unknown ('-'), with a warning naming it."""
    from mqctl.services.offsets import show as show_offsets

    online(
        lambda admin: show_offsets(admin, group, topic),
    )


@app.command("reset")
@cluster_options()
def reset(
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Consumer group name (with --from-file: the plan's, when not given).",
            autocompletion=complete_group,
            callback=check_group,
        ),
    ] = None,
    topic: Annotated[
        str | None,
        typer.Option(
            "--topic",
            "-t",
            help="Topic name (with --from-file: the plan's, when not given).",
            autocompletion=complete_topic,
            callback=check_topic,
        ),
    ] = None,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="The oldest stored message.")] = False,
    to_latest: Annotated[
        bool, typer.Option("--to-latest", help="After the newest message (skip all).")
    ] = False,
    to_time: Annotated[
        str | None,
        typer.Option(
            "--to-time",
            help="The message stored nearest TIME (ISO, epoch ms, -2h), as mqadmin resetOffsetByTime.",
        ),
    ] = None,
    by_duration: Annotated[
        str | None, typer.Option("--by-duration", help="--to-time now minus DUR (30m, 2h, 1d).")
    ] = None,
    to_offset: Annotated[
        int | None, typer.Option("--to-offset", help="This queue offset (clamped per queue).")
    ] = None,
    shift_by: Annotated[
        int | None, typer.Option("--shift-by", help="Move each queue by N (negative: back).")
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file", click_type=ExistingPath(dir_okay=False), help="A plan saved by --export."
        ),
    ] = None,
    from_group: Annotated[
        str | None,
        typer.Option(
            "--from-group",
            help="Another group's committed offsets, queue by queue (mqadmin cloneGroupOffset): a renamed "
            "group starts where the old one stopped.",
        ),
    ] = None,
    export: Annotated[
        Path | None, typer.Option("--export", dir_okay=False, help="Save the plan as JSON.")
    ] = None,
    execute: ExecuteOpt = False,
    yes: YesOpt = False,
    create_group: Annotated[
        bool,
        typer.Option(
            "--create-group",
            help="Create the group when no broker knows it (else refused: a typo would get offsets).",
        ),
    ] = False,
) -> None:
    """Plan a reset (per queue: current -> new); only --execute changes anything, after asking (or --yes).

    A group no broker of the topic knows is refused (exit 3) unless --create-group.

    A time finds what RocketMQ's search by time finds (ConsumeQueue#getOffsetInQueueByTime): a message
    stored at TIME, else the nearer of the last one before and the first one after; a TIME after a queue's
    newest message gives that message, which is consumed again (--to-latest skips it).

    With live consumers in the group only time targets (--to-earliest/--to-latest/--to-time/--by-duration)
    are executed, by the broker, which tells the consumers to follow; other targets fail with exit 4,
    naming the consumers.
    """
    import sys
    import time

    from mqctl.errors import UsageError
    from mqctl.output import render
    from mqctl.services.offsets import ResetTarget, reset as reset_offsets
    from mqctl.timespec import parse_duration, parse_time

    chosen = [
        name
        for name, given in (
            ("--to-earliest", to_earliest),
            ("--to-latest", to_latest),
            ("--to-time", to_time is not None),
            ("--by-duration", by_duration is not None),
            ("--to-offset", to_offset is not None),
            ("--shift-by", shift_by is not None),
            ("--from-file", from_file is not None),
            ("--from-group", from_group is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        raise UsageError(
            f"give exactly one of --to-earliest, --to-latest, --to-time, --by-duration, --to-offset, "
            f"--shift-by, --from-file, --from-group (got {', '.join(chosen) or 'none'})"
        )
    if from_file is not None and (group is None or topic is None):
        from mqctl.services.offsets import plan_target

        planned_group, planned_topic = plan_target(from_file)
        group, topic = group or planned_group, topic or planned_topic
    if group is None or topic is None:
        missing = " and ".join(f for f, v in (("-g/--group", group), ("-t/--topic", topic)) if v is None)
        raise UsageError(f"give {missing} (only --from-file takes them from its plan)")
    now = int(time.time() * 1000)
    if to_earliest:
        target = ResetTarget("earliest")
    elif to_latest:
        target = ResetTarget("latest")
    elif to_time is not None:
        target = ResetTarget("time", parse_time(to_time, now_ms=now, flag="--to-time"))
    elif by_duration is not None:
        target = ResetTarget("time", now - parse_duration(by_duration, flag="--by-duration"))
    elif to_offset is not None:
        if to_offset < 0:  # clamped to each queue's start, it read as --to-earliest: a --shift-by meant
            raise UsageError(
                f"--to-offset {to_offset}: an offset is 0 or more (to move each queue back by "
                f"{-to_offset}: --shift-by {to_offset}; to the oldest message: --to-earliest)"
            )
        target = ResetTarget("offset", to_offset)
    elif shift_by is not None:
        target = ResetTarget("shift", shift_by)
    elif from_group is not None:
        if from_group == group:  # its own offsets: a plan that changes nothing, a typo of the source
            raise UsageError(f"--from-group {from_group!r} is the group being reset: name another group")
        target = ResetTarget("group", source=from_group)
    else:
        target = ResetTarget("file", plan_file=from_file)

    def ask(rows: list[Any]) -> None:
        if not yes and sys.stdin.isatty():  # the question comes with the plan it is about
            render(
                [
                    {
                        "broker": r.broker_name,
                        "queue": r.queue_id,
                        "consumer_offset": r.consumer_offset,
                        "new": r.new,
                        "change": r.change,
                    }
                    for r in rows
                ],
                "table",
                out=sys.stderr,
            )
        confirm(
            f"Reset the offsets of group {group!r} on {plural(len(rows), 'queue')} of {topic!r}?", yes=yes
        )

    online(
        lambda admin: reset_offsets(
            admin,
            group,
            topic,
            target,
            execute_plan=execute,
            export_to=export,
            confirm=ask,
            create_group=create_group,
        ),
        changes=True,
    )
