"""``mqctl check``: health checks for Nagios, Icinga and friends.

Unlike every other command, ``check`` exits with the monitoring plugin convention, not mqctl's own codes:
0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; a NameServer that does not answer, and a bad flag, are UNKNOWN.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mqctl.cli.common import BrokerAddrOpt, ClusterOpt, GroupOpt, OutputOpt, cluster_options, flags

if TYPE_CHECKING:
    from mqctl.admin.client import Admin
    from mqctl.services.checks import Verdict
    from mqctl.tls import TlsOptions

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app

WarnOpt = Annotated[int, typer.Option("--warn", "-w", min=0, help="WARNING above this many.")]
CritOpt = Annotated[int, typer.Option("--crit", min=0, help="CRITICAL above this many.")]


def _emit(verdict: Verdict, output: str, taken_at_ms: int | None) -> None:
    """One verdict; a ``--watch`` one (``taken_at_ms``: when its reads began) as a JSON line with its time."""
    from mqctl.interrupts import whole_output
    from mqctl.output import json_text, render
    from mqctl.units import time_fields

    with whole_output:  # a --watch stopped by Ctrl-C ends on a whole line
        if output == "table":
            typer.echo(verdict.line())
        elif taken_at_ms is not None and output == "json":
            typer.echo(json_text(time_fields("taken_at", taken_at_ms) | verdict.as_dict()))
        else:
            render(verdict.as_dict(), output)


def _run(name: str, work: Callable[[Admin], Awaitable[Verdict]], *, check_args: str | None = None) -> None:
    """Run ``work`` once, or every ``--watch`` seconds until Ctrl-C, print each verdict, and exit with the
    last one's state; whatever goes wrong on the way (no NameServer, a timeout) is UNKNOWN."""
    import time

    from mqctl.admin.client import run_admin
    from mqctl.cli.common import cluster_target, request_timeout
    from mqctl.services.checks import State, Verdict, unknown, worst
    from mqctl.services.fanout import collecting

    shared = flags()

    def once() -> Verdict:
        if check_args is not None:
            return Verdict(name, State.UNKNOWN, check_args)
        try:
            target = cluster_target()
            with collecting() as failed:
                verdict = run_admin(target.namesrv, work, timeout=request_timeout(5.0, target))
        except Exception as exc:  # every failure is the plugin's UNKNOWN, on one line
            return unknown(name, exc)
        if failed:  # judged on what some brokers said: not OK, whatever the figures
            verdict.state = worst([verdict.state, State.UNKNOWN])
            verdict.problems += [f.describe() for f in failed]
            verdict.summary += "; not read: " + "; ".join(f.describe() for f in failed)
        return verdict

    def stamp() -> int | None:
        return None if shared.watch is None else int(time.time() * 1000)

    taken_at_ms = stamp()
    verdict = once()
    _emit(verdict, shared.output, taken_at_ms)
    if shared.watch is not None:
        try:
            while True:
                time.sleep(shared.watch)
                taken_at_ms = stamp()
                verdict = once()
                _emit(verdict, shared.output, taken_at_ms)
        except KeyboardInterrupt:
            pass
    raise typer.Exit(int(verdict.state))


def _used_ratio(text: str | None, flag: str) -> float | None:
    """``90``, ``90%`` (percent, as the perfdata and diskMaxUsedSpaceRatio) or, as before, a ratio up to 1
    without ``%`` (``0.9``; ``1``: full, as it meant) -> the used ratio; ValueError naming ``flag`` else."""
    if text is None:
        return None
    value = text.strip()
    percent = value.endswith("%")
    try:
        number = float(value.removesuffix("%").strip())
    except ValueError:
        number = math.nan
    if not 0 <= number <= 100:  # NaN too
        raise ValueError(f"bad {flag} {text!r}: give a percent from 0 to 100 (90 or 90%)")
    return number if not percent and 0 < number <= 1 else number / 100


def _order(warn: float, crit: float) -> str | None:
    return None if warn <= crit else f"--warn {warn:g} is above --crit {crit:g}"


@app.command("lag")
@cluster_options(watch=True)
def lag(
    group: GroupOpt,
    warn: WarnOpt = 1000,
    crit: CritOpt = 10000,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Only this topic's queues.")] = None,
) -> None:
    """A consumer group's total lag (messages not yet consumed) against --warn/--crit.

    A queue the group never committed on, where its consumer's consumeFromWhere decides the start, has no
    lag to count (group progress shows it: lag '-'): left out, and counted in the perfdata entry
    uncounted_queues with the other queues of unknown lag (as in group list --progress and group show).
    Such queues holding messages are a WARNING, counted in the perfdata entry uncounted_holding; but not
    for a BROADCASTING group (as its online consumers say): they keep its offsets, so every queue reads as
    never committed on. Queues of a broker whose offsets could not be read are named unknown, not never
    committed on. A group the brokers hold that never committed (created, never consumed) is OK: lag 0,
    no offsets yet."""
    from mqctl.services.checks import lag as check_lag

    _run(
        "lag",
        lambda admin: check_lag(admin, group, topic=topic, warn=warn, crit=crit),
        check_args=_order(warn, crit),
    )


@app.command("dlq")
@cluster_options(watch=True)
def dlq(group: GroupOpt, warn: WarnOpt = 0, crit: CritOpt = 100) -> None:
    """Dead letters of a group not yet re-sent ('msg resend --execute') against --warn/--crit."""
    from mqctl.services.checks import dlq as check_dlq

    _run("dlq", lambda admin: check_dlq(admin, group, warn=warn, crit=crit), check_args=_order(warn, crit))


@app.command("cluster")
@cluster_options(watch=True)
def cluster(
    cluster: ClusterOpt = None,
    clock_warn: Annotated[
        float | None,
        typer.Option(
            "--clock-warn",
            min=0.0,
            help="WARNING when a broker's or NameServer's clock is off this host's, or a broker group's members' "
            "off each other's, by more than this many seconds, beyond the request's round trip (default 2; "
            "0: clocks are not checked, as for RocketMQ's daemons, which do not report theirs: UNKNOWN "
            "otherwise).",
        ),
    ] = None,
) -> None:
    """Every broker the NameServer lists answers, and every broker group has a master: CRITICAL when one is
    down, UNKNOWN when one refuses to say (ACL); WARNING for quarantined data, an ACL that differs within a
    group, a DLedger group with fewer members registered than its leader counts, and a clock off by more
    than --clock-warn."""
    from mqctl.services.checks import CLOCK_SKEW_WARN, cluster as check_cluster

    warn = CLOCK_SKEW_WARN if clock_warn is None else clock_warn
    _run("cluster", lambda admin: check_cluster(admin, cluster_name=cluster, clock_warn=warn))


@app.command("disk")
@cluster_options(watch=True)
def disk(
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    warn: Annotated[
        str | None,
        typer.Option(
            "--warn",
            "-w",
            metavar="PERCENT",
            help="WARNING above this percent used, 0-100: 90 or 90% (default: the broker's "
            "diskMaxUsedSpaceRatio). Up to 1 without % (0.9, 1) is still read as a ratio; 1% is one percent.",
        ),
    ] = None,
    crit: Annotated[
        str | None,
        typer.Option(
            "--crit",
            metavar="PERCENT",
            help="CRITICAL above this percent used, as --warn (default: the broker's "
            "diskSpaceCleanForciblyRatio).",
        ),
    ] = None,
) -> None:
    """Each broker's CommitLog disk usage against its retention watermarks, in percent as its perfdata and
    the broker's own watermarks (diskMaxUsedSpaceRatio=75 is 75 %)."""
    from mqctl.services.checks import disk as check_disk

    marks: dict[str, float | None] = {}
    bad: str | None = None
    try:
        marks = {flag: _used_ratio(value, flag) for flag, value in (("--warn", warn), ("--crit", crit))}
    except ValueError as exc:
        bad = str(exc)
    w, c = marks.get("--warn"), marks.get("--crit")
    if bad is None and w is not None and c is not None and w > c:
        bad = f"--warn {warn} ({w * 100:g}%) is above --crit {crit} ({c * 100:g}%)"
    _run(
        "disk",
        lambda admin: check_disk(admin, cluster_name=cluster, broker=broker, warn=w, crit=c),
        check_args=bad,
    )


@app.command("ha")
@cluster_options(watch=True)
def ha(
    cluster: ClusterOpt = None,
    min_slaves: Annotated[
        int, typer.Option("--min-slaves", min=0, help="CRITICAL when a broker group has fewer slaves.")
    ] = 0,
    warn_bytes: Annotated[
        int, typer.Option("--warn-bytes", min=0, help="WARNING when a slave is more bytes behind.")
    ] = 16 * 1024 * 1024,
    crit_bytes: Annotated[
        int, typer.Option("--crit-bytes", min=0, help="CRITICAL when a slave is more bytes behind.")
    ] = 256 * 1024 * 1024,
    warn_seconds: Annotated[
        float, typer.Option("--warn-seconds", min=0, help="WARNING when the slowest slave is more s behind.")
    ] = 10.0,
    crit_seconds: Annotated[
        float, typer.Option("--crit-seconds", min=0, help="CRITICAL when the slowest slave is more s behind.")
    ] = 60.0,
) -> None:
    """Replication: every slave connected to its master, and its lag in bytes and seconds; a SYNC_MASTER
    with no slave is CRITICAL, a DLedger group with a member gone a WARNING."""
    from mqctl.services.checks import ha as check_ha

    bad = _order(warn_bytes, crit_bytes) or _order(warn_seconds, crit_seconds)
    _run(
        "ha",
        lambda admin: check_ha(
            admin,
            cluster_name=cluster,
            min_slaves=min_slaves,
            warn_bytes=warn_bytes,
            crit_bytes=crit_bytes,
            warn_seconds=warn_seconds,
            crit_seconds=crit_seconds,
        ),
        check_args=bad,
    )


@app.command("cert")
def cert(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="PEM certificate files, or directories: each *.pem in them (or --connect)."),
    ] = None,
    connect: Annotated[
        str | None,
        typer.Option(
            "--connect",
            metavar="HOST:PORT",
            help="Read the chain a live server presents over TLS instead, and say whether it verifies "
            "against --ca (else the context's CA, else the system's), host name checked.",
        ),
    ] = None,
    ca: Annotated[
        str | None,
        typer.Option(
            "--ca", help="With --connect: the PEM CA the chain must verify against (beats the context's)."
        ),
    ] = None,
    warn: Annotated[
        int,
        typer.Option("--warn", "-w", min=0, help="WARNING when a certificate ends within this many days."),
    ] = 30,
    crit: Annotated[
        int,
        typer.Option("--crit", min=0, help="CRITICAL when one ends within this many days (or has ended)."),
    ] = 7,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="With --connect: seconds for each connection.")
    ] = 5.0,
    output: OutputOpt = "table",
) -> None:
    """The certificates a host's daemons serve (tls.server.certPath, 'tls init's files), read from disk,
    or (--connect) the chain a server presents: days left to each one's end against --warn/--crit
    (below them: WARNING, CRITICAL); a chain that does not verify is CRITICAL."""
    from mqctl.services.checks import State, Verdict, unknown

    if crit > warn:
        verdict = Verdict("cert", State.UNKNOWN, f"--crit {crit} is above --warn {warn} (days left)")
    elif bool(paths) == (connect is not None):
        verdict = Verdict(
            "cert", State.UNKNOWN, "give certificate files or --connect HOST:PORT (one of the two)"
        )
    elif ca is not None and connect is None:
        verdict = Verdict("cert", State.UNKNOWN, "--ca goes with --connect (files are read, not verified)")
    else:
        from mqctl.services.certs import check as check_certs, check_connect

        try:
            if connect is not None:
                trust, source, client = _trust(ca)
                verdict = check_connect(
                    connect, ca=trust, ca_source=source, client=client, warn=warn, crit=crit, timeout=timeout
                )
            else:
                verdict = check_certs(paths or [], warn=warn, crit=crit)
        except Exception as exc:  # every failure is the plugin's UNKNOWN, on one line
            verdict = unknown("cert", exc)
    _emit(verdict, output, None)
    raise typer.Exit(int(verdict.state))


def _trust(ca: str | None) -> tuple[str | None, str, TlsOptions | None]:
    """What ``check cert --connect`` verifies against, and says it did: ``--ca``, the root's ``--ca``, the
    CA of the context in force (``--context``, else the current one), else the system's CAs; and the
    client certificate in force (a server that requires one)."""
    import click

    from mqctl import tls
    from mqctl.config import context_in_force

    root = click.get_current_context().find_root().params
    given = tls.chosen()  # the root's TLS flags: no context is chosen yet
    context = context_in_force(root.get("context"))
    in_force = given[0] if given is not None else context.tls if context is not None else None
    if ca is not None:
        return ca, f"--ca {ca}", in_force
    if given is not None and given[0] is not None and given[0].ca:
        return given[0].ca, f"--ca {given[0].ca}", in_force
    if context is not None and context.tls is not None and context.tls.ca:
        return context.tls.ca, f"context {context.name}'s CA {context.tls.ca}", in_force
    return None, "the system's CAs", in_force
