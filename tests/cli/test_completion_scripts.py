"""The committed bash and zsh completions, run by the shells themselves against the real ``mqctl``.

bash runs its completion function as readline would call it (``COMP_LINE``/``COMP_POINT`` and the
``COMP_WORDS``/``COMP_CWORD`` bash splits at ``:``); zsh loads ``_mqctl`` from ``$fpath`` as compinit
does, with ``_describe`` and ``_files`` standing in for the completion system's output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemons import LocalCluster, local_cluster
from tests.support.cli import RunCli, clean_env
from tests.support.paths import ROOT

COMPLETIONS = ROOT / "completions"
NOUNS = {"topic", "group", "offset", "broker", "cluster", "msg", "context", "up"}

#: What bash would hand the completion function for a line typed up to the cursor.
BASH = r"""
source "$SCRIPT"
COMP_LINE=$1
COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "${COMP_LINE//:/ : }"
[[ $COMP_LINE == *' ' ]] && COMP_WORDS+=('')
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
_mqctl_completion mqctl
printf '%s\n' "${COMPREPLY[@]}"
"""

#: compinit's finding of ``_mqctl`` in $fpath and its first TAB, with the completion system's outputs
#: printed (``_describe``'s ``value:help`` entries, ``_files`` as FILES).
ZSH = r"""
fpath=("$COMPLETIONS" $fpath)
autoload -Uz compinit && compinit -u -D
print -r -- "registered:${_comps[mqctl]}"
_describe() { print -rl -- "${(@P)${@[-1]}}" }
_files() { print -r -- FILES }
words=("${(@z)1}")
[[ $1 == *' ' ]] && words+=('')
CURRENT=${#words}
PREFIX=${words[-1]}
${_comps[mqctl]}
"""


@pytest.fixture
def shell_env(tmp_path: Path) -> dict[str, str]:
    """An ``mqctl`` on PATH that runs this tree, with its own config and name cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "mqctl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mqctl "$@"\n')
    shim.chmod(0o755)
    env = clean_env(tmp_path)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env["MQCTL_CACHE_DIR"] = str(tmp_path / "cache")
    return env


def bash_complete(env: dict[str, str], line: str) -> list[str]:
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", BASH, "bash", line],
        env={**env, "SCRIPT": str(COMPLETIONS / "mqctl.bash")},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return [word for word in done.stdout.splitlines() if word]


def shell_lines(env: dict[str, str], *argv: str) -> list[str]:
    """What a shell run with the committed completions in ``$COMPLETIONS`` printed, line by line."""
    done = subprocess.run(
        argv,
        env={**env, "COMPLETIONS": str(COMPLETIONS)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("completion")) as running:
        yield running


@pytest.mark.slow
def test_bash_completes_nouns_commands_options_and_values(
    shell_env: dict[str, str], cli: RunCli, cluster: LocalCluster
) -> None:
    """``mqctl <TAB>`` lists the nouns, ``mqctl topic <TAB>`` its commands; a NameServer given as
    HOST:PORT (which bash splits at the colon) no longer made the next words complete as nouns; the
    first TAB of a name (no cache yet) lists the cluster's names, and contexts complete by name."""
    namesrv = cluster.namesrv_addr
    assert cli("topic", "create", "-t", "CompletedTopic", "-n", namesrv).code == 0
    assert set(bash_complete(shell_env, "mqctl ")) >= NOUNS
    assert set(bash_complete(shell_env, "mqctl to")) == {"topic", "top"}
    topic_commands = {"create", "update", "delete", "list", "show", "route", "status"}
    assert topic_commands <= set(bash_complete(shell_env, "mqctl topic "))
    assert topic_commands <= set(bash_complete(shell_env, f"mqctl -n {namesrv} topic "))
    assert "--topic" in bash_complete(shell_env, "mqctl topic show --")
    assert bash_complete(shell_env, "mqctl -o j") == ["json"]
    assert bash_complete(shell_env, f"mqctl -n {namesrv} topic show --topic Comp") == ["CompletedTopic"]
    # a broker address replaces only what follows the colon, as bash splits the word
    host, port = cluster.broker_addr.split(":")
    assert bash_complete(shell_env, f"mqctl -n {namesrv} broker config get -b {host}:") == [port]
    assert cli("context", "add", "staging", "-n", namesrv).code == 0  # (the same config dir)
    assert bash_complete(shell_env, "mqctl context use st") == ["staging"]
    assert bash_complete(shell_env, "mqctl --context ") == ["staging"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_finds_the_completion_in_fpath_and_answers_the_first_tab(shell_env: dict[str, str]) -> None:
    """The committed _mqctl began with an empty line, so compinit did not read its ``#compdef`` and
    ``mqctl <TAB>`` listed files; sourced, the first TAB only registered the function."""

    def zsh(line: str) -> list[str]:
        return shell_lines(shell_env, "zsh", "-f", "-c", ZSH, "zsh", line)

    first, *answers = zsh("mqctl ")
    assert first == "registered:_mqctl"
    listed = {re.sub(r"(?<!\\):.*", "", answer) for answer in answers}
    assert listed >= NOUNS and "FILES" not in listed
    assert any(answer.startswith("context:") and "context" in answer.lower() for answer in answers)
    _, *commands = zsh("mqctl topic ")
    assert {"create", "list", "show"} <= {re.sub(r"(?<!\\):.*", "", c) for c in commands}
    _, *formats = zsh("mqctl -o ")
    assert [f.partition(":")[0] for f in formats] == ["table", "wide", "json", "yaml", "csv"]


#: fish finding mqctl.fish in $fish_complete_path, as it autoloads a command's completions, and
#: completing a line as at a TAB (``complete -C``): ``value<TAB>description`` lines.
FISH = r"""
set -p fish_complete_path $COMPLETIONS
complete -C $argv[1]
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (apt-get install fish)")
def test_fish_completes_nouns_commands_options_and_the_cluster_s_names(
    shell_env: dict[str, str], cli: RunCli, cluster: LocalCluster
) -> None:
    """fish had Typer's generated completion while bash and zsh had mqctl's: the same answers now, with
    each noun's and option's help as fish's description, names from the live cluster, and file names
    where mqctl offers nothing."""

    def fish(line: str) -> dict[str, str]:
        answers = shell_lines(shell_env, "fish", "--no-config", "-c", FISH, line)
        return {value: about for value, _, about in (answer.partition("\t") for answer in answers)}

    namesrv = cluster.namesrv_addr
    assert cli("topic", "create", "-t", "FishTopic", "-n", namesrv).code == 0
    nouns = fish("mqctl ")
    assert set(nouns) >= NOUNS and "topic" in nouns["topic"].lower()
    assert set(fish("mqctl to")) == {"topic", "top"}
    assert {"create", "list", "show"} <= set(fish(f"mqctl -n {namesrv} topic "))
    assert "--topic" in fish("mqctl topic show --")
    assert list(fish("mqctl -o j")) == ["json"]
    assert list(fish(f"mqctl -n {namesrv} topic show --topic Fish")) == ["FishTopic"]
    assert list(fish(f"mqctl -n {namesrv} broker config get -b {cluster.broker_addr[:-1]}")) == [
        cluster.broker_addr
    ]
    assert cli("context", "add", "staging", "-n", namesrv).code == 0
    assert list(fish("mqctl context use st")) == ["staging"]
    assert "completions/" in fish("mqctl store verify --store comp")  # a directory: fish's own file names
