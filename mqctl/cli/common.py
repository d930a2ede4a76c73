"""Options shared by every command, so that each flag has one meaning across the tool."""

from __future__ import annotations

from typing import Annotated

import typer

from mqctl.output import FORMATS

OutputOpt = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        help=f"Output format: {', '.join(FORMATS)}.",
        envvar="MQCTL_OUTPUT",
        click_type=__import__("click").Choice(FORMATS),
    ),
]
NamesrvOpt = Annotated[
    str | None,
    typer.Option("--namesrv", "-n", help="NameServer list HOST:PORT[;HOST:PORT] (beats context and env)."),
]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context", help="Use this saved context instead of the current one."),
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
