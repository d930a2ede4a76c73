"""The RemotingCommand: one request or response of the RocketMQ remoting protocol.

A plain value object. Encoding lives in `frame`, typed access to `ext_fields` in `headers`, so the
same command can travel over any transport and be built in tests without a socket.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.remoting.codes import (
    CURRENT_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    ResponseCode,
    SerializeType,
)


@dataclass(slots=True, init=False)
class RemotingCommand:
    """A decoded frame. `ext_fields` values are always strings (Java's view of them)."""

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = CURRENT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    def __init__(
        self,
        code: int,
        language: LanguageCode = LanguageCode.JAVA,
        version: int = CURRENT_VERSION,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> None:
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields = {} if ext_fields is None else ext_fields
        self.body = body
        self.serialize_type = serialize_type

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
        version: int = CURRENT_VERSION,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """Build a request; the opaque is assigned by the connection that sends it."""
        # (the class by name, not ``cls``: compiled, that is a direct call of the written-out __init__, where
        # ``cls(...)`` went through the type's call with its keywords parsed; compiled classes have no
        # subclasses, so it is the same class)
        return RemotingCommand(
            code=code,
            version=version,
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=serialize_type,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def make_response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """Answer this request: same opaque and serialize type, response flag set
        (docs/wire-protocol.md §requests-and-responses)."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=self.serialize_type,
        )
