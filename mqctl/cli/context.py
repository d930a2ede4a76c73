"""``mqctl context``: named NameServer lists, like kubectl and nats contexts."""

from __future__ import annotations

from typing import Annotated

import typer

from mqctl.cli.common import OutputOpt

app = typer.Typer(help="Save and switch between NameServer contexts.", no_args_is_help=True)


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Context name.")],
    namesrv: Annotated[str, typer.Option("--namesrv", "-n", help="NameServer list HOST:PORT[;HOST:PORT].")],
    use: Annotated[bool, typer.Option("--use", help="Make it the current context.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing context of that name.")] = False,
    output: OutputOpt = "table",
) -> None:
    """Save a context."""
    from mqctl.config import ContextFile
    from mqctl.output import render

    contexts = ContextFile.load()
    context = contexts.add(name, namesrv, overwrite=force)
    if use:
        contexts.current = name
    contexts.save()
    render({"added": context.name, "namesrv": context.namesrv, "current": contexts.current}, output)


@app.command("use")
def use(name: Annotated[str, typer.Argument(help="Context name.")], output: OutputOpt = "table") -> None:
    """Make a context the current one."""
    from mqctl.config import ContextFile
    from mqctl.output import render

    contexts = ContextFile.load()
    previous = contexts.current
    contexts.current = contexts.get(name).name
    contexts.save()
    render({"current": name, "previous": previous}, output)


@app.command("ls")
def ls(output: OutputOpt = "table") -> None:
    """List saved contexts; the current one is marked."""
    from mqctl.config import ContextFile
    from mqctl.output import render

    contexts = ContextFile.load()
    render(
        [{"name": c.name, "namesrv": c.namesrv, "current": c.name == contexts.current} for c in contexts.contexts.values()],
        output,
    )


@app.command("rm")
def rm(
    name: Annotated[str, typer.Argument(help="Context name.")],
    if_exists: Annotated[bool, typer.Option("--if-exists", help="Succeed when it is already gone.")] = False,
    output: OutputOpt = "table",
) -> None:
    """Delete a saved context."""
    from mqctl.config import ContextFile
    from mqctl.output import render

    contexts = ContextFile.load()
    if if_exists and name not in contexts.contexts:
        render({"removed": None, "namesrv": None}, output)
        return
    removed = contexts.remove(name)
    contexts.save()
    render({"removed": removed.name, "namesrv": removed.namesrv}, output)


@app.command("current")
def current(output: OutputOpt = "table") -> None:
    """Show where online commands will connect, and why."""
    from mqctl.config import resolve_target
    from mqctl.output import render

    target = resolve_target(namesrv_flag=None, context_flag=None)
    render({"namesrv": ";".join(target.namesrv), "source": target.source}, output)
