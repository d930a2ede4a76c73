"""``mqctl store``: read a store directory offline (no broker needed, nothing written, no lock taken);
``store clean --execute`` is the one command that changes it, and only a stopped broker's store."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqctl.cli.common import (
    ExecuteOpt,
    ExistingPath,
    KeyOpt,
    NoBodyOpt,
    OutputOpt,
    SinceOpt,
    TimeoutOpt,
    TopicOpt,
    UntilOpt,
    WatchOpt,
    YesOpt,
    cluster_options,
    cluster_target,
    confirm,
    flags,
    key_window,
    progress,
    render_every,
    request_timeout,
)
from mqctl.errors import BrokerError, ConflictError, Interrupted, StoreError, UsageError
from mqctl.units import plural

if TYPE_CHECKING:
    from mqctl.services.retention import CleanReport

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app


class _EachLineOnce(logging.Filter):
    """Passes each distinct log line once. A store command opens the store more than once (each phase of
    ``verify``, ``commitlog ls``'s scan and then its retention plan), and recovery logs what it finds at
    every open: the operator is told once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


@app.callback()
def _store(ctx: typer.Context) -> None:
    once = _EachLineOnce()
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(once)

    def done() -> None:
        for handler in handlers:
            handler.removeFilter(once)

    ctx.call_on_close(done)


commitlog_app = typer.Typer(help="CommitLog files.", no_args_is_help=True)
cq_app = typer.Typer(help="ConsumeQueues.", no_args_is_help=True)
index_app = typer.Typer(help="IndexFiles.", no_args_is_help=True)
msg_app = typer.Typer(help="Find messages through the on-disk index.", no_args_is_help=True)
app.add_typer(commitlog_app, name="commitlog")
app.add_typer(cq_app, name="cq")
app.add_typer(index_app, name="index")
app.add_typer(msg_app, name="msg")

StoreDirOpt = Annotated[
    Path,
    typer.Option(
        "--store",
        help="Store root directory (storePathRootDir, holds commitlog/).",
        click_type=ExistingPath(file_okay=False),
    ),
]
IndexNameOpt = Annotated[str | None, typer.Argument(help="Index file name (default: the newest).")]


ReservedHoursOpt = Annotated[
    int | None,
    typer.Option(
        "--reserved-hours",
        min=0,
        help="fileReservedTime: a file expires this many hours after its last write (default 72).",
    ),
]


@commitlog_app.command("ls")
def commitlog_ls(
    store: StoreDirOpt,
    reserved_hours: ReservedHoursOpt = None,
    output: OutputOpt = "table",
    watch: WatchOpt = None,
) -> None:
    """Each file: offset range, size, data bytes, records, first/last store time, topics, and for retention its
    age, whether it is expired, the bytes a cleanup triggered now would free and whether every group has
    consumed all of its messages."""
    from mqctl.services import retention, store_inspect as si

    def work() -> Any:
        with progress(si.commitlog_bytes(store), "reading CommitLog", unit="bytes") as advance:
            return retention.commitlog_files(store, reserved_hours=reserved_hours, progress=advance)

    render_every(work, output, watch)


@app.command("clean")
def clean(
    store: StoreDirOpt,
    reserved_hours: ReservedHoursOpt = None,
    watermark: Annotated[
        int | None,
        typer.Option(
            "--watermark",
            min=10,
            max=95,
            help="diskMaxUsedSpaceRatio, percent (default 75): whether the broker would act without waiting for deleteWhen.",
        ),
    ] = None,
    force_watermark: Annotated[
        int | None,
        typer.Option(
            "--force-watermark",
            min=1,
            max=100,
            help="Disk usage percent above which unexpired files are deleted too (default 85).",
        ),
    ] = None,
    execute: ExecuteOpt = False,
    allow_recovery: Annotated[
        bool,
        typer.Option(
            "--allow-recovery",
            help="A store that needs recovery (unclean stop, damaged record, torn tail): plan the recovery "
            "a broker start runs, and with --execute run it first.",
        ),
    ] = False,
    yes: YesOpt = False,
    output: OutputOpt = "table",
) -> None:
    """Plan the deletion of expired CommitLog files of a stopped broker's store; delete with --execute.

    The plan lists every file with its size, age and why it goes (expired / watermark), the groups that
    would lose unconsumed messages, with counts, and every file --execute removes: the oldest CommitLog
    files, never the newest, nothing after the first file that stays, and the ConsumeQueue and index files
    below the new minimum. --execute removes exactly those, from the same read-only view, with the store's
    lock held; it asks first (off a terminal it needs --yes). A store that needs recovery is refused (exit
    10) unless --allow-recovery. Refuses while a broker holds the store's lock.
    """
    from mqctl.services import retention

    config = retention.offline_config(
        store, reserved_hours=reserved_hours, watermark=watermark, force_watermark=force_watermark
    )

    def ask(rep: CleanReport) -> None:
        if not yes and sys.stdin.isatty():  # the question comes with the plan it is about
            show_clean_report(rep, "table", to_stderr=True)
        first = "Run recovery, then remove" if rep.recovery else "Remove"
        confirm(f"{first} {plural(len(rep.removes), 'file')} from {store}?", yes=yes)

    from store import StoreLockedError

    try:
        rep = retention.store_clean(
            store, config, execute=execute, allow_recovery=allow_recovery, confirm=ask
        )
    except StoreLockedError as exc:  # the broker that holds it plans its own retention
        raise ConflictError(
            str(exc), hint="stop the broker that holds it first, or see its plan online: 'mqctl broker clean'"
        ) from None
    show_clean_report(rep, output)


def show_clean_report(rep: CleanReport, output: str, *, to_stderr: bool = False) -> None:
    """The plan: a file table titled with the summary, the groups losing messages, the recovery step and the
    files an offline cleanup removes (or removed); hints on stderr (everything there with ``to_stderr``)."""
    from mqctl.output import Rows, render, stderr_console
    from mqctl.services.retention import FileRow

    err = stderr_console()
    out = sys.stderr if to_stderr else None
    if output in ("json", "yaml"):
        render(rep, output, out=out)
    else:
        render(
            Rows.of(FileRow, rep.files), output, out=out, title=rep.summary() if output == "table" else None
        )
        tables: list[tuple[list[Any], str]] = [
            (
                [{"group": g, "unconsumed_messages_lost": n} for g, n in rep.losses.items()],
                "groups that lose unconsumed messages",
            ),
            (
                [{"step": "recovery", "what": rep.recovery}] if rep.recovery else [],
                "recovery, before the plan",
            ),
            (rep.removed, "removed") if rep.executed else (rep.removes, "--execute removes"),
        ]
        for rows, title in tables:
            if rows and output == "table":
                render(rows, output, out=out, title=title)
    if to_stderr:
        return
    if rep.note:
        err.print(rep.note)
    # offline, mqctl removes the files it lists (the CommitLog's and the queues' and indexes' below them); a
    # broker's plan ('broker clean') lists none: the broker deletes the CommitLog files and its own files after
    offline = bool(rep.removes or rep.removed)
    if rep.executed:
        in_all = f", {plural(len(rep.removed), 'file')} in all" if offline else ""
        err.print(
            f"deleted {plural(len(rep.deleted), 'CommitLog file')}{in_all}; min offset now {rep.min_offset_after}"
        )
    elif rep.delete_files and offline:
        err.print(
            f"dry run: nothing deleted; --execute removes the {plural(len(rep.removes), 'file')} listed "
            f"({plural(rep.delete_files, 'CommitLog file')} marked 'delete')"
        )
    elif rep.delete_files:
        err.print(
            "dry run: nothing deleted; --execute has the broker delete the "
            f"{plural(rep.delete_files, 'CommitLog file')} marked 'delete'"
        )


@cq_app.command("ls")
def cq_ls(
    store: StoreDirOpt,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic.")] = None,
    output: OutputOpt = "table",
    watch: WatchOpt = None,
) -> None:
    """Every ConsumeQueue: files, min/max offset and message count."""
    from mqctl.services.store_inspect import cq_ls as list_queues

    render_every(lambda: list_queues(store, topic), output, watch)


@cq_app.command("show")
def cq_show(
    store: StoreDirOpt,
    topic: TopicOpt,
    queue: Annotated[int, typer.Option("--queue", "-q", min=0, help="Queue id.")],
    offset: Annotated[
        int | None, typer.Option("--offset", min=0, help="First queue offset (default: the oldest).")
    ] = None,
    max_num: Annotated[int, typer.Option("--max", min=1, help="At most this many units.")] = 20,
    output: OutputOpt = "table",
) -> None:
    """Units of one queue with the message each points at."""
    from mqctl.services.store_inspect import cq_show as show_queue

    render_every(lambda: show_queue(store, topic, queue, offset=offset, count=max_num), output)


@index_app.command("ls")
def index_ls(store: StoreDirOpt, output: OutputOpt = "table", watch: WatchOpt = None) -> None:
    """Each IndexFile's header: time and CommitLog range, used slots, entries, full or not."""
    from mqctl.services.store_inspect import index_ls as list_index

    render_every(lambda: list_index(store), output, watch)


@index_app.command("show")
def index_show(
    store: StoreDirOpt,
    name: IndexNameOpt = None,
    topic: Annotated[
        str | None, typer.Option("--topic", "-t", help="With --key: show the hash chain of topic#key.")
    ] = None,
    key: KeyOpt = None,
    output: OutputOpt = "table",
) -> None:
    """One IndexFile's header and hash-chain statistics, or (--topic and --key) the chain of one key."""
    from mqctl.services import store_inspect as si

    if (topic is None) != (key is None):
        raise UsageError("--topic and --key go together")
    if topic is not None and key is not None:
        render_every(lambda: si.index_chain(store, topic, key, name), output)
    else:
        render_every(lambda: si.index_show(store, name), output)


@msg_app.command("query")
def msg_query(
    store: StoreDirOpt,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Topic name (with --key).")] = None,
    key: KeyOpt = None,
    msg_id: Annotated[str | None, typer.Option("--id", help="Offset message id.")] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    max_num: Annotated[int, typer.Option("--max", min=1, max=64, help="At most this many messages.")] = 64,
    no_body: NoBodyOpt = False,
    output: OutputOpt = "table",
) -> None:
    """Find messages by key (--key with --topic, verified against the records) or by offset id (--id).

    The rows are the online 'msg query''s: every message carries its body (UTF-8 text, or base64 when it
    is not UTF-8; body_encoding says which) unless --no-body."""
    from mqctl.services import store_inspect as si

    if (key is None) == (msg_id is None):
        raise UsageError("give exactly one of --key or --id")
    if msg_id is not None:
        if since or until:
            raise UsageError("--since/--until only apply to --key")
        render_every(lambda: si.query_id(store, msg_id, body=not no_body), output)
        return
    if topic is None:
        raise UsageError("--key needs --topic")
    assert key is not None
    window = key_window(since, until)
    render_every(lambda: si.query_key(store, topic, key, window, max_num=max_num, body=not no_body), output)


#: Problems a ``store verify`` table lists unless ``--max-problems`` says otherwise (JSON lists them all).
TABLE_PROBLEMS = 20
#: What a ``NAME.damaged-<UTC>`` copy beside a store means (docs/replication.md, a damaged history).
DAMAGED_COPIES = (
    "a broker found the file damaged (it did not parse), kept what it held there and wrote the file "
    "again, its history read as none (docs/replication.md, a damaged history): look into what damaged it "
    "(a torn write, a hand's edit), then delete the copy"
)


@app.command("verify")
def verify(
    store: StoreDirOpt,
    output: OutputOpt = "table",
    max_problems: Annotated[
        int | None,
        typer.Option(
            "--max-problems",
            min=0,
            metavar="N",
            help=f"List at most N problems; all are counted. Default: all, or {TABLE_PROBLEMS} in a table.",
        ),
    ] = None,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            metavar="HOST:PORT",
            help="Also compare this store's CommitLog with a live broker's (a slave's store with its master).",
        ),
    ] = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Check every record's CRC and ConsumeQueues and IndexFiles against the CommitLog; exit 10 on problems.

    Every problem is counted and listed (a file that cannot be opened is one problem; the check goes on
    with the next file). Also lists the quarantines: data recovery set aside instead of deleting (when,
    why, files, records), and the copies a broker kept of an incarnations file it found damaged
    (NAME.damaged-<UTC>: a warning, the exit code unchanged). With --against HOST:PORT each record is also compared, byte for byte, with what
    that broker's VIEW_MESSAGE_BY_ID answers at the same CommitLog offset (a real RocketMQ broker answers
    it too), and the broker's records past this store's end are listed: the first differing offset,
    records that differ, records only here, only there (--max-problems caps the list; all are counted).
    Records only here, or differing, exit 10; only there (a slave's lag) does not.
    """
    from mqctl.output import plain, render, stderr_console
    from mqctl.services import store_inspect as si
    from mqctl.services.quarantine import quarantine_rows
    from mqctl.units import iso

    if max_problems is None and output == "table":
        max_problems = TABLE_PROBLEMS
    with progress(si.commitlog_bytes(store), "verifying", unit="bytes") as advance:
        report = si.verify(store, max_problems=max_problems, progress=advance)
    quarantined = quarantine_rows(store)
    copies = [
        {"file": c.name, "size": c.size, "time": iso(c.mtime_ms), "time_ms": c.mtime_ms}
        for c in report.damaged_copies
    ]
    compared = None
    if against is not None and not report.interrupted:  # Ctrl-C stops here too: report what was checked
        from mqctl.admin.client import run_admin

        if not against.rpartition(":")[2].isdigit():
            raise UsageError(f"bad --against {against!r}: expected HOST:PORT")
        # the context's TLS and credentials, as 'broker status -b' asks a broker by its address
        from mqctl.cli.common import cluster_target

        cluster_target()
        seconds = timeout if timeout is not None else request_timeout(5.0)
        compared = run_admin(
            [], lambda admin: si.compare_with(admin, store, against, max_listed=max_problems), timeout=seconds
        )
    if output in ("json", "yaml"):
        extra = {"against": plain(compared)} if compared is not None else {}
        render(
            {**plain(report), "damaged_copies": copies, "quarantined": plain(quarantined), **extra}, output
        )
    elif output == "table":  # the problems as rows of their own, under the summary
        summary = {k: v for k, v in plain(report).items() if k != "damaged_copies"}
        render({**summary, "problems": [{"problem": p} for p in report.problems]}, output)
        if copies:
            render(copies, output, title="damaged copies: files a broker found damaged and wrote again")
        if quarantined:
            render(
                quarantined, output, title="quarantined: set aside by recovery (see 'mqctl store salvage')"
            )
        if compared is not None:
            render(
                {**plain(compared), "differences": plain(compared.differences)},
                output,
                title=f"against {against}",
            )
    else:
        render(report, output)
        if compared is not None:
            render(compared.differences, output)
    if copies:
        names = ", ".join(c.name for c in report.damaged_copies)
        stderr_console().print(
            f"warning: {plural(len(copies), 'damaged copy', 'damaged copies')} beside the store ({names}): "
            f"{DAMAGED_COPIES}",
            style="yellow",
            markup=False,
        )
    if report.problems_not_listed:
        stderr_console().print(
            f"... and {plural(report.problems_not_listed, 'more problem')} (--max-problems N lists more)"
        )
    if quarantined:
        records = sum(max(q.records_set_aside, 0) for q in quarantined)
        stderr_console().print(
            f"{plural(len(quarantined), 'quarantine')} in {store}/quarantine "
            f"{'holds' if len(quarantined) == 1 else 'hold'} {plural(records, 'intact record')} recovery "
            "set aside; 'mqctl store salvage' extracts them"
        )
    if report.crc_errors or report.corrupt_files:
        stderr_console().print(
            "damaged CommitLog records stay where they are until a broker meets them: its start (or the "
            "first read of one) sets them aside under quarantine/, from where 'mqctl store salvage' takes "
            "the intact records"
        )
    for note in report.notes:
        why = " (queries skip them; the broker rebuilds such index files at start)" if "index" in note else ""
        stderr_console().print(f"note: {note}{why}")
    if compared is not None and compared.differences_not_listed:
        stderr_console().print(
            f"... and {plural(compared.differences_not_listed, 'more difference')} with {against} "
            "(--max-problems N lists more)"
        )
    if report.interrupted:
        raise Interrupted(f"interrupted {report.interrupted}: the report covers what was checked")
    if not report.ok:
        raise StoreError(f"store {store} has problems ({report.problems_found} found; see the report)")
    if compared is not None and not compared.ok:
        raise StoreError(
            f"store {store} differs from {against} from CommitLog offset {compared.first_difference} "
            f"({plural(compared.differing, 'record')} {'differs' if compared.differing == 1 else 'differ'}, "
            f"{compared.only_here} only here; see the report)"
        )


@app.command("salvage")
@cluster_options()
def salvage(
    store: StoreDirOpt,
    quarantine: Annotated[
        list[str] | None,
        typer.Option("--quarantine", help="Only this quarantine (a name 'store verify' lists; repeatable)."),
    ] = None,
    out: Annotated[
        str | None,
        typer.Option("--out", help="Write the intact records to this file as JSON lines ('-': stdout)."),
    ] = None,
    resend: Annotated[
        bool,
        typer.Option(
            "--resend", help="Send the intact records again through the cluster, as 'msg resend' does."
        ),
    ] = False,
    yes: YesOpt = False,
) -> None:
    """Extract the intact records from quarantined CommitLog data so they can be sent again.

    Recovery moves what it cuts (the tail after a damaged record, later files) to <store>/quarantine/
    instead of deleting it. Every record there that parses, names its own offset and passes its body CRC
    is salvaged; damaged bytes are skipped. Without --out or --resend: a plan per quarantined file
    (intact and damaged records, topics). --out writes one JSON object per record (topic, queue, tags,
    keys, properties, times, original offset, body as UTF-8 or base64 per body_encoding). --resend sends
    each to its topic (a delayed one to its real topic) keeping body, tags, keys, UNIQ_KEY and user
    properties, the original msgId in property MQCTL_SALVAGED_MSG_ID; transaction half/rollback records and
    system topics are skipped. Each record sent is recorded in the NameServer's KV store
    (MQCTL_SALVAGE_RESENT: original msgId -> the copy's), so a second run skips it, and 'msg query --id
    ORIGINAL' finds the copy. It asks first (off a terminal it needs --yes) and exits 8 when any record
    could not be sent. The quarantined files stay; the manifest records each re-send.
    A store with nothing quarantined has nothing to salvage: it says so and exits 0 (an empty plan, an
    empty --out file). Never touches the live store: safe while a broker runs on it.
    """
    from mqctl.output import render, stderr_console
    from mqctl.services import quarantine as qs

    if out is not None and resend:
        raise UsageError("give --out or --resend, not both")
    err = stderr_console()
    manifests = qs.chosen(store, quarantine or [])
    if not manifests:
        err.print(
            f"nothing needed salvaging: recovery set nothing aside in {store} (damage 'store verify' finds "
            "is set aside when a broker meets it: at its start, or the first read)"
        )
        if out is None:
            render([], flags().output)
        elif out != "-":
            Path(out).write_text("", encoding="utf-8")  # a script reading --out finds it, empty
        return
    if out is not None:
        write_salvaged(manifests, out)
        return
    if not resend:
        rows = qs.plan(manifests)
        output = flags().output
        render(rows, output, title="salvage plan" if output == "table" else None)
        intact = sum(r.intact for r in rows)
        damaged = sum(r.damaged for r in rows)
        err.print(
            f"{plural(intact, 'intact record')} ({damaged} damaged, skipped) in {plural(len(manifests), 'quarantine')}: "
            "--out FILE writes them as JSON lines, --resend sends them again"
        )
        return
    from mqctl.admin.client import run_admin

    items = [
        (m, offset, rec) for m, _p, offset, rec in qs.records(manifests) if isinstance(rec, qs.StoredMessage)
    ]
    if not items:
        err.print(
            f"no intact record in the {'quarantine' if len(manifests) == 1 else 'quarantines'}; nothing to re-send"
        )
        render([], flags().output)
        return
    target = cluster_target()
    before = [f"{m.name} on {m.resent[-1]['at']}" for m in manifests if m.resent]
    if before:
        err.print(
            f"already re-sent: {', '.join(before)}; records the NameServer's KV store lists as re-sent "
            "are skipped"
        )
    confirm(
        f"Re-send {plural(len(items), 'salvaged record')} from {plural(len(manifests), 'quarantine')} of {store} "
        "(those "
        "re-sent before are skipped)?",
        yes=yes,
    )
    with progress(len(items), "re-sending") as advance:
        outcomes = run_admin(
            target.namesrv,
            lambda admin: qs.resend(admin, items, progress=advance),
            timeout=request_timeout(5.0, target),
        )
    qs.note_resend(manifests, outcomes, int(time.time() * 1000))
    render(outcomes, flags().output)
    counts = {
        k: sum(o.outcome == k for o in outcomes) for k in ("RESENT", "ALREADY RESENT", "SKIPPED", "FAILED")
    }
    err.print(
        f"{counts['RESENT']} re-sent, {counts['ALREADY RESENT']} already re-sent before (not sent again), "
        f"{counts['SKIPPED']} skipped, {counts['FAILED']} failed"
    )
    if counts["FAILED"]:
        raise BrokerError(
            f"{plural(counts['FAILED'], 'salvaged record')} could not be sent (see the report)", code=1
        )


def write_salvaged(manifests: list[Any], out: str) -> None:
    """The intact records as JSON lines to ``out`` ('-': stdout); counts and damaged offsets on stderr."""
    from mqctl.interrupts import whole
    from mqctl.output import json_text, stderr_console
    from mqctl.services import quarantine as qs

    err = stderr_console()
    intact = 0
    damaged: list[int] = []
    missing: list[str] = []
    with contextlib.ExitStack() as stack:
        f = sys.stdout if out == "-" else stack.enter_context(open(out, "w", encoding="utf-8"))
        write = whole(f.write)
        for m, p, offset, rec in qs.records(manifests):
            if rec is None:
                missing.append(f"{m.name}/{p.file}")
            elif isinstance(rec, qs.StoredMessage):
                write(json_text(qs.as_json_line(m, p, offset, rec)) + "\n")
                intact += 1
            else:
                damaged.append(offset)
    shown = ", ".join(str(o) for o in damaged[:10]) + (" ..." if len(damaged) > 10 else "")
    err.print(
        f"salvaged {plural(intact, 'intact record')} to {'stdout' if out == '-' else out}; "
        f"{plural(len(damaged), 'damaged record')} skipped"
        + (f" (CommitLog offsets {shown})" if damaged else "")
    )
    for name in missing:
        err.print(f"missing: {name} (listed in the manifest, not on disk)")
