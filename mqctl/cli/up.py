"""``mqctl up``: a local NameServer and Broker on embedded defaults, in the foreground."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Run a local NameServer and Broker on embedded defaults (Ctrl-C stops both).")


@app.callback(invoke_without_command=True)
def up(
    data: Annotated[Path | None, typer.Option("--data", help="Data dir (default: the user data dir).")] = None,
) -> None:
    """Run a local NameServer and Broker in the foreground until Ctrl-C."""
    import signal

    from mqctl.config import data_dir
    from mqctl.output import stderr_console

    root = data or data_dir()
    console = stderr_console()
    console.print(f"would start: NameServer 127.0.0.1:9876 and Broker 127.0.0.1:10911, data in {root}")
    console.print("the daemons are not built yet; waiting for Ctrl-C")
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
