"""``mqctl apply -f FILE``: recreate a cluster's metadata from ``mqctl export`` (or mqadmin exportMetadata)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from mqctl.cli.common import ClusterOpt, ExecuteOpt, ExistingPath, YesOpt, cluster_options, confirm, online

app = typer.Typer()  # its help: NOUNS in mqctl.cli.app


def _renames(pairs: list[str] | None) -> dict[str, str]:
    from mqctl.errors import UsageError

    out = {}
    for pair in pairs or []:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise UsageError(f"bad --map-broker {pair!r}: expected FILE_NAME=TARGET_NAME")
        out[old] = new
    return out


@app.callback(invoke_without_command=True)
@cluster_options()
def apply(
    file: Annotated[
        Path,
        typer.Option(
            "--file",
            "-f",
            click_type=ExistingPath(dir_okay=False),
            help="'mqctl export' YAML/JSON, or mqadmin's JSON.",
        ),
    ],
    cluster: ClusterOpt = None,
    execute: ExecuteOpt = False,
    offsets: Annotated[
        bool,
        typer.Option(
            "--offsets", help="Also commit the file's offsets (only for groups with no live consumer)."
        ),
    ] = False,
    map_broker: Annotated[
        list[str] | None,
        typer.Option(
            "--map-broker", help="FILE_NAME=TARGET_NAME: the file's broker is this master (repeatable)."
        ),
    ] = None,
    yes: YesOpt = False,
) -> None:
    """Plan creating or updating the file's topics and groups on each master, per broker; --execute applies
    it (twice changes nothing). Brokers are matched by name; mqadmin's files go to every master. ACL
    accounts are compared, not written: the file has no secrets."""
    from mqctl.cli.common import name_problem, new_group_problem
    from mqctl.output import stderr_console
    from mqctl.services.metadata import apply as apply_metadata, load

    meta = load(
        file, lambda kind, name: new_group_problem(name) if kind == "group" else name_problem(kind, name)
    )
    renames = _renames(map_broker)
    if meta.offsets and not offsets:
        stderr_console().print("note: the file's consumer offsets are left alone; --offsets applies them")
    if execute and offsets and meta.offsets:
        confirm("Commit the file's consumer offsets on the target cluster?", yes=yes)
    if not execute:
        stderr_console().print("plan only: nothing changed; add --execute to apply it")

    def applied(rows: Sequence[object]) -> None:
        """Before the failure's message: what had been written (the file can be applied again)."""
        from mqctl.cli.common import flags
        from mqctl.output import render

        if not rows:
            stderr_console().print("nothing was applied before the failure")
            return
        stderr_console().print("applied before the failure (nothing after it was):")
        render(list(rows), flags().output)

    online(
        lambda admin: apply_metadata(
            admin,
            meta,
            cluster=cluster,
            renames=renames,
            offsets=offsets,
            dry_run=not execute,
            note=lambda text: stderr_console().print(f"note: {text}"),
            applied=applied,
        ),
        changes=True,
    )
