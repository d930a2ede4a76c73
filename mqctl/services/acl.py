"""ACL accounts and whitelists on brokers, through request codes 50-54 (as mqadmin's ACL commands).

Writes go to every broker of the cluster, masters and slaves (each keeps its own plain_acl.yml),
or to the one ``--broker``. Secrets are shown only when asked for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypedDict

from daemon.acl.admin import (
    MASKED_SECRET,
    MIN_KEY_LENGTH,
    CreateAccessConfigRequestHeader,
    DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
)
from daemon.acl.plain import address_matcher, parse_perm, perm_name
from daemon.remoting.codes import RequestCode
from daemon.remoting.errors import RemotingCommandError
from mqctl.admin.client import Admin, answer_header
from mqctl.errors import ConflictError, NotFoundError, UsageError
from mqctl.output import Rows
from mqctl.services.cluster import brokers

PERMS = ("DENY", "PUB", "SUB", "PUB|SUB")
HIDDEN = MASKED_SECRET


class PlainAccount(TypedDict, total=False):
    """An account as GET_BROKER_CLUSTER_ACL_CONFIG sends it (``PlainAccessConfig``'s JSON fields)."""

    accessKey: str
    secretKey: str
    whiteRemoteAddress: str
    admin: bool
    defaultTopicPerm: str
    defaultGroupPerm: str
    topicPerms: list[str]
    groupPerms: list[str]


class AclConfigBody(TypedDict, total=False):
    """The body of GET_BROKER_CLUSTER_ACL_CONFIG (``AclConfig``'s JSON fields)."""

    globalWhiteAddrs: list[str]
    plainAccessConfigs: list[PlainAccount]


class AccountPerms(TypedDict):
    """What an account may do and from where (``export`` writes these for each account)."""

    admin: bool
    default_topic_perm: str | None
    default_group_perm: str | None
    topic_perms: list[str]
    group_perms: list[str]
    white_remote_address: str


class AccountRow(AccountPerms):
    """An account of one broker as ``acl ls|show`` print it: ``broker``, ``access_key``, ``secret_key``
    (masked unless asked for), then its permissions."""

    broker: str
    access_key: str | None
    secret_key: str | None


class AclSummary(TypedDict):
    """``acl show`` without a key: one broker's ACL version, global whitelist and account count."""

    broker: str
    broker_name: str
    cluster: str
    version: Any
    global_white_addrs: list[str]
    accounts: int


class AccountChange(TypedDict):
    """``acl create|update|delete``: what happened to the account on one broker."""

    broker: str
    access_key: str
    action: str


class WhitelistSet(TypedDict):
    """``acl whitelist set``: the whitelist one broker now has."""

    broker: str
    global_white_addrs: list[str]


@dataclass
class AccountSpec:
    """What `acl create|update` asks for; None leaves a field as the broker has it (update)."""

    access_key: str
    secret_key: str | None = None
    admin: bool | None = None
    white_address: str | None = None
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: list[str] = field(default_factory=list)
    group_perms: list[str] = field(default_factory=list)

    def check(self) -> None:
        """Refuse locally what the broker would store as DENY or refuse anyway (keys of 6 characters or
        fewer: PlainPermissionManager's rule, which answered with a long remark and exit 8)."""
        for flag, key in (("--access-key", self.access_key), ("the secret key", self.secret_key)):
            if key is not None and len(key.strip()) < MIN_KEY_LENGTH:
                shown = f" {key.strip()!r}" if flag == "--access-key" else ""
                raise UsageError(
                    f"{flag}{shown} is too short: RocketMQ wants {MIN_KEY_LENGTH} characters or more"
                )
        for text in (self.default_topic_perm, self.default_group_perm):
            if text is not None and text.upper() not in PERMS:
                raise UsageError(f"bad permission {text!r}: use one of {', '.join(PERMS)}")
        for entry in [*self.topic_perms, *self.group_perms]:
            name, sep, perm = entry.partition("=")
            if not sep or not name or perm.upper() not in PERMS:
                raise UsageError(
                    f"bad permission {entry!r}: use NAME=PERM with PERM one of {', '.join(PERMS)}"
                )
        if self.white_address:
            try:
                address_matcher(self.white_address)
            except ValueError as exc:
                raise UsageError(str(exc)) from None


async def targets(admin: Admin, cluster: str | None, broker: str | None) -> list[str]:
    """``--broker``, else every broker (masters and slaves) of ``--cluster`` or of the only cluster."""
    if broker is not None:
        return [broker]
    rows = await brokers(admin, cluster)
    clusters = sorted({r.cluster for r in rows})
    if cluster is None and len(clusters) > 1:
        raise UsageError(f"several clusters ({', '.join(clusters)}): say which with --cluster")
    if not rows:
        raise NotFoundError(f"no broker in cluster {cluster!r}" if cluster else "no broker registered")
    return [r.addr for r in rows]


async def config_of(admin: Admin, addr: str) -> AclConfigBody:
    """GET_BROKER_CLUSTER_ACL_CONFIG (54): ``globalWhiteAddrs`` and ``plainAccessConfigs``."""
    response = await admin.call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
    body: AclConfigBody = json.loads(response.body or b"{}")
    return body


def acl_off(exc: RemotingCommandError) -> bool:
    """Whether a broker refused an ACL request because its ACL is off (``aclEnable=false``)."""
    return "ACL is not enabled" in (exc.remark or "")


def account_row(addr: str, account: PlainAccount, show_secret: bool) -> AccountRow:
    """An account of GET_BROKER_CLUSTER_ACL_CONFIG as ``acl list`` shows it (its secret masked unless asked)."""
    return {
        "broker": addr,
        "access_key": account.get("accessKey"),
        "secret_key": account.get("secretKey") if show_secret else HIDDEN,
        "admin": bool(account.get("admin")),
        "default_topic_perm": account.get("defaultTopicPerm"),
        "default_group_perm": account.get("defaultGroupPerm"),
        "topic_perms": list(account.get("topicPerms") or []),
        "group_perms": list(account.get("groupPerms") or []),
        "white_remote_address": account.get("whiteRemoteAddress") or "",
    }


async def list_accounts(
    admin: Admin, *, cluster: str | None, broker: str | None, show_secret: bool = False
) -> list[AccountRow]:
    rows = Rows.of(AccountRow)
    for addr in await targets(admin, cluster, broker):
        config = await config_of(admin, addr)
        rows.extend(account_row(addr, a, show_secret) for a in config.get("plainAccessConfigs") or [])
    return rows


async def show(
    admin: Admin,
    access_key: str | None,
    *,
    cluster: str | None,
    broker: str | None,
    show_secret: bool = False,
) -> list[AccountRow] | list[AclSummary]:
    """One account on each broker, or (no key) each broker's ACL version and global whitelist."""
    if access_key is not None:
        rows = [
            r
            for r in await list_accounts(admin, cluster=cluster, broker=broker, show_secret=show_secret)
            if r["access_key"] == access_key
        ]
        if not rows:
            raise NotFoundError(f"no ACL account {access_key!r}")
        return rows
    out: list[AclSummary] = []
    for addr in await targets(admin, cluster, broker):
        info = await admin.call(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
        header = answer_header(GetBrokerAclConfigResponseHeader, info)
        config = await config_of(admin, addr)
        out.append(
            {
                "broker": addr,
                "broker_name": header.broker_name,
                "cluster": header.cluster_name,
                "version": json.loads(header.version) if header.version else None,
                "global_white_addrs": list(config.get("globalWhiteAddrs") or []),
                "accounts": len(config.get("plainAccessConfigs") or []),
            }
        )
    return out


def _merged(spec: AccountSpec, existing: PlainAccount | None) -> CreateAccessConfigRequestHeader:
    """The header for 50: what the spec says, the rest as the broker has it (4.9.8 demands the secret
    and resets `admin` on every update, so both come from the existing account when not given)."""
    old: PlainAccount = existing or {}
    # our broker masks secrets in 54 and keeps an account's own secret when an update carries the mask
    secret = spec.secret_key or old.get("secretKey")
    if not secret:
        raise UsageError("--secret-key is needed to create an account")
    return CreateAccessConfigRequestHeader(
        access_key=spec.access_key,
        secret_key=secret,
        white_remote_address=spec.white_address,
        admin=spec.admin if spec.admin is not None else bool(old.get("admin")),
        default_topic_perm=perm_name(parse_perm(spec.default_topic_perm))
        if spec.default_topic_perm
        else None,
        default_group_perm=perm_name(parse_perm(spec.default_group_perm))
        if spec.default_group_perm
        else None,
        topic_perms=",".join(spec.topic_perms) if spec.topic_perms else None,
        group_perms=",".join(spec.group_perms) if spec.group_perms else None,
    )


async def upsert(
    admin: Admin, spec: AccountSpec, *, cluster: str | None, broker: str | None, mode: str
) -> list[AccountChange]:
    """``mode`` create: refuse an existing account; update: refuse a missing one."""
    spec.check()
    rows: list[AccountChange] = []
    # every broker is read before any is written: brokers of one host often share one plain_acl.yml, and
    # the account written through the first was found on the next ("exists", exit 4, half applied)
    found = {}
    for addr in await targets(admin, cluster, broker):
        config = await config_of(admin, addr)
        found[addr] = existing = next(
            (a for a in config.get("plainAccessConfigs") or [] if a.get("accessKey") == spec.access_key), None
        )
        if mode == "create" and existing is not None:
            raise ConflictError(
                f"ACL account {spec.access_key!r} exists on {addr}", hint="use 'mqctl acl update'"
            )
        if mode == "update" and existing is None:
            raise NotFoundError(
                f"no ACL account {spec.access_key!r} on {addr}", hint="use 'mqctl acl create'"
            )
    for addr, existing in found.items():
        await admin.call(addr, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, _merged(spec, existing))
        rows.append(
            {
                "broker": addr,
                "access_key": spec.access_key,
                "action": "created" if existing is None else "updated",
            }
        )
    return rows


async def delete(
    admin: Admin, access_key: str, *, cluster: str | None, broker: str | None, if_exists: bool = False
) -> list[AccountChange]:
    """DELETE_ACL_CONFIG on each broker that holds the account (``missing`` on the others); an account no
    broker holds is NotFoundError, as for every other delete, unless ``if_exists``."""
    rows: list[AccountChange] = []
    for addr in await targets(admin, cluster, broker):
        accounts = (await config_of(admin, addr)).get("plainAccessConfigs") or []
        if not any(a.get("accessKey") == access_key for a in accounts):
            rows.append({"broker": addr, "access_key": access_key, "action": "missing"})
            continue
        await admin.call(addr, RequestCode.DELETE_ACL_CONFIG, DeleteAccessConfigRequestHeader(access_key))
        rows.append({"broker": addr, "access_key": access_key, "action": "deleted"})
    if not if_exists and all(row["action"] == "missing" for row in rows):
        raise NotFoundError(
            f"no ACL account {access_key!r}", hint="--if-exists makes a missing one a success"
        )
    return rows


async def set_whitelist(
    admin: Admin, addresses: list[str], *, cluster: str | None, broker: str | None
) -> list[WhitelistSet]:
    for pattern in addresses:
        try:
            address_matcher(pattern)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    header = UpdateGlobalWhiteAddrsConfigRequestHeader(global_white_addrs=",".join(addresses))
    rows: list[WhitelistSet] = []
    for addr in await targets(admin, cluster, broker):
        await admin.call(addr, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, header)
        rows.append({"broker": addr, "global_white_addrs": addresses})
    return rows
