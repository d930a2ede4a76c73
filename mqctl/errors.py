"""The one exception tree of the CLI and the single place lower-level errors are translated.

Every failure a user can see is an ``MqctlError``; each class carries the exit code the CLI
returns for it (documented in README and ``mqctl(1)``) and whether retrying may help.
Errors raised by ``store`` and ``daemon`` keep their own small trees and are mapped here,
at one boundary, by :func:`translate`.
"""

from __future__ import annotations

import errno
import re
from typing import ClassVar

from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import ACL_EXCEPTION, is_acl_refusal


class MqctlError(Exception):
    """Base of every error mqctl reports to a user."""

    exit_code: ClassVar[int] = 1
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message} ({self.hint})"


class UsageError(MqctlError):
    """Wrong flags, arguments or configuration: the command never ran."""

    exit_code = 2


class NotFoundError(MqctlError):
    """The topic, group, message, file or context named does not exist."""

    exit_code = 3


class ConflictError(MqctlError):
    """The object already exists, the store is locked by another process, live consumers hold the group, or
    another process listens on the port a daemon asked for."""

    exit_code = 4


class ConnectError(MqctlError):
    """No connection to a NameServer or broker could be made."""

    exit_code = 5
    retriable = True


class RequestTimeoutError(MqctlError):
    """A request got no answer in time."""

    exit_code = 6
    retriable = True


class ProtocolError(MqctlError):
    """A peer sent something that is not the RocketMQ remoting protocol, or an answer no RocketMQ server
    sends (a body that does not read as the bean asked for, a number past 64 bits, NaN)."""

    exit_code = 7


class BrokerError(MqctlError):
    """A NameServer or broker answered with a RocketMQ error response code."""

    exit_code = 8

    def __init__(
        self, message: str, *, code: int, remark: str | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.code = code
        self.remark = remark


class RetriableBrokerError(BrokerError):
    """A broker error that says 'try again': busy, flow control, flush timeout."""

    retriable = True


class AuthError(MqctlError):
    """The broker or NameServer refused the request for lack of permission."""

    exit_code = 9


class StoreError(MqctlError):
    """A store directory is unreadable, inconsistent or corrupt, or needs the recovery a broker start runs
    (an offline change then refuses rather than cut data the operator has not seen); or the message asked
    for is damaged in a broker's store (that broker set it aside and never serves it)."""

    exit_code = 10


class LocalPermissionError(MqctlError):
    """This user may not read or write a local file or directory (a store, a pid file, the config dir):
    nothing was asked of a server, so it is not an :class:`AuthError`."""

    exit_code = 11


class DaemonError(MqctlError):
    """A local daemon could not be started, found or stopped (e.g. still alive after SIGTERM)."""

    exit_code = 12


class TlsError(MqctlError):
    """The TLS handshake failed: the server's certificate is not signed by the CA trusted (``--ca``), does
    not name the host, or the server refused the client's certificate (or its absence)."""

    exit_code = 13


class NothingReadError(MqctlError):
    """A read that asks every broker got no answer from any of them: each refused (ACL), timed out or
    was down. With at least one answer the command prints what it read, warns, and exits 0."""

    exit_code = 14


class Interrupted(MqctlError):
    """The user pressed Ctrl-C."""

    exit_code = 130


# Exit-code table, in the order it is documented (README, mqctl(1)).
EXIT_CODES: tuple[tuple[int, str, str], ...] = (
    (0, "-", "success"),
    (1, "MqctlError", "unexpected failure (a bug: run again with --debug and report it)"),
    (UsageError.exit_code, "UsageError", "bad flag, argument or configuration"),
    (NotFoundError.exit_code, "NotFoundError", "topic, group, message, file or context not found"),
    (
        ConflictError.exit_code,
        "ConflictError",
        "already exists, store locked by a running broker, daemon already running, group has live consumers, or port in use",
    ),
    (ConnectError.exit_code, "ConnectError", "NameServer or broker unreachable"),
    (RequestTimeoutError.exit_code, "RequestTimeoutError", "no answer in time"),
    (
        ProtocolError.exit_code,
        "ProtocolError",
        "peer does not speak the RocketMQ remoting protocol, or answered what no RocketMQ server sends",
    ),
    (BrokerError.exit_code, "BrokerError", "the server answered a RocketMQ error response code"),
    (
        AuthError.exit_code,
        "AuthError",
        "permission denied by the server (ACL; a read-only topic refuses sends)",
    ),
    (
        StoreError.exit_code,
        "StoreError",
        "store directory unreadable or corrupt, a message damaged in a broker's store, or it needs recovery first",
    ),
    (
        LocalPermissionError.exit_code,
        "LocalPermissionError",
        "permission denied on a local file or directory",
    ),
    (
        DaemonError.exit_code,
        "DaemonError",
        "a local daemon could not be started or stopped, or stopped on a fatal failure",
    ),
    (TlsError.exit_code, "TlsError", "TLS handshake failed: server certificate not trusted, or ours refused"),
    (
        NothingReadError.exit_code,
        "NothingReadError",
        "no broker of a multi-broker read answered (each is named: ACL denied, timed out, down)",
    ),
    (Interrupted.exit_code, "Interrupted", "interrupted by Ctrl-C"),
)

# RocketMQ response codes (docs/wire-protocol.md §codes) that mean something more specific than BrokerError.
RESPONSE_CODE_CLASSES: dict[ResponseCode, type[MqctlError]] = {
    ResponseCode.SYSTEM_BUSY: RetriableBrokerError,
    ResponseCode.FLUSH_DISK_TIMEOUT: RetriableBrokerError,
    ResponseCode.SLAVE_NOT_AVAILABLE: RetriableBrokerError,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: RetriableBrokerError,
    ResponseCode.SERVICE_NOT_AVAILABLE: RetriableBrokerError,
    ResponseCode.FLOW_CONTROL: RetriableBrokerError,
    ResponseCode.NO_PERMISSION: AuthError,
    ResponseCode.TOPIC_NOT_EXIST: NotFoundError,
    ResponseCode.QUERY_NOT_FOUND: NotFoundError,
    ResponseCode.SUBSCRIPTION_NOT_EXIST: NotFoundError,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: NotFoundError,
    ResponseCode.CONSUMER_NOT_ONLINE: NotFoundError,
    ResponseCode.TOPIC_EXIST_ALREADY: ConflictError,
}


#: The stack frame after the exception's message: ``, org.apache...validate(PlainPermissionManager.java:664)``.
_STACK_FRAME = re.compile(r", [\w.$<>]+\([^()]*\)$")  # (Native Method), (Unknown Source) too


def remark_line(remark: str | None) -> str:
    """A remark's first line as the operator should read it: a 4.x ``AclException`` without its class
    name and stack frame ("No accessKey is configured"), anything else as it came."""
    first = (remark or "").strip().splitlines()[0] if (remark or "").strip() else "no remark"
    if first.startswith(ACL_EXCEPTION):
        first = _STACK_FRAME.sub("", first[len(ACL_EXCEPTION) :]).strip() or first
    return first


def from_response_code(code: int, remark: str | None, *, action: str) -> MqctlError:
    """Build the error for a RocketMQ response ``code`` answered to ``action``."""
    # Java remarks may carry a second line with a FAQ link: keep the error to one line.
    first_line = remark_line(remark)
    message = f"{action}: {first_line} (response code {code})"
    try:
        cls = RESPONSE_CODE_CLASSES.get(ResponseCode(code), BrokerError)
    except ValueError:  # a code RocketMQ 4.9.8 does not define (a newer or foreign server)
        cls = BrokerError
    if is_acl_refusal(code, remark):
        cls = AuthError
    hint = _unsigned_hint(first_line) or _tools_group_hint(first_line)
    if issubclass(cls, BrokerError):
        return cls(message, code=code, remark=remark, hint=hint)
    return cls(message, hint=hint)


def _unsigned_hint(remark: str) -> str | None:
    """An ACL refusal of a request mqctl did not sign named the missing AccessKey, not how to give one
    (ours answers NO_PERMISSION "carries no AccessKey"; 4.9.8 SYSTEM_ERROR "No accessKey is configured")."""
    if "accesskey" not in remark.lower():
        return None
    from mqctl import auth

    try:
        signed = auth.current() is not None
    except MqctlError:  # credentials given wrongly: this error is about the refusal
        signed = True
    if signed:
        return None
    withheld = auth.withheld()
    if withheld:
        return f"mqctl signed nothing: {withheld} (--sign sends it there)"
    return "mqctl signed nothing: give --access-key AK --secret-key-file FILE, or a context that has them"


def _tools_group_hint(remark: str) -> str | None:
    """mqctl reads (msg tail, offset and time searches, spark-export) as the tools group, which an account
    of an application's topics rarely has: the refusal named the group, not the way around it."""
    if "on group TOOLS_CONSUMER" not in remark:
        return None
    return (
        "mqctl reads as the group TOOLS_CONSUMER: read as a group the account has SUB on (-g GROUP), "
        "or give the account TOOLS_CONSUMER=SUB in groupPerms"
    )


def reported(text: str) -> MqctlError:
    """The error a daemon started in the background reported to the original process as ``Class: message``
    (the class a :func:`translate` in the daemon chose), so that both exit with the same code."""
    name, _, message = text.partition(": ")
    cls = globals().get(name)
    if isinstance(cls, type) and issubclass(cls, MqctlError) and not issubclass(cls, BrokerError):
        return cls(message)
    return DaemonError(text)  # a BrokerError needs its response code: the daemon failed to start either way


def _tls_hint() -> str:
    """A failed handshake's way out, and where its TLS came from when a context chose it (``-n`` keeps
    the context's TLS: against another cluster's plaintext or self-signed server it fails here)."""
    from mqctl import tls

    hint = "--ca names the CA that signed the server's certificate; --cert/--key when it asks for ours"
    chosen = tls.current()
    if chosen is not None and chosen[1].startswith("context "):
        hint += f"; the TLS is {chosen[1]}'s (--no-tls: plaintext)"
    return hint


def _connect_hint(exc: BaseException) -> str:
    """Closed right after it opened: what a TLS-only server does to plaintext, and a mutual-TLS one to a
    client without a certificate it trusts (TLS 1.3 says so only after the handshake)."""
    if "connection closed" in str(exc):
        from mqctl import tls

        if tls.current() is None:
            return "is it running, or TLS-only (tls.server.mode=enforcing: --tls, --ca)?"
        return "is it running, or does it require a client certificate (--cert/--key)?"
    from mqctl.admin.client import BrokerUnreachable

    if isinstance(exc, BrokerUnreachable):
        return "is the broker running? 'mqctl cluster list' shows the brokers registered"
    if "does not resolve" in str(exc):
        return "a typo in the host name? see 'mqctl context current'"
    return "is the NameServer/broker running? see 'mqctl context current'"


def translate(exc: BaseException) -> MqctlError:
    """Map any exception escaping a command to the ``MqctlError`` the user sees."""
    if isinstance(exc, MqctlError):
        return exc
    if isinstance(exc, KeyboardInterrupt):
        return Interrupted("interrupted")
    from daemon.config import ConfigError
    from daemon.lifecycle import AlreadyRunningError, LifecycleError
    from daemon.remoting import errors as remoting
    from store import StoreError as EngineStoreError, StoreLockedError

    if isinstance(exc, ConfigError):
        return UsageError(str(exc))
    if isinstance(exc, AlreadyRunningError):
        return ConflictError(str(exc), hint="stop it first, or give this one another data dir")
    if isinstance(exc, LifecycleError):
        return DaemonError(str(exc))
    if isinstance(exc, remoting.HeaderFieldError):  # read here, from an answer: the peer's, not a code
        return ProtocolError(f"an answer's header does not read: {exc.remark}")
    if isinstance(exc, remoting.RemotingCommandError):
        from mqctl.admin.client import Refused

        if not isinstance(exc, Refused):
            return from_response_code(exc.code, exc.remark, action="request failed")
        error = from_response_code(exc.code, exc.remark, action=f"{exc.peer} refused it")
        if exc.unscoped and exc.cluster is not None:
            scope = "without -c the command asks every cluster's brokers: -c CLUSTER keeps to one"
            error.hint = f"{error.hint}; {scope}" if error.hint else scope
        return error
    if isinstance(exc, remoting.RemotingTlsError):
        return TlsError(str(exc), hint=_tls_hint())
    if isinstance(exc, remoting.RemotingConnectError):
        return ConnectError(str(exc), hint=_connect_hint(exc))
    if isinstance(exc, remoting.RemotingTimeoutError):
        return RequestTimeoutError(str(exc))
    if isinstance(exc, remoting.RemotingError):
        return ProtocolError(str(exc))
    if isinstance(exc, StoreLockedError):
        return ConflictError(str(exc), hint="stop the broker that holds it first")
    if isinstance(exc, EngineStoreError):
        return StoreError(str(exc))
    if isinstance(exc, FileNotFoundError | NotADirectoryError):  # 'a file/x': no such file either
        return NotFoundError(f"{exc.strerror}: {exc.filename}")
    if isinstance(exc, IsADirectoryError):  # a directory where a file was asked for: a bad argument
        return UsageError(f"{exc.filename}: a directory, not a file")
    if isinstance(exc, PermissionError):  # the local file system said no; a server's refusal is NO_PERMISSION
        where = f": {exc.filename}" if exc.filename else ""
        return LocalPermissionError(
            f"{exc.strerror or exc}{where}", hint="run as the user that owns it, or fix its permissions"
        )
    if isinstance(exc, ConnectionRefusedError):
        return ConnectError(str(exc))
    if isinstance(exc, TimeoutError):
        return RequestTimeoutError(str(exc) or "timed out")
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return ConflictError(f"{exc.strerror or exc}", hint="another process holds the port; choose another")
    if isinstance(exc, OSError):
        return MqctlError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
    return MqctlError(f"{type(exc).__name__}: {exc}")
