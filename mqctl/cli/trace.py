"""``mqctl msg trace``: a message's timeline from the trace records 4.x clients write (registered by ``msg``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqctl.cli.common import (
    KeyOpt,
    check_topic,
    cluster_options,
    cluster_target,
    command_deadline,
    flags,
    output_given,
    read_all,
    request_timeout,
)
from mqctl.completion import complete_topic
from mqctl.errors import UsageError
from mqctl.output import printable
from store import TRACE_TOPIC

if TYPE_CHECKING:
    from rich.tree import Tree


@cluster_options()
def trace(
    message_id: Annotated[
        str | None,
        typer.Argument(
            metavar="[ID]", help="The message's id: its client id (unique_key) or its offset id (msg_id)."
        ),
    ] = None,
    key: KeyOpt = None,
    topic: Annotated[
        str | None,
        typer.Option(
            "--topic",
            "-t",
            help="Only messages of this topic.",
            autocompletion=complete_topic,
            callback=check_topic,
        ),
    ] = None,
    trace_topic: Annotated[
        str,
        typer.Option(
            "--trace-topic",
            help="Where the clients write traces (their customizedTraceTopic).",
            callback=check_topic,
        ),
    ] = TRACE_TOPIC,
    tree: Annotated[
        bool, typer.Option("--tree", help="Show the timeline as a tree (with -o table).")
    ] = False,
) -> None:
    """A message's trace: who produced it and when, where it was stored, its transaction's end and each
    consumer group's attempts with their cost and result, from the records clients with message trace
    on (enableMsgTrace) wrote to RMQ_SYS_TRACE_TOPIC, as mqadmin's queryMsgTraceById reads them.

    ID is either id of the message (found_by says which); --key traces every message with that key.
    """
    from mqctl.services.trace import trace_key, trace_message

    if (message_id is None) == (key is None):
        raise UsageError("give a message id or --key, one of the two")
    if tree and flags().output != "table" and output_given():  # ($MQCTL_OUTPUT alone: --tree wins)
        raise UsageError(f"--tree draws a table-format view; it does not combine with -o {flags().output}")
    if message_id is not None:
        from mqctl.services.messages import check_message_id

        check_message_id(message_id)
        ident = message_id

        def work(admin: Any) -> Any:
            return trace_message(admin, ident, trace_topic=trace_topic, topic=topic)

    else:
        assert key is not None
        wanted = key

        def work(admin: Any) -> Any:
            return trace_key(admin, wanted, trace_topic=trace_topic, topic=topic)

    from mqctl.admin.client import run_admin
    from mqctl.interrupts import whole_output
    from mqctl.output import render, stdout_console

    target = cluster_target()
    seconds = request_timeout(5.0, target)
    deadline = command_deadline(seconds)
    result = read_all(lambda: run_admin(target.namesrv, work, timeout=seconds, deadline=deadline))
    timelines = result if isinstance(result, list) else [result]
    if tree:
        from rich.measure import Measurement

        console = stdout_console()
        for timeline in timelines:
            drawn = timeline_tree(timeline)
            if not console.is_terminal:  # piped, as wide as it is: an event is one line, as a table's row is
                console.width = Measurement.get(console, console.options.update_width(1 << 20), drawn).maximum
            with whole_output:  # a Ctrl-C while a slow reader holds the write still gets the whole tree
                console.print(drawn)
    elif flags().output == "table":  # one message's summary and events after another
        for timeline in timelines:
            render(timeline, "table")
    else:
        render(result, flags().output)


def _clean(value: object) -> str:
    """Text from the trace as one safe line: control characters escaped, never terminal sequences."""
    return printable("" if value is None else str(value), newlines=False)


def timeline_tree(t: dict[str, Any]) -> Tree:
    """The timeline as a rich tree: the message, then its events, consume attempts under their group."""
    from rich.text import Text
    from rich.tree import Tree

    from mqctl.output import shown_time

    def when(ms: int | None) -> str:
        return shown_time(ms) if ms else "(no time)"

    head = f"message {t['unique_key']}  topic {t['topic'] or '?'}"
    head += "".join(f"  {name} {t[name]}" for name in ("tags", "keys") if t.get(name))
    root = Tree(Text(_clean(head), style="bold"))
    groups: dict[str, Tree] = {}
    if t["store_host"] and not any(e["event"] == "store" for e in t["events"]):
        where = f"stored on {t['store_host']} as {t['msg_id'] or '?'} (not a broker of this cluster: queue unknown)"
        root.add(Text(_clean(where)))
    for e in t["events"]:
        d = e["details"]
        at = when(e["time_ms"])
        if e["event"] == "produce":
            line = f"{at}  produced by {e['group']} on {e['client_host']}: {e['status']} in {e['cost_ms']} ms"
        elif e["event"] == "store":
            line = (
                f"{at}  stored on {d['broker_name'] or d['store_host']} ({d['store_host']}) "
                f"queue {d['queue_id']} offset {d['queue_offset']}"
            )
        elif e["event"] == "end_transaction":
            check = " (transaction check)" if d["from_transaction_check"] else ""
            line = f"{at}  transaction {e['status']} by {e['group']}{check}"
        else:
            group = e["group"] or "?"
            if group not in groups:
                groups[group] = root.add(Text(_clean(f"consumer group {group}"), style="bold"))
            cost = f" in {e['cost_ms']} ms" if e["cost_ms"] is not None else ""
            result = f" ({d['result']})" if d.get("result") else ""
            style = {"OK": "green", "FAILED": "red"}.get(e["status"] or "", "yellow")
            groups[group].add(
                Text(
                    _clean(
                        f"{at}  attempt {d['attempt'] or '?'} on {e['client_host']}: {e['status']}{cost}{result}"
                    ),
                    style=style,
                )
            )
            continue
        root.add(Text(_clean(line)))
    return root
