"""ACL credentials of one mqctl invocation, resolved once: every request it sends is signed with them.

Precedence, highest first, each source a whole pair (an access key and its secret from the same one):

1. the global flags ``--access-key`` with ``--secret-key`` or ``--secret-key-file`` (not both);
2. the variables ``MQCTL_ACCESS_KEY`` with ``MQCTL_SECRET_KEY`` or ``MQCTL_SECRET_KEY_FILE`` (not both);
3. the context in force (its secret lives in a file only its owner may read), but only where it is safe
   to send: to its own NameServers (and the brokers they route to), or over its TLS with its own CA.

RocketMQ 4.x signatures carry no nonce and no time a 4.9.8 server checks: a host that collects one can
replay it against the real cluster. So a context's key is not sent to NameServers ``-n`` or
``$MQCTL_NAMESRV`` named beyond the context's own list unless the context's CA vouches for them (a
certificate of that CA, host name checked); there requests go unsigned and one warning says so.
``--sign`` (or a pair given by flag or variable, the operator's own choice) signs anyway.

A secret key file is read as a context's is: its first line, refused when others may read it. The file
forms keep the secret out of ``ps``, the shell's history and the environment of every child process. No
credentials: requests go unsigned, as to a broker without ACL.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mqctl.errors import LocalPermissionError, NotFoundError, UsageError

if TYPE_CHECKING:
    from daemon.acl.signature import Signer


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    source: str
    secret_file: str | None = None
    """The file the secret was read from (None: given inline), for a reader elsewhere to read it too."""

    def __repr__(self) -> str:
        return f"Credentials(access_key={self.access_key!r}, source={self.source!r})"

    def signer(self) -> Signer:
        """Signs every request; admin ones with a timestamp, a nonce and their code (`aclAdminFreshness`)."""
        from daemon.acl.plain import ADMIN_CODES
        from daemon.acl.signature import Signer

        return Signer(self.access_key, self.secret_key, fresh_codes=frozenset(int(c) for c in ADMIN_CODES))


_state: dict[str, Credentials | None] = {"flags": None, "context": None}
#: Why the context's pair was withheld from this invocation's NameServers (None: it was not), and the
#: warning that said so last.
_withheld: dict[str, str | None] = {"why": None, "warned": None}
#: ``--sign`` given: the context's key goes wherever ``-n`` points.
_sign = {"anywhere": False}


def pair(
    access_key: str | None, secret_key: str | None, source: str, secret_file: str | None = None
) -> Credentials | None:
    """A key pair given somewhere (``source`` names it in errors; ``secret_file``: where the secret was
    read from); None when neither half is."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise UsageError(f"{source}: an access key needs its secret key and the other way round")
    return Credentials(access_key, secret_key, source, secret_file)


def given_pair(
    access_key: str | None,
    secret_key: str | None,
    secret_key_file: str | None,
    source: str,
    secret_names: tuple[str, str],
) -> Credentials | None:
    """An access key with its secret given inline or as a file (``secret_names``: how those two are spelled,
    for the error); None when none is."""
    if secret_key and secret_key_file:
        raise UsageError(f"give {secret_names[0]} or {secret_names[1]}, not both")
    secret = read_secret(Path(secret_key_file)) if secret_key_file else secret_key
    return pair(access_key, secret, source, secret_key_file or None)


def set_flags(
    access_key: str | None, secret_key: str | None, secret_key_file: str | None = None, *, sign: bool = False
) -> None:
    """Record the global flags (the root command calls this once)."""
    _state["flags"] = given_pair(
        access_key,
        secret_key,
        secret_key_file,
        "--access-key/--secret-key",
        ("--secret-key", "--secret-key-file"),
    )
    _state["context"] = None  # a context chosen by an earlier invocation in this process is not this one's
    _withheld.update(why=None, warned=None)
    _sign["anywhere"] = sign


@contextmanager
def signing_as(credentials: Credentials | None) -> Iterator[None]:
    """``credentials`` in force for the block, as if given by flag (a Spark task's, from its options:
    a refusal's hint then says whether anything signed)."""
    saved = _state["flags"]
    _state["flags"] = credentials
    try:
        yield
    finally:
        _state["flags"] = saved


@contextmanager
def context_signing(name: str, access_key: str | None, secret_key_file: str | None) -> Iterator[None]:
    """A context's credentials in force for the block (below flags and variables, as ever), then what was."""
    saved = _state["context"], _withheld["why"]
    use_context(name, access_key, secret_key_file)
    try:
        yield
    finally:
        _state["context"], _withheld["why"] = saved


def sign_anywhere(on: bool) -> None:
    """``--sign`` (the Spark source's ``sign`` option): the context's key goes wherever ``-n`` points."""
    _sign["anywhere"] = on


def signs_anywhere() -> bool:
    """Whether ``--sign`` (or :func:`sign_anywhere`) is in force."""
    return _sign["anywhere"]


def use_context(name: str, access_key: str | None, secret_key_file: str | None) -> None:
    """Record the credentials of the context that chose the NameServers (read lazily: only a command
    that connects needs the secret)."""
    _state["context"] = None
    _withheld["why"] = None
    if access_key and secret_key_file:
        secret = read_secret(Path(secret_key_file))
        _state["context"] = Credentials(access_key, secret, f"context {name}", secret_key_file)
    elif access_key or secret_key_file:
        raise UsageError(
            f"context {name} has an incomplete credential; re-add it with --access-key and a secret"
        )


def withhold_context(why: str, warning: str) -> None:
    """Send the context's pair nowhere in this invocation (``why``: for ``--print-config`` and a refusal's
    hint); ``warning`` goes to stderr once when nothing else signs. ``--sign`` keeps the pair."""
    if _sign["anywhere"] or _state["context"] is None:
        return
    _state["context"] = None
    _withheld["why"] = why
    if _withheld["warned"] != warning and current() is None:
        _withheld["warned"] = warning
        import sys

        from mqctl.output import printable

        sys.stderr.write(f"mqctl: warning: {printable(warning, newlines=False)}\n")


def withheld() -> str | None:
    """Why the context's pair was not sent (see :func:`withhold_context`), or None."""
    return _withheld["why"]


def current() -> Credentials | None:
    """The credentials in force (see the module docstring)."""
    if _state["flags"] is not None:
        return _state["flags"]
    env = from_env()
    return env if env is not None else _state["context"]


def from_env() -> Credentials | None:
    """``$MQCTL_ACCESS_KEY`` with ``$MQCTL_SECRET_KEY`` or ``$MQCTL_SECRET_KEY_FILE``, or None."""
    return given_pair(
        os.environ.get("MQCTL_ACCESS_KEY"),
        os.environ.get("MQCTL_SECRET_KEY"),
        os.environ.get("MQCTL_SECRET_KEY_FILE"),
        "$MQCTL_ACCESS_KEY",
        ("$MQCTL_SECRET_KEY", "$MQCTL_SECRET_KEY_FILE"),
    )


def read_secret(path: Path) -> str:
    """A secret key file's first line; refused when others may read it (as ssh refuses a key)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):  # exit 3, as every file not found
        raise NotFoundError(f"secret key file {path}: no such file") from None
    except PermissionError as exc:
        raise LocalPermissionError(f"cannot read secret key file {path}: {exc.strerror}") from None
    except OSError as exc:
        raise UsageError(f"cannot read secret key file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise UsageError(f"secret key file {path} is readable by others: chmod 600 it")
    secret = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise UsageError(f"secret key file {path} is empty")
    return secret


def write_secret(path: Path, secret: str) -> None:
    """Store a secret in a file only its owner can read, created 0600 (never world-readable, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (secret + "\n").encode("utf-8"))
    finally:
        os.close(fd)
