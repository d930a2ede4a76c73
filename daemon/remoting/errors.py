"""Exceptions of the remoting layer.

Callers above `daemon` (the CLI) translate these into their own error tree at one boundary, so this
module stays free of any presentation concern.
"""

from __future__ import annotations

from daemon.remoting.codes import ResponseCode

#: How a RocketMQ 4.x broker's remark starts when its ACL refused the request: it answers the
#: ``AclException`` its validator threw as any failed request, SYSTEM_ERROR with the exception's
#: ``toString()`` and its first stack frame (NettyRemotingAbstract, RemotingHelper.exceptionSimpleDesc).
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "


def is_acl_refusal(code: int, remark: str | None) -> bool:
    """Whether an answer is an ACL refusal: ours (NO_PERMISSION) or a RocketMQ 4.x broker's (SYSTEM_ERROR
    carrying its ``AclException``). Every check for a refusal asks this, so both read as one."""
    if code == ResponseCode.NO_PERMISSION:
        return True
    return code == ResponseCode.SYSTEM_ERROR and (remark or "").lstrip().startswith(ACL_EXCEPTION)


class RemotingError(Exception):
    """Base class of every remoting failure."""


class RemotingConnectError(RemotingError):
    """A connection could not be opened, or it closed before the answer arrived."""

    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(f"cannot talk to {addr}: {reason}")
        self.addr = addr
        self.reason = reason


class RemotingTlsError(RemotingConnectError):
    """The TLS handshake failed: the server's certificate is not trusted, or the server refused ours."""


class RemotingTimeoutError(RemotingError):
    """No response arrived for a request within its timeout."""

    def __init__(self, addr: str, timeout: float, code: int) -> None:
        super().__init__(f"request code {code} to {addr} timed out after {timeout:g}s")
        self.addr = addr
        self.timeout = timeout
        self.code = code


class RemotingProtocolError(RemotingError):
    """Bytes that cannot be a frame: the connection they came from must be closed."""


class HeaderTooLongError(RemotingProtocolError):
    """A frame whose header is longer than its reader takes (a server's peers: MAX_REQUEST_HEADER)."""


class RemotingCommandError(RemotingError):
    """A request failed with a RocketMQ response code.

    Raised by clients when a peer answers with an unexpected code, and by processors to make the
    server answer with `code` and `remark` (it is the one way handlers signal errors).
    """

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"code {code}: {remark}" if remark else f"code {code}")
        self.code = code
        self.remark = remark


class HeaderFieldError(RemotingCommandError):
    """A request header field is missing or not of its declared type (answered as SYSTEM_ERROR)."""

    def __init__(self, header: str, field: str, problem: str) -> None:
        super().__init__(ResponseCode.SYSTEM_ERROR, f"header {header}: field '{field}' {problem}")
        self.header = header
        self.field = field
