"""Plain ACL as 4.9.8's PlainAccessValidator applies it (docs/acl.md §verification).

`AclFiles` finds and parses the yml files (`$ROCKETMQ_HOME/conf/plain_acl.yml` plus `conf/acl/*.yml`,
or one `aclFilePath`) and reloads them when one changes; `PlainAccessValidator.check` runs before
every processor. Denials raise `AclDenied` (answered NO_PERMISSION) with a remark naming the account,
resource and permission, never the secret.
"""

from __future__ import annotations

import calendar
import collections
import contextlib
import ipaddress
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from daemon.acl.signature import (
    ACCESS_KEY,
    FRESH_CODE,
    FRESH_NONCE,
    FRESH_TIMESTAMP,
    NONCE_LENGTH,
    SIGNATURE,
    UNIQUE_KEY_QUERY,
    Verifier,
    fresh_code,
)
from daemon.protect import RECALL_MESSAGE
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingCommandError
from daemon.remoting.limits import WarningGate, shown
from store.names import RETRY_GROUP_TOPIC_PREFIX, TRACE_TOPIC

if TYPE_CHECKING:  # (the validator only reads a connection's address: no asyncio for mqctl's acl commands)
    from daemon.remoting.connection import Connection

log = logging.getLogger(__name__)

DENY: Final = 1
ANY: Final = 2
PUB: Final = 4
SUB: Final = 8
_PERM_NAMES: Final = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
#: How often a daemon with ACL on looks at the files (a stat per file, in a task of its own: no request
#: pays for it; 4.9.x compares a hash of each file every 500 ms).
RELOAD_CHECK_INTERVAL: Final = 1.0
#: How many topics an account remembers it may send to (a client naming ever-new topics must not grow it).
MAX_SENDABLE: Final = 4096

R = RequestCode
#: Codes that change the broker or NameServer for everyone: 4.9.8's five (17, 25, 215, 200, 207) and
#: the other writes an ordinary account has no business sending (offset resets, deletes, KV, ACL, config).
ADMIN_CODES: Final = frozenset(
    {
        R.UPDATE_AND_CREATE_TOPIC,
        R.UPDATE_BROKER_CONFIG,
        R.DELETE_TOPIC_IN_BROKER,
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        R.DELETE_SUBSCRIPTIONGROUP,
        R.INVOKE_BROKER_TO_RESET_OFFSET,
        R.CLONE_GROUP_OFFSET,
        R.CLEAN_UNUSED_TOPIC,
        R.CLEAN_EXPIRED_CONSUMEQUEUE,
        R.DELETE_EXPIRED_COMMITLOG,
        R.TRIGGER_DELETE_FILES,
        R.UPDATE_AND_CREATE_ACL_CONFIG,
        R.DELETE_ACL_CONFIG,
        R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        R.GET_BROKER_CLUSTER_ACL_CONFIG,  # it answers every secret key
        R.PUT_KV_CONFIG,
        R.DELETE_KV_CONFIG,
        R.DELETE_KV_CONFIG_BY_VALUE,
        R.REGISTER_BROKER,
        R.UNREGISTER_BROKER,
        R.DELETE_TOPIC_IN_NAMESRV,
        R.WIPE_WRITE_PERM_OF_BROKER,
        R.ADD_WRITE_PERM_OF_BROKER,
        R.UPDATE_NAMESRV_CONFIG,
        R.CONSUME_MESSAGE_DIRECTLY,  # makes a group's client consume a message again (side effects)
        R.QUERY_DATA_VERSION,  # keeps a broker listed in the routes, as REGISTER_BROKER does
    }
)


#: What a NameServer with `aclEnable` checks (4.9.8's checks nothing): every write, and every code that
#: keeps a broker alive or changes what routes say; lookups stay open.
NAMESRV_WRITE_CODES: Final = frozenset(
    {
        R.REGISTER_BROKER,
        R.UNREGISTER_BROKER,
        R.QUERY_DATA_VERSION,
        R.DELETE_TOPIC_IN_NAMESRV,
        R.WIPE_WRITE_PERM_OF_BROKER,
        R.ADD_WRITE_PERM_OF_BROKER,
        R.PUT_KV_CONFIG,
        R.DELETE_KV_CONFIG,
        R.DELETE_KV_CONFIG_BY_VALUE,
        R.UPDATE_NAMESRV_CONFIG,
    }
)


#: Codes that name a CommitLog offset, not a topic: (the field holding it, the permission the topic of
#: the message stored there needs). 4.9.8 checks no topic for them, so SUB on one's own group read any
#: message of the broker (or copied it into one's retry topic), and any account committed any half
#: message (or one forged inside its own message body) into any topic.
OFFSET_CODES: Final[dict[int, tuple[str, int]]] = {
    R.VIEW_MESSAGE_BY_ID: ("offset", SUB),
    R.CONSUMER_SEND_MSG_BACK: ("offset", SUB),
    R.END_TRANSACTION: ("commitLogOffset", PUB),
}


#: Fields the server leaves out when it recomputes a signature (4.9.8's quirk, kept for parity).
SERVER_EXCLUDED: Final = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})


class AclConfigError(ValueError):
    """An ACL file or an account in it cannot be used (bad address pattern, missing key...)."""


class AclDenied(RemotingCommandError):
    """The validator refused a request: NO_PERMISSION with a remark that names what was missing."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.NO_PERMISSION, remark)


def parse_perm(text: object) -> int:
    """`DENY|PUB|SUB|PUB|SUB|SUB|PUB`; anything else (blank included) is DENY, as Java's parser."""
    return _PERM_NAMES.get(str(text).strip().upper(), DENY) if text is not None else DENY


def strict_perm(text: object, where: str) -> int:
    """A permission an ACL write may store: exactly DENY, PUB, SUB or PUB|SUB (4.9.8's
    `checkPlainAccessConfig` refuses the rest with code 209; the file parser reads them as DENY)."""
    name = str(text).strip().upper() if text is not None else ""
    if name not in _PERM_NAMES:
        raise AclConfigError(f"{where}: bad permission {text!r}: expected DENY, PUB, SUB or PUB|SUB")
    return _PERM_NAMES[name]


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return {PUB: "PUB", SUB: "SUB", PUB | SUB: "PUB|SUB"}.get(perm & (PUB | SUB), "DENY")


def check_permission(needed: int, owned: int) -> bool:
    """Java's `Permission.checkPermission`: DENY wins; ANY wants PUB or SUB; else the bits must meet."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


# ---------------------------------------------------------------------------------- address patterns


def _segment_matcher(seg: str, hexa: bool) -> Callable[[str], bool]:
    base = 16 if hexa else 10
    limit = 0xFFFF if hexa else 255
    if seg == "*":
        return lambda _v: True
    lo_text, dash, hi_text = seg.partition("-")
    try:
        lo = int(lo_text, base)
        hi = int(hi_text, base) if dash else lo
    except ValueError:
        raise AclConfigError(f"bad address segment {seg!r}") from None
    if not 0 <= lo <= hi <= limit:
        raise AclConfigError(f"bad address range {seg!r}")

    def match(value: str) -> bool:
        try:
            return lo <= int(value, base) <= hi
        except ValueError:
            return False

    return match


def address_matcher(pattern: str | None) -> Callable[[str], bool]:
    """RocketMQ's RemoteAddressStrategy: blank matches nothing, `*` (or `*.*.*.*`) everything; an IP;
    a comma list of IPs; `192.168.1.{1,2,3}`; per-segment ranges and wildcards `10.1-9.*.*`."""
    text = (pattern or "").strip()
    if not text:
        return lambda _ip: False
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda _ip: True
    braces = re.fullmatch(r"(.*[.:])\{([^}]*)\}", text)
    if braces:
        text = ",".join(braces.group(1) + part.strip() for part in braces.group(2).split(","))
    if "," in text:
        ips = set()
        for part in text.split(","):
            try:
                ips.add(str(ipaddress.ip_address(part.strip())))
            except ValueError:
                raise AclConfigError(f"bad address {part.strip()!r} in {pattern!r}") from None
        return lambda ip: ip in ips
    with contextlib.suppress(ValueError):
        exact = str(ipaddress.ip_address(text))
        return lambda ip: ip == exact
    hexa = ":" in text
    segments = text.split(":" if hexa else ".")
    width = 8 if hexa else 4
    if len(segments) > width or not segments:
        raise AclConfigError(f"bad address pattern {pattern!r}")
    if len(segments) < width:
        if segments[-1] != "*":
            raise AclConfigError(f"bad address pattern {pattern!r}")
        segments += ["*"] * (width - len(segments))
    matchers = [_segment_matcher(s, hexa) for s in segments]

    def match(ip: str) -> bool:
        if hexa != (":" in ip):
            return False
        if hexa:
            try:
                ip = ipaddress.IPv6Address(ip).exploded
            except ValueError:
                return False
        values = ip.split(":" if hexa else ".")
        return len(values) == width and all(m(v) for m, v in zip(matchers, values, strict=True))

    return match


# ---------------------------------------------------------------------------------- accounts and files


def _perm_table(entries: object, where: str) -> dict[str, int]:
    if entries is not None and not isinstance(entries, list):
        raise AclConfigError(f"{where}: topicPerms/groupPerms must be lists of NAME=PERM")
    table: dict[str, int] = {}
    for entry in entries or []:
        name, sep, perm = str(entry).partition("=")
        if not sep or not name.strip():
            raise AclConfigError(f"{where}: bad permission entry {entry!r}: expected NAME=PERM")
        table[name.strip()] = parse_perm(perm)
    return table


@dataclass
class Account:
    """One `accounts[]` entry; `group_perms` are keyed by group (checked as `%RETRY%<group>`)."""

    access_key: str
    secret_key: str
    white_remote_address: str = ""
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)
    source: Path | None = None
    matches: Callable[[str], bool] = field(default=lambda _ip: False, repr=False)
    verifier: Verifier | None = field(default=None, repr=False)
    #: Topics this account was found to send to (an Account never changes: a reload makes new ones).
    sendable: set[str] = field(default_factory=set, repr=False, compare=False)

    def server_verifier(self) -> Verifier:
        """The account's server-rule `Verifier`, keyed once (the request path calls it directly)."""
        if self.verifier is None:
            self.verifier = Verifier(self.secret_key, SERVER_EXCLUDED)
        return self.verifier

    @classmethod
    def from_yaml(cls, raw: Mapping[str, Any], source: Path | None = None) -> Account:
        where = f"{source}" if source else "account"
        access_key = str(raw.get("accessKey") or "").strip()
        secret_key = str(raw.get("secretKey") or "").strip()
        if not access_key or not secret_key:
            raise AclConfigError(f"{where}: every account needs accessKey and secretKey")
        white = str(raw.get("whiteRemoteAddress") or "")
        admin = raw.get("admin")
        return cls(
            access_key=access_key,
            secret_key=secret_key,
            white_remote_address=white,
            admin=admin is True or str(admin).lower() == "true",
            default_topic_perm=parse_perm(raw.get("defaultTopicPerm")),
            default_group_perm=parse_perm(raw.get("defaultGroupPerm")),
            topic_perms=_perm_table(raw.get("topicPerms"), where),
            group_perms=_perm_table(raw.get("groupPerms"), where),
            source=source,
            matches=address_matcher(white),
        )

    @property
    def unrestricted(self) -> bool:
        """An admin without topic or group perms: no resource rule applies to it (as in 4.9.8)."""
        return self.admin and not self.topic_perms and not self.group_perms

    def owned(self, resource: str) -> int:
        if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self.group_perms.get(resource[len(RETRY_GROUP_TOPIC_PREFIX) :], self.default_group_perm)
        return self.topic_perms.get(resource, self.default_topic_perm)


@dataclass
class AclTable:
    """Everything the files say, merged: the global whitelist and the accounts by access key."""

    global_white: list[str] = field(default_factory=list)
    accounts: dict[str, Account] = field(default_factory=dict)
    white_matchers: list[Callable[[str], bool]] = field(default_factory=list)
    versions: dict[str, dict[str, int]] = field(default_factory=dict)


def read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        # never str(exc): it quotes the offending line, often a secretKey being edited
        parts = []
        for mark in ("context", "problem"):
            at = getattr(exc, f"{mark}_mark", None)
            what = getattr(exc, mark, None)
            if what:
                parts.append(f"{what}" + (f" (line {at.line + 1}, column {at.column + 1})" if at else ""))
        raise AclConfigError(f"{path}: not YAML: {'; '.join(parts) or 'parse error'}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AclConfigError(f"{path}: expected a mapping at the top")
    return data


def file_version(data: Mapping[str, Any]) -> dict[str, int]:
    """The file's `dataVersion` (a one-element list, as the broker writes it), or a zero version."""
    raw = data.get("dataVersion")
    if isinstance(raw, list) and raw and isinstance(raw[0], dict):
        return {"counter": int(raw[0].get("counter", 0)), "timestamp": int(raw[0].get("timestamp", 0))}
    return {"counter": 0, "timestamp": 0}


def parse_files(contents: Iterable[tuple[Path, dict[str, Any]]]) -> AclTable:
    table = AclTable()
    for path, data in contents:
        for pattern in data.get("globalWhiteRemoteAddresses") or []:
            table.white_matchers.append(address_matcher(str(pattern)))
            table.global_white.append(str(pattern))
        for raw in data.get("accounts") or []:
            if not isinstance(raw, dict):
                raise AclConfigError(f"{path}: every account must be a mapping")
            account = Account.from_yaml(raw, path)
            if account.access_key in table.accounts:
                raise AclConfigError(f"{path}: accessKey {account.access_key} is defined twice")
            table.accounts[account.access_key] = account
        table.versions[str(path)] = file_version(data)
    return table


class AclFiles:
    """The yml files of one daemon, re-read when their mtimes (or the set of files) change.

    `acl_file_path` wins when set; else `<rocketmq_home>/conf/plain_acl.yml` and every
    `<rocketmq_home>/conf/acl/*.yml`, as 4.9.x loads them.
    """

    def __init__(self, rocketmq_home: str, acl_file_path: str = "") -> None:
        home = Path(rocketmq_home or os.environ.get("ROCKETMQ_HOME") or ".")
        self.single = Path(acl_file_path) if acl_file_path else None
        self.default = self.single or home / "conf" / "plain_acl.yml"
        self.acl_dir = home / "conf" / "acl"
        self.table = AclTable()
        self._fingerprint: tuple[tuple[str, int, int], ...] | None = None
        self.reload()

    def paths(self) -> list[Path]:
        if self.single is not None:
            return [self.single]
        extra = sorted(self.acl_dir.glob("*.yml")) if self.acl_dir.is_dir() else []
        return [self.default, *extra]

    def _stat(self) -> tuple[tuple[str, int, int], ...]:
        out = []
        for path in self.paths():
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(out)

    def reload(self) -> bool:
        """Re-read the files; on a bad file keep the accounts in force and log why (ERROR)."""
        fingerprint = self._stat()
        self._fingerprint = fingerprint
        if not fingerprint:
            log.error("ACL is enabled but no ACL file exists (%s): every request is refused", self.default)
            self.table = AclTable()
            return True
        try:
            self.table = parse_files([(Path(p), read_yaml(Path(p))) for p, _, _ in fingerprint])
        except (AclConfigError, OSError) as exc:
            log.error("ACL files not reloaded, the previous accounts stay in force: %s", exc)
            return False
        log.info(
            "ACL loaded from %s: %d accounts",
            ", ".join(p for p, _, _ in fingerprint),
            len(self.table.accounts),
        )
        return True

    def maybe_reload(self) -> None:
        """Re-read the files if one changed (mtime or size), appeared or went: one stat per file."""
        if self._stat() != self._fingerprint:
            self.reload()


# ---------------------------------------------------------------------------------- request rules


#: What a 5.x QueryRoute is checked as (the proxy's `PlainAccessResource`: ANY on the topic). No remoting
#: request stands for it: a 4.x client asks the NameServer, which checks no route request (as 4.9.8's).
QUERY_ROUTE: Final = -int(R.GET_ROUTEINFO_BY_TOPIC)


def _retry(group: str | None) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + (group or "")


#: The header field naming a send's topic, by code. Plain ints: the hot path compares no enum members
#: (an IntEnum attribute lookup was a large share of the rule's time on each send).
_SEND_TOPIC_FIELDS: Final = {
    int(R.SEND_MESSAGE): "topic",
    int(R.SEND_MESSAGE_V2): "b",
    int(R.SEND_BATCH_MESSAGE): "b",
}
_RESOURCE_CODES: Final = frozenset(
    int(c)
    for c in (
        R.CONSUMER_SEND_MSG_BACK,
        R.PULL_MESSAGE,
        R.QUERY_MESSAGE,
        R.UNREGISTER_CLIENT,
        R.GET_CONSUMER_LIST_BY_GROUP,
        R.UPDATE_CONSUMER_OFFSET,
        R.QUERY_CONSUMER_OFFSET,
        R.HEART_BEAT,
        R.LOCK_BATCH_MQ,
        R.UNLOCK_BATCH_MQ,
        R.POP_MESSAGE,
        R.ACK_MESSAGE,
        R.CHANGE_MESSAGE_INVISIBLETIME,
        R.BATCH_ACK_MESSAGE,
        QUERY_ROUTE,
        RECALL_MESSAGE,
    )
)


def needed_resources(request: RemotingCommand) -> list[tuple[str, int]]:
    """The (resource, permission) pairs a request needs (docs/acl.md §per-request); groups as
    `%RETRY%<group>`.

    A send to a retry topic needs SUB on that group; 4.9.8 reads a `group` field the send header
    does not have, we check the retry topic itself.
    """
    f = request.ext_fields
    code = request.code
    topic_field = _SEND_TOPIC_FIELDS.get(code)
    if topic_field is not None:
        topic = f.get(topic_field, "")
        return [(topic, SUB if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else PUB)]
    if code not in _RESOURCE_CODES:
        return []
    if code == R.CONSUMER_SEND_MSG_BACK:
        return [(_retry(f.get("group")), SUB)]
    if code == R.PULL_MESSAGE:
        return [(f.get("topic", ""), SUB), (_retry(f.get("consumerGroup")), SUB)]
    if code == R.QUERY_MESSAGE:
        return [(f.get("topic", ""), SUB)]
    if code == RECALL_MESSAGE:  # as 5.x's proxy checks it: PUB on the topic (its producer's act)
        return [(f.get("topic", ""), PUB)]
    if code == QUERY_ROUTE:
        return [(f.get("topic", ""), ANY)]
    if code in (R.UNREGISTER_CLIENT, R.GET_CONSUMER_LIST_BY_GROUP):
        group = f.get("consumerGroup")
        return [(_retry(group), SUB)] if group else []
    # the POP codes as 5.x checks them: SUB on the topic and on the group
    if code in (R.UPDATE_CONSUMER_OFFSET, R.QUERY_CONSUMER_OFFSET) or code in _POP_CODES:
        return [(_retry(f.get("consumerGroup")), SUB), (f.get("topic", ""), SUB)]
    if code == R.HEART_BEAT:
        return _heartbeat_resources(request.body)
    if code in (R.LOCK_BATCH_MQ, R.UNLOCK_BATCH_MQ):
        return _lock_resources(request.body)
    if code == R.BATCH_ACK_MESSAGE:
        return _batch_ack_resources(request.body)
    return []


#: The POP codes whose header names the group (``consumerGroup``) and the topic.
_POP_CODES: Final = (R.POP_MESSAGE, R.ACK_MESSAGE, R.CHANGE_MESSAGE_INVISIBLETIME)


def _batch_ack_resources(body: bytes) -> list[tuple[str, int]]:
    """BATCH_ACK_MESSAGE: SUB on each ack's group and topic (``c``/``t``, fastjson's short names)."""
    data = _json_body(body)
    out: list[tuple[str, int]] = []
    for ack in _objects(data.get("acks")) if isinstance(data, dict) else []:
        out.append((_retry(str(ack.get("c") or ack.get("consumerGroup") or "")), SUB))
        out.append((str(ack.get("t") or ack.get("topic") or ""), SUB))
    return out


def _json_body(body: bytes) -> object:
    """The body as the processors read it (fastjson), or None when it is no JSON: they refuse it too."""
    if not body:
        return None
    from store import fastjson

    try:
        return fastjson.loads(body)
    except (ValueError, UnicodeDecodeError):
        try:
            return json.loads(body)
        except ValueError:
            return None


def _objects(value: object) -> list[dict[str, Any]]:
    """The JSON objects of a list: the processors refuse a body with anything else in it, and a rule
    must not raise on it (a TypeError is logged with its traceback at ERROR)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _lock_resources(body: bytes) -> list[tuple[str, int]]:
    """LOCK/UNLOCK_BATCH_MQ: SUB on the group and on each queue's topic, as a member of the group has
    (4.9.8 checks nothing: anyone could unlock an orderly group's queues, given a client id)."""
    data = _json_body(body)
    if not isinstance(data, dict):
        return []
    out = [(_retry(str(data.get("consumerGroup") or "")), SUB)]
    out.extend((str(mq.get("topic")), SUB) for mq in _objects(data.get("mqSet")))
    return out


def _heartbeat_resources(body: bytes) -> list[tuple[str, int]]:
    data = _json_body(body)
    out: list[tuple[str, int]] = []
    for consumer in _objects(data.get("consumerDataSet")) if isinstance(data, dict) else []:
        out.append((_retry(str(consumer.get("groupName") or "")), SUB))
        out.extend((str(sub.get("topic")), SUB) for sub in _objects(consumer.get("subscriptionDataSet")))
    return out


def _describe(resource: str) -> str:
    if resource.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return f"group {resource[len(RETRY_GROUP_TOPIC_PREFIX) :]}"
    return f"topic {resource}"


class PlainAccessValidator:
    """Checks one request against the accounts (docs/acl.md §verification); raises AclDenied."""

    def __init__(
        self,
        files: AclFiles,
        daemon: str = "broker",
        topic_at: Callable[[int], str | None] | None = None,
        freshness: int = 0,
    ) -> None:
        self.files = files
        self.daemon = daemon
        #: `aclAdminFreshness`: admin requests need a signed timestamp this recent and an unseen nonce.
        self.replays = ReplayGuard(freshness) if freshness > 0 else None
        #: The topic of the message stored at a CommitLog offset (None: no message there), for OFFSET_CODES.
        self.topic_at = topic_at
        self.denied = 0
        self._warnings = WarningGate(log)

    def __call__(self, conn: Connection, request: RemotingCommand) -> None:
        try:
            self.check(conn.address[0], request)
        except AclDenied as exc:
            self.denied += 1
            self._warnings.warning(
                "%s ACL refused request code %d from %s (accessKey %s): %s",
                self.daemon,
                request.code,
                conn.peer,
                shown(request.ext_fields.get(ACCESS_KEY) or "-"),
                exc.remark,
            )
            raise

    def _topic_at(self, offset: str) -> str | None:
        """None for an offset that is no number or holds no record: the processor answers those."""
        try:
            return self.topic_at(int(offset)) if self.topic_at is not None else None
        except ValueError:
            return None

    def only(self, codes: frozenset[int]) -> Callable[[Connection, RemotingCommand], None]:
        """A guard that checks only requests with these codes (the NameServer's writes)."""

        def guard(conn: Connection, request: RemotingCommand) -> None:
            if request.code in codes:
                self(conn, request)

        return guard

    def check(self, ip: str, request: RemotingCommand) -> None:
        """Every request runs this: a send takes a path without per-rule lists or extra calls, and a
        topic its account sent to before costs one set lookup (what ACL costs a send:
        docs/performance.md)."""
        fields = request.ext_fields
        access_key = fields.get(ACCESS_KEY)
        account = self._account(ip, access_key, request.code)
        if account is None:
            return
        # an account's whiteRemoteAddress skips only the signature: its admin flag and permissions apply
        # (4.9.8 lets such a request through unchecked)
        signed = not account.matches(ip)
        if signed:
            given = fields.get(SIGNATURE, "")
            verifier = account.verifier or account.server_verifier()
            # (inline, not _signed_by: a call less on every signed send)
            if not verifier.verify(fields, request.body, given) and not (
                UNIQUE_KEY_QUERY in fields
                and Verifier(account.secret_key).verify(fields, request.body, given)
            ):
                raise AclDenied(f"ACL: signature check failed for accessKey={access_key} (wrong secretKey?)")
        self._permit(account, account.access_key, request, signed)

    def check_v2(
        self,
        ip: str,
        access_key: str,
        signed_with: Callable[[str], bool],
        request: RemotingCommand,
        date_time: str | None = "",
        now_ms: int | None = None,
    ) -> None:
        """A 5.x (gRPC) request, given as the remoting `request` it stands for: its Authorization
        header names `access_key` and `signed_with(secret key)` verifies it over `date_time` (its
        `x-mq-date-time`, which must be recent: see `signed_time_problem`; None: a stream's, checked when
        it opened); then the same whitelist and permission rules as remoting. An empty access key is
        anonymous, as a request without AccessKey."""
        account = self._account(ip, access_key, None)
        if account is None:
            return
        signed = not account.matches(ip)
        if signed and not signed_with(account.secret_key):
            raise AclDenied(f"ACL: signature check failed for accessKey={access_key} (wrong secretKey?)")
        if signed and date_time is not None:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            window = self.replays.window_ms if self.replays is not None else V2_FRESHNESS_MS
            problem = signed_time_problem(date_time, now, window)
            if problem is not None:
                raise AclDenied(f"ACL: accessKey={access_key}: {problem}")
        self._permit(account, access_key, request, signed)

    def _account(self, ip: str, access_key: str | None, code: int | None) -> Account | None:
        """The account a request names; None when the global whitelist lets its address in. `code` is
        the remoting request's (None: a 5.x request, whose credential is in its Authorization header)."""
        table = self.files.table
        if table.white_matchers and any(match(ip) for match in table.white_matchers):
            return None
        if not access_key:
            who = ip or "?"  # (a socket without an IP peer, named as connection logs name it)
            what = (
                f"request code {code} from {who} carries no AccessKey"
                if code is not None
                else (f"a 5.x request from {who} carries no credential")
            )
            raise AclDenied(f"ACL: {what} and {who} is not in globalWhiteRemoteAddresses")
        account = table.accounts.get(access_key)
        if account is None:
            raise AclDenied(f"ACL: no account for accessKey={shown(access_key)}")
        return account

    def _permit(self, account: Account, access_key: str, request: RemotingCommand, signed: bool) -> None:
        """The account's permissions for `request` (its signature already checked, or waived)."""
        fields = request.ext_fields
        code = request.code
        topic_field = _SEND_TOPIC_FIELDS.get(code)
        # a send (no send code is an admin code): needed_resources' one pair, no OFFSET_CODES rule
        if topic_field is not None:
            send_topic = fields.get(topic_field, "")
            if send_topic not in account.sendable:
                if not account.unrestricted:
                    _require(
                        account,
                        access_key,
                        send_topic,
                        SUB if send_topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else PUB,
                    )
                if len(account.sendable) < MAX_SENDABLE:
                    account.sendable.add(send_topic)
            return
        if code in ADMIN_CODES:
            if not account.admin:
                raise AclDenied(f"ACL: accessKey={access_key} is not admin; request code {code} needs admin")
            if signed and self.replays is not None:
                self.replays.check(access_key, request)
        if account.unrestricted:
            return
        needed = needed_resources(request)
        offset_rule = OFFSET_CODES.get(request.code)
        if offset_rule is not None and self.topic_at is not None:
            offset = request.ext_fields.get(offset_rule[0], "")
            topic = self._topic_at(offset)
            if topic is None:
                raise AclDenied(f"ACL: accessKey={access_key}: no message at CommitLog offset {offset}")
            needed.append((topic, offset_rule[1]))
        for resource, perm in needed:
            _require(account, access_key, resource, perm)

    def admin_signed(self, ip: str, request: RemotingCommand) -> bool:
        """Whether `request` is signed by an admin account (not let in by a whitelist): what a config
        update that lets the next cleanup delete unconsumed messages needs with ACL on."""
        account = self.files.table.accounts.get(request.ext_fields.get(ACCESS_KEY) or "")
        return account is not None and account.admin and _signed_by(account, request)


#: How far from the broker's clock a 5.x signature's `x-mq-date-time` may be, besides the zone slack:
#: `aclAdminFreshness` when set, else this.
V2_FRESHNESS_MS: Final = 15 * 60 * 1000
#: The official clients write their local time with a `Z` (Python `datetime.now()`, Java
#: `LocalDateTime.now()`), so a right clock may be off UTC by a zone's offset, at most 14 hours.
ZONE_SLACK_MS: Final = 14 * 3600 * 1000


def signed_time_problem(date_time: str, now_ms: int, window_ms: int) -> str | None:
    """Why a 5.x signature's `x-mq-date-time` (`yyyyMMdd'T'HHmmss'Z'`) refuses it, None when it is recent.

    It is the only signed value of a 5.x request: a captured Authorization header would otherwise sign
    any request of that account forever. Its age bounds the replay to the zone slack plus the window."""
    try:
        stamp = calendar.timegm(time.strptime(date_time, "%Y%m%dT%H%M%SZ")) * 1000
    except ValueError:
        return f"the signature's x-mq-date-time {date_time!r} is not yyyyMMddTHHmmssZ"
    off = abs(now_ms - stamp)
    if off > ZONE_SLACK_MS + window_ms:
        return (
            f"the signature's x-mq-date-time {date_time} is {off // 1000} s from the broker's clock "
            "(a replay, or a clock off)"
        )
    return None


def _signed_by(account: Account, request: RemotingCommand) -> bool:
    """Whether the request's Signature is the account's over its fields and body."""
    fields = request.ext_fields
    given = fields.get(SIGNATURE, "")
    verifier = account.verifier or account.server_verifier()
    # Java clients sign unique-key queries with `_UNIQUE_KEY_QUERY` in: 4.9.8 refuses those
    # (docs/acl.md §quirks-of-498); accepting both forms breaks nothing
    return verifier.verify(fields, request.body, given) or (
        UNIQUE_KEY_QUERY in fields and Verifier(account.secret_key).verify(fields, request.body, given)
    )


class ReplayGuard:
    """`aclAdminFreshness`: an admin request must carry, inside its signed fields, a timestamp no more
    than `freshness` seconds from now, a nonce not seen before, and its own request code.

    ACL 1.0 signs the field values and the body but neither the request code nor a time: a captured
    request replays forever, and under another code. mqctl adds the three fields to every admin request
    it signs (signature.FRESH_*); mqadmin sends none, which is why this is off unless configured. A nonce
    is remembered while its timestamp is fresh: older ones are refused by their timestamp anyway.
    """

    #: Nonces remembered at most (each needs a valid admin signature to be added).
    MAX_NONCES: Final = 100_000

    def __init__(self, freshness: int) -> None:
        self.window_ms = freshness * 1000
        self._seen: dict[str, int] = {}
        self._order: collections.deque[tuple[int, str]] = collections.deque()

    def check(self, access_key: str, request: RemotingCommand, now_ms: int | None = None) -> None:
        fields = request.ext_fields
        now = int(time.time() * 1000) if now_ms is None else now_ms
        where = f"ACL: accessKey={access_key}: admin request code {request.code}"
        text = fields.get(FRESH_TIMESTAMP, "")
        try:
            stamp = int(text)
        except ValueError:
            raise AclDenied(
                f"{where} carries no signed {FRESH_TIMESTAMP}/{FRESH_NONCE} and aclAdminFreshness is set "
                "(sign it with mqctl)"
            ) from None
        if text != str(stamp):  # "0" + ts, " ts", "+ts" parse alike: the digit came from the nonce
            raise AclDenied(
                f"{where}: its signed {FRESH_TIMESTAMP} {text!r} is not written as mqctl writes it"
            )
        if fields.get(FRESH_CODE) != fresh_code(request.code):
            raise AclDenied(f"{where}: its signed {FRESH_CODE} names another request code (a replay?)")
        # keys are not signed: a key invented between the three would let their values start and end
        # elsewhere in the signed bytes; adjacent, the timestamp pins the nonce and the nonce the code
        if any(FRESH_CODE < key < FRESH_TIMESTAMP and key != FRESH_NONCE for key in fields):
            raise AclDenied(
                f"{where}: a field is signed between {FRESH_CODE}, {FRESH_NONCE} and {FRESH_TIMESTAMP}"
            )
        if abs(now - stamp) > self.window_ms:
            raise AclDenied(
                f"{where}: signed {abs(now - stamp) // 1000} s from now, over aclAdminFreshness="
                f"{self.window_ms // 1000} s (a replay, or a clock off)"
            )
        nonce = fields.get(FRESH_NONCE, "")
        if len(nonce) != NONCE_LENGTH:  # a shorter or longer one took characters from its neighbours
            raise AclDenied(f"{where}: no signed {FRESH_NONCE} of exactly {NONCE_LENGTH} characters")
        self._forget(now)
        if nonce in self._seen:
            raise AclDenied(f"{where}: nonce already used (a replay)")
        if len(self._seen) >= self.MAX_NONCES:
            raise AclDenied(f"{where}: too many admin requests in aclAdminFreshness; try again shortly")
        self._seen[nonce] = stamp
        self._order.append((stamp + self.window_ms, nonce))  # after then its timestamp refuses it

    def _forget(self, now: int) -> None:
        """Drop nonces whose timestamps can no longer pass the freshness check (in arrival order: one
        signed ahead of the clock holds the later ones a little longer, never too short)."""
        order = self._order
        while order and order[0][0] < now:
            _, nonce = order.popleft()
            self._seen.pop(nonce, None)


def _require(account: Account, access_key: str, resource: str, perm: int) -> None:
    """Raise AclDenied unless `account` holds `perm` on `resource` (anyone may PUB the trace topic)."""
    if perm == PUB and resource == TRACE_TOPIC:
        return
    owned = account.owned(resource)
    if not check_permission(perm, owned):
        raise AclDenied(
            f"ACL: accessKey={access_key} needs {perm_name(perm)} on {_describe(resource)}, "
            f"has {perm_name(owned)}"
        )
