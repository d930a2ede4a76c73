"""ACL administration over the wire: request codes 50-54 as 4.9.8's AdminBrokerProcessor answers them.

Edits go into the yml file that holds the account (new accounts into the default file), merged the way
4.9.8 merges them (fields the request leaves out keep their value), with the file's `dataVersion`
bumped; each file is replaced atomically and re-read at once. With ACL off the writes are refused:
an unauthenticated peer must not be able to write the file that will secure the broker later.
"""

from __future__ import annotations

import json
import logging
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.acl.plain import (
    AclConfigError,
    AclFiles,
    address_matcher,
    file_version,
    perm_name,
    read_yaml,
    strict_perm,
)
from daemon.config import write_atomically
from daemon.remoting.bodies import DataVersion
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import Connection, Processor
from daemon.remoting.errors import RemotingCommandError
from daemon.remoting.headers import CommandHeader

if TYPE_CHECKING:
    from daemon.broker.context import BrokerContext

log = logging.getLogger(__name__)

#: 4.9.8 refuses keys of 6 characters or fewer (`checkPlainAccessConfig`).
MIN_KEY_LENGTH = 7
#: What code 54 answers in place of every secret key.
MASKED_SECRET = "******"


@dataclass(slots=True)
class CreateAccessConfigRequestHeader(CommandHeader):
    JAVA_NAME = "CreateAccessConfigRequestHeader"
    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: str | None = None  # comma list NAME=PERM
    group_perms: str | None = None


@dataclass(slots=True)
class DeleteAccessConfigRequestHeader(CommandHeader):
    JAVA_NAME = "DeleteAccessConfigRequestHeader"
    access_key: str


@dataclass(slots=True)
class UpdateGlobalWhiteAddrsConfigRequestHeader(CommandHeader):
    JAVA_NAME = "UpdateGlobalWhiteAddrsConfigRequestHeader"
    global_white_addrs: str = ""
    acl_file_full_path: str | None = None


@dataclass(slots=True)
class GetBrokerAclConfigResponseHeader(CommandHeader):
    JAVA_NAME = "GetBrokerAclConfigResponseHeader"
    version: str
    broker_addr: str
    broker_name: str
    cluster_name: str
    all_acl_file_version: str = ""


def _check_perms(header: CreateAccessConfigRequestHeader) -> None:
    """Refuse a permission that is not DENY, PUB, SUB or PUB|SUB (4.9.8 answers 209 too): stored, the
    file parser would read it as DENY, and a `A=PUB;B=SUB` entry would hide its second half."""
    for where, value in (
        ("defaultTopicPerm", header.default_topic_perm),
        ("defaultGroupPerm", header.default_group_perm),
    ):
        if value is not None:
            strict_perm(value, where)
    for where, entries in (
        ("topicPerms", _split(header.topic_perms)),
        ("groupPerms", _split(header.group_perms)),
    ):
        for entry in entries or []:
            name, sep, perm = entry.partition("=")
            if not sep or not name.strip():
                raise AclConfigError(f"{where}: bad permission entry {entry!r}: expected NAME=PERM")
            strict_perm(perm, f"{where} {entry!r}")


def _split(text: str | None) -> list[str] | None:
    """Java's `UtilAll.split(s, ",")`: null stays null (the field keeps its value)."""
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def split_addresses(text: str) -> list[str]:
    """A comma list of address patterns, where `192.168.1.{1,2}` keeps its own commas (Java splits
    it apart and stores garbage)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


class AclEditor:
    """Writes the yml files behind an `AclFiles`."""

    def __init__(self, files: AclFiles) -> None:
        self.files = files

    def _load(self, path: Path) -> dict[str, Any]:
        return read_yaml(path) if path.exists() else {}

    def _write(self, path: Path, data: dict[str, Any]) -> None:
        import yaml

        version = file_version(data)
        data["dataVersion"] = [{"counter": version["counter"] + 1, "timestamp": int(time.time() * 1000)}]
        try:  # the file holds every secret key: keep the operator's mode, owner-only for a new file
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            mode = 0o600
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        write_atomically(path, text.encode("utf-8"), mode)
        self.files.reload()

    def _holder(self, access_key: str) -> Path:
        account = self.files.table.accounts.get(access_key)
        return account.source if account is not None and account.source is not None else self.files.default

    def update_account(self, header: CreateAccessConfigRequestHeader) -> None:
        """Create or merge one account (UPDATE_AND_CREATE_ACL_CONFIG). An existing account's secret stays
        when the request has none, or the mask code 54 answers (it sends no secret back)."""
        self.files.maybe_reload()
        ak, sk = header.access_key.strip(), (header.secret_key or "").strip()
        existing = self.files.table.accounts.get(ak)
        if existing is not None and sk in ("", MASKED_SECRET):
            sk = existing.secret_key
        if len(ak) < MIN_KEY_LENGTH or len(sk) < MIN_KEY_LENGTH:
            raise AclConfigError(
                f"accessKey and secretKey must be at least {MIN_KEY_LENGTH} characters (accessKey={ak})"
            )
        if header.white_remote_address:
            address_matcher(header.white_remote_address)  # a bad pattern is refused, not stored
        _check_perms(header)
        path = self._holder(ak)
        data = self._load(path)
        accounts: list[dict[str, Any]] = list(data.get("accounts") or [])
        index = next((i for i, a in enumerate(accounts) if str(a.get("accessKey")) == ak), None)
        account: dict[str, Any] = dict(accounts[index]) if index is not None else {"accessKey": ak}
        account["secretKey"] = sk
        if header.white_remote_address is not None:
            account["whiteRemoteAddress"] = header.white_remote_address
        account["admin"] = header.admin
        for key, value in (
            ("defaultTopicPerm", header.default_topic_perm),
            ("defaultGroupPerm", header.default_group_perm),
            ("topicPerms", _split(header.topic_perms)),
            ("groupPerms", _split(header.group_perms)),
        ):
            if value is not None:
                account[key] = value
        if index is None:
            accounts.append(account)
        else:
            accounts[index] = account
        data["accounts"] = accounts
        self._write(path, data)
        log.info("ACL account %s %s in %s", ak, "updated" if index is not None else "created", path)

    def delete_account(self, access_key: str) -> None:
        self.files.maybe_reload()
        if access_key not in self.files.table.accounts:
            raise AclConfigError(f"no account with accessKey={access_key}")
        path = self._holder(access_key)
        data = self._load(path)
        data["accounts"] = [a for a in data.get("accounts") or [] if str(a.get("accessKey")) != access_key]
        self._write(path, data)
        log.info("ACL account %s deleted from %s", access_key, path)

    def update_global_white(self, addresses: list[str], file: str | None) -> None:
        for pattern in addresses:
            address_matcher(pattern)
        self.files.maybe_reload()
        path = self.files.default
        if file:  # only a file the broker already reads: the request must not name any path on the host
            known = {str(p.resolve()) for p in self.files.paths()}
            if str(Path(file).resolve()) not in known:
                raise AclConfigError(f"{file} is not one of this broker's ACL files")
            path = Path(file)
        data = self._load(path)
        data["globalWhiteRemoteAddresses"] = addresses
        self._write(path, data)
        log.info("ACL globalWhiteRemoteAddresses of %s set to %s", path, addresses)

    def all_config(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_CONFIG's body: `globalWhiteAddrs` and `plainAccessConfigs`, every secret
        key masked (4.9.8 sends them: a captured or replayed request gave away every account; reading
        secrets needs the file)."""
        self.files.maybe_reload()
        table = self.files.table
        configs = []
        for account in table.accounts.values():
            configs.append(
                {
                    "accessKey": account.access_key,
                    "admin": account.admin,
                    "defaultGroupPerm": perm_name(account.default_group_perm),
                    "defaultTopicPerm": perm_name(account.default_topic_perm),
                    "groupPerms": [f"{g}={perm_name(p)}" for g, p in account.group_perms.items()],
                    "secretKey": MASKED_SECRET,
                    "topicPerms": [f"{t}={perm_name(p)}" for t, p in account.topic_perms.items()],
                    "whiteRemoteAddress": account.white_remote_address,
                }
            )
        return {"globalWhiteAddrs": list(table.global_white), "plainAccessConfigs": configs}


def processors(broker: BrokerContext) -> dict[int, Processor]:
    p = AclProcessor(broker)
    R = RequestCode
    return {
        R.UPDATE_AND_CREATE_ACL_CONFIG: p.update_account,
        R.DELETE_ACL_CONFIG: p.delete_account,
        R.GET_BROKER_CLUSTER_ACL_INFO: p.version_info,
        R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: p.update_white,
        R.GET_BROKER_CLUSTER_ACL_CONFIG: p.all_config,
    }


class AclProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def _editor(self) -> AclEditor:
        files = self.broker.acl_files
        if files is None:
            raise RemotingCommandError(
                ResponseCode.SYSTEM_ERROR,
                "ACL is not enabled on this broker (aclEnable=false in broker.conf)",
            )
        return AclEditor(files)

    def update_account(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = CreateAccessConfigRequestHeader.from_ext_fields(request.ext_fields)
        editor = self._editor()
        try:
            editor.update_account(header)
        except (AclConfigError, OSError) as exc:
            return request.make_response(
                ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
                f"The accesskey[{header.access_key}] corresponding to accessConfig has been updated failed: {exc}",
            )
        return request.make_response()

    def delete_account(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteAccessConfigRequestHeader.from_ext_fields(request.ext_fields)
        editor = self._editor()
        try:
            editor.delete_account(header.access_key)
        except (AclConfigError, OSError) as exc:
            return request.make_response(
                ResponseCode.DELETE_ACL_CONFIG_FAILED,
                f"The accesskey[{header.access_key}] corresponding to accessConfig has been deleted failed: {exc}",
            )
        return request.make_response()

    def update_white(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UpdateGlobalWhiteAddrsConfigRequestHeader.from_ext_fields(request.ext_fields)
        editor = self._editor()
        addresses = split_addresses(header.global_white_addrs)
        try:
            editor.update_global_white(addresses, header.acl_file_full_path)
        except (AclConfigError, OSError) as exc:
            return request.make_response(
                ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
                f"The globalWhiteAddresses[{header.global_white_addrs}] has been updated failed: {exc}",
            )
        return request.make_response()

    def version_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        files = self._editor().files
        files.maybe_reload()
        versions = files.table.versions
        default = versions.get(str(files.default), {"counter": 0, "timestamp": 0})
        c = self.broker.config
        header = GetBrokerAclConfigResponseHeader(
            version=DataVersion(default["counter"], default["timestamp"]).dumps().decode(),
            broker_addr=self.broker.addr,
            broker_name=c.broker_name,
            cluster_name=c.broker_cluster_name,
            all_acl_file_version=json.dumps(
                {
                    path: {"counter": v["counter"], "timestamp": v["timestamp"]}
                    for path, v in versions.items()
                },
                separators=(",", ":"),
            ),
        )
        return request.make_response(ext_fields=header.to_ext_fields())

    def all_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = json.dumps(self._editor().all_config(), separators=(",", ":"), ensure_ascii=False)
        return request.make_response(body=body.encode("utf-8"))
