"""TLS of one mqctl invocation, resolved once: every connection it opens uses it.

Precedence, highest first: the global flags ``--tls``/``--no-tls``/``--ca``/``--cert``/``--key``/``--insecure``
(and their ``MQCTL_TLS*`` variables), then the context in force (the one that chose the NameServers, or
whose NameServers ``-n`` replaced). ``--ca``, ``--cert`` and ``--insecure`` each imply ``--tls``;
``--no-tls`` is plaintext whatever the context says. Without any, connections are plaintext, as
RocketMQ's clients are without ``-Dtls.enable=true``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mqctl.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    import ssl


@dataclass(frozen=True)
class TlsOptions:
    """How to reach servers over TLS: the CA that signed them (else the system's), an optional client
    certificate (mutual TLS), or ``insecure``: trust any certificate (test-mode servers only)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise UsageError("--cert and --key go together (a client certificate and its private key)")

    def as_json(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v}

    @classmethod
    def from_json(cls, raw: object) -> TlsOptions | None:
        if not isinstance(raw, dict):
            return None
        return cls(raw.get("ca"), raw.get("cert"), raw.get("key"), bool(raw.get("insecure")))

    def context(self) -> ssl.SSLContext:
        """The client context: the server's chain and name are checked unless ``insecure``."""
        import ssl

        # OpenSSL's errors name no file (a missing --ca is "No such file or directory: None"): each step
        # says which flag's file it could not use
        _readable("--ca", self.ca)
        try:
            ctx = ssl.create_default_context(cafile=self.ca)
        except ssl.SSLError as exc:
            raise UsageError(f"--ca {self.ca}: no PEM CA certificate in it ({exc.reason or exc})") from None
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert:
            _readable("--cert", self.cert)
            _readable("--key", self.key)
            try:
                ctx.load_cert_chain(self.cert, self.key)
            except ssl.SSLError as exc:
                raise UsageError(
                    f"--cert {self.cert} --key {self.key}: not a PEM certificate and its private key "
                    f"({exc.reason or exc})"
                ) from None
        return ctx


def _readable(flag: str, path: str | None) -> None:
    """A TLS file a flag names must be a file (NotFoundError names the flag)."""
    if path is None:
        return
    if not Path(path).is_file():
        what = "a directory, not a file" if Path(path).is_dir() else "no such file"
        raise NotFoundError(f"{flag} {path}: {what}")


#: Why ``--no-tls`` beside a TLS file or ``--insecure`` is refused.
NO_TLS_WITH_FILES = "--no-tls with --ca, --cert, --key or --insecure: choose plaintext or TLS"

#: Each source's choice: options (None: plaintext, ``--no-tls``) and where they came from.
_state: dict[str, tuple[TlsOptions | None, str] | None] = {"flags": None, "context": None}


def set_flags(tls: bool | None, ca: str | None, cert: str | None, key: str | None, insecure: bool) -> None:
    """Record the global flags (the root command calls this once, before any context is chosen);
    ``tls`` None: neither ``--tls`` nor ``--no-tls``."""
    _state["context"] = None  # a context chosen by an earlier invocation in this process is not this one's
    if tls is False:
        if ca or cert or key or insecure:
            raise UsageError(NO_TLS_WITH_FILES)
        _state["flags"] = (None, "--no-tls")
    elif tls or ca or cert or key or insecure:
        _state["flags"] = (TlsOptions(ca, cert, key, insecure), "--tls")
    else:
        _state["flags"] = None


@contextmanager
def flags_in_force(
    tls: bool | None, ca: str | None, cert: str | None, key: str | None, insecure: bool
) -> Iterator[None]:
    """These TLS flags in force for the block, as if given on the command line (the Spark source's
    options, in a worker that serves reads of other options next); the process's own again after it."""
    saved = dict(_state)
    try:
        set_flags(tls, ca, cert, key, insecure)
        yield
    finally:
        _state.update(saved)


def use_context(name: str, options: TlsOptions | None) -> None:
    """Record the TLS of the context in force."""
    _state["context"] = (options, f"context {name}") if options is not None else None


def chosen() -> tuple[TlsOptions | None, str] | None:
    """What decided this invocation's TLS: its options (None: plaintext) and where they came from; None
    when nothing did (plaintext by default)."""
    return _state["flags"] or _state["context"]


def current() -> tuple[TlsOptions, str] | None:
    """The TLS options in force and where they came from; None: plaintext."""
    decided = chosen()
    if decided is None or decided[0] is None:
        return None
    return decided[0], decided[1]


def session_context() -> ssl.SSLContext | None:
    """The client context of this invocation (see module docstring), or None for plaintext."""
    chosen = current()
    return chosen[0].context() if chosen is not None else None
