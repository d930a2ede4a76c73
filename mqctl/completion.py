"""Shell completion: the bash, zsh and fish scripts' protocol, and topic, group and context names.

Completing ``--topic``/``--group`` reads the cache of the NameServers the command would use; when
the cache is older than :data:`FRESH_SECONDS` it starts a detached refresh (``python -m
mqctl.completion NAMESRV``) and answers from what it has, so a TAB costs no network round trip. With no
cache at all (the first TAB) it waits up to :data:`FIRST_WAIT` seconds for that refresh.

The committed scripts (``completions/``, written by ``mqctl.docs``) pass the command line up to the
cursor (:data:`LINE_VAR`), parsed here as the shell would: bash's own words split ``HOST:PORT`` at the
colon, which lost the noun after ``-n 127.0.0.1:9876``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FRESH_SECONDS = 60.0
#: What the cache holds: names by kind.
KINDS = ("topics", "groups", "clusters", "brokers")
#: Seconds the first TAB (no cache yet) waits for the names; a refresh still running then goes on alone.
FIRST_WAIT = 2.0
#: The variable the committed scripts pass the command line up to the cursor in.
LINE_VAR = "_MQCTL_COMPLETE_LINE"


def cache_path(namesrv: list[str]) -> Path:
    from platformdirs import user_cache_dir

    root = Path(os.environ.get("MQCTL_CACHE_DIR") or user_cache_dir("mqctl"))
    digest = hashlib.sha1(";".join(sorted(namesrv)).encode()).hexdigest()[:16]
    return root / f"names-{digest}.json"


def _target(params: dict[str, Any]) -> list[str]:
    from mqctl.config import resolve_target

    return resolve_target(namesrv_flag=params.get("namesrv"), context_flag=params.get("context")).namesrv


def _names(kind: str, params: dict[str, Any], incomplete: str) -> list[str]:
    try:
        namesrv = _target(params)
    except Exception:  # a half-typed command line must never break the shell
        return []
    path = cache_path(namesrv)
    cached = _read(path)
    if time.time() - float(cached.get("updated", 0)) > FRESH_SECONDS:
        refreshing = subprocess.Popen(
            [sys.executable, "-m", "mqctl.completion", ";".join(namesrv)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if not cached:  # the first TAB: an empty answer would look like a cluster without names
            try:
                refreshing.wait(FIRST_WAIT)
            except subprocess.TimeoutExpired:
                return []
            cached = _read(path)
    return [name for name in cached.get(kind, []) if name.startswith(incomplete)]


def complete_topic(ctx: Any, incomplete: str) -> list[str]:
    return _names("topics", ctx.params, incomplete)


def complete_group(ctx: Any, incomplete: str) -> list[str]:
    return _names("groups", ctx.params, incomplete)


def complete_broker(ctx: Any, incomplete: str) -> list[str]:
    return _names("brokers", ctx.params, incomplete)


def complete_cluster(ctx: Any, incomplete: str) -> list[str]:
    return _names("clusters", ctx.params, incomplete)


def complete_context(ctx: Any, incomplete: str) -> list[str]:
    """The saved contexts' names (a local file: no network)."""
    from mqctl.config import ContextFile

    try:
        names = ContextFile.load().contexts
    except Exception:  # a half-typed command line must never break the shell
        return []
    return [name for name in sorted(names) if name.startswith(incomplete)]


# ------------------------------------------------------------------------------- the shells' protocol


def line_args(line: str) -> tuple[list[str], str]:
    """A command line up to the cursor as (the arguments before the word completed, that word): the word
    is empty after a space. Quotes are read as the shell reads them, an unclosed one included."""
    from click.shell_completion import split_arg_string

    args = split_arg_string(line)[1:]
    if args and line[-1:] not in (" ", "\t"):
        return args[:-1], args[-1]
    return args, ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


BASH_SCRIPT = """\
# bash completion for %(prog_name)s, generated from the CLI by 'make docs' (python -m mqctl.docs).
# Source it, or install it as %(prog_name)s in a bash-completion completions directory.
%(complete_func)s() {
    local IFS=$'\\n' line="${COMP_LINE:0:COMP_POINT}" word prefix
    COMPREPLY=($(env %(line_var)s="$line" %(complete_var)s=complete_bash "$1" 2>/dev/null))
    # bash replaces only what follows a ':' in the word (COMP_WORDBREAKS): so do the answers
    word="${line##*[[:space:]]}"
    if [[ $word == *:* && $COMP_WORDBREAKS == *:* ]]; then
        prefix="${word%%"${word##*:}"}"
        COMPREPLY=("${COMPREPLY[@]#"$prefix"}")
    fi
    return 0
}

complete -o default -F %(complete_func)s %(prog_name)s
"""

ZSH_SCRIPT = """\
#compdef %(prog_name)s
# zsh completion for %(prog_name)s, generated from the CLI by 'make docs' (python -m mqctl.docs).
# Put it in a directory of $fpath before compinit runs, or source it after compinit.
%(complete_func)s() {
    local -a described
    (( $+commands[%(prog_name)s] )) || return 1
    described=("${(@f)$(env %(line_var)s="${(j: :)words[1,CURRENT-1]} $PREFIX" \\
        %(complete_var)s=complete_zsh %(prog_name)s 2>/dev/null)}")
    described=(${described:#})
    if (( ${#described} )); then
        _describe -t values %(prog_name)s described
    else
        _files
    fi
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    %(complete_func)s "$@"  # autoloaded by compinit: this TAB is the first call
else
    compdef %(complete_func)s %(prog_name)s
fi
"""


FISH_SCRIPT = """\
# fish completion for %(prog_name)s, generated from the CLI by 'make docs' (python -m mqctl.docs).
# Put it in a directory of $fish_complete_path (~/.config/fish/completions), or source it.
function %(complete_func)s
    set -l line (commandline -cp | string collect)
    set -l answers (env %(line_var)s="$line" %(complete_var)s=complete_fish %(prog_name)s 2>/dev/null)
    if test -z "$answers"
        __fish_complete_path (commandline -ct)  # nothing of mqctl's to offer: file names
        return
    end
    printf '%%s\\n' $answers
end

complete --command %(prog_name)s --no-files --arguments '(%(complete_func)s)'
"""


def install_shells() -> None:
    """Answer completion with mqctl's bash, zsh and fish classes (and Typer's protocol of
    ``complete_SHELL`` instructions). Defined here, not at import: a run that completes nothing never
    builds them."""
    import os

    from click.shell_completion import (
        BashComplete,
        CompletionItem,
        FishComplete,
        ZshComplete,
        add_completion_class,
    )
    from typer.completion import completion_init

    completion_init()

    class Bash(BashComplete):
        """Answers the committed bash script: one value a line."""

        source_template = BASH_SCRIPT

        def source(self) -> str:  # (click's asks the installed bash for its version first)
            return self.source_template % {**self.source_vars(), "line_var": LINE_VAR}

        def get_completion_args(self) -> tuple[list[str], str]:
            line = os.environ.get(LINE_VAR)
            if line is None:  # a script installed from an earlier mqctl: bash's own words
                return super().get_completion_args()
            return line_args(line)

        def format_completion(self, item: CompletionItem) -> str:
            return str(item.value)

    class Zsh(ZshComplete):
        """Answers the committed zsh script: ``value:help`` lines for ``_describe``."""

        source_template = ZSH_SCRIPT

        def source(self) -> str:
            return self.source_template % {**self.source_vars(), "line_var": LINE_VAR}

        def get_completion_args(self) -> tuple[list[str], str]:
            return line_args(os.environ.get(LINE_VAR, ""))

        def format_completion(self, item: CompletionItem) -> str:
            value = str(item.value).replace("\\", "\\\\").replace(":", "\\:")
            return f"{value}:{_one_line(item.help)}" if item.help else value

    class Fish(FishComplete):
        """Answers the committed fish script: ``value<TAB>help`` lines; a file name is the script's to
        complete (no line: it offers the file names when mqctl offers nothing)."""

        source_template = FISH_SCRIPT

        def source(self) -> str:
            return self.source_template % {**self.source_vars(), "line_var": LINE_VAR}

        def get_completion_args(self) -> tuple[list[str], str]:
            return line_args(os.environ.get(LINE_VAR, ""))

        def complete(self) -> str:
            args, incomplete = self.get_completion_args()
            items = self.get_completions(args, incomplete)
            return "\n".join(self.format_completion(item) for item in items if item.type == "plain")

        def format_completion(self, item: CompletionItem) -> str:
            return f"{item.value}\t{_one_line(item.help)}" if item.help else str(item.value)

    add_completion_class(Bash, "bash")
    add_completion_class(Zsh, "zsh")
    add_completion_class(Fish, "fish")


#: Seconds a refresh waits for each answer: a hung broker costs a TAB's cache one second, not a shell.
FETCH_TIMEOUT = 1.0


async def _fetch(namesrv: list[str], cached: dict[str, Any]) -> dict[str, Any]:
    """Topic, cluster and broker address names from the NameServer, group names from the brokers that
    answer (one that refuses, as another cluster's ACL does, or is down, is left out); what cannot be read
    keeps its cached names."""
    from daemon.remoting.client import RemotingClient
    from daemon.remoting.errors import RemotingError
    from mqctl.admin.client import Admin
    from mqctl.errors import MqctlError
    from mqctl.services.groups import list_groups

    data = {kind: cached.get(kind, []) for kind in KINDS}
    async with Admin(namesrv, timeout=FETCH_TIMEOUT) as admin:
        if isinstance(admin.client, RemotingClient):
            admin.client.connect_timeout = FETCH_TIMEOUT
        try:
            info = await admin.cluster_info()
            data["clusters"] = sorted(info.cluster_addr_table)
            data["brokers"] = sorted(
                {a for d in info.broker_addr_table.values() for a in d.broker_addrs.values()}
            )
            data["topics"] = await admin.topic_list()
            data["groups"] = [row["group"] for row in await list_groups(admin, cluster=None, system=False)]
        except (RemotingError, MqctlError):
            pass
    return data


def _read(path: Path) -> dict[str, Any]:
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def refresh(namesrv: list[str]) -> None:
    """Fetch topic and group names and replace the cache atomically. It never fails: names it cannot read
    stay as cached, and the cache is marked fresh either way, so the next TABs do not start another
    refresh at once."""
    from daemon.remoting.loop import run

    path = cache_path(namesrv)
    cached = _read(path)
    try:
        data = run(_fetch(namesrv, cached))
    except Exception:  # a broken refresh must never cost the shell anything
        data = {kind: cached.get(kind, []) for kind in KINDS}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"updated": time.time(), **data}), encoding="utf-8")
    tmp.replace(path)


if __name__ == "__main__":
    refresh(sys.argv[1].split(";"))
