"""``mqctl completion bash|zsh|fish``: print the shell completion script (what ``completions/`` holds)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

app = typer.Typer()  # its help: NOUNS in mqctl.cli.app


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


@app.callback(invoke_without_command=True)
def completion(
    shell: Annotated[Shell, typer.Argument(help="The shell to print the script for.", show_default=False)],
) -> None:
    """Print the completion script for SHELL (the one 'make docs' writes to completions/).

    bash: source <(mqctl completion bash), or save it as
    ~/.local/share/bash-completion/completions/mqctl; zsh: save it as _mqctl in a directory of $fpath;
    fish: mqctl completion fish > ~/.config/fish/completions/mqctl.fish."""
    import sys

    from mqctl.docs import completion_script

    sys.stdout.write(completion_script(shell.value))
