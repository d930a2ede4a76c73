"""``mqctl acl``: accounts and whitelists of brokers running aclEnable=true (request codes 50-54)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mqctl.cli.common import (
    BrokerAddrOpt,
    ClusterOpt,
    YesOpt,
    cluster_options,
    confirm,
    online,
)

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app

AccessKeyOpt = Annotated[str, typer.Option("--access-key", "-a", help="The account's access key.")]
ShowSecretOpt = Annotated[
    bool,
    typer.Option(
        "--show-secret",
        help="Print the secret keys a broker answers (a RocketMQ broker's; ours sends none: read its ACL file).",
    ),
]
SecretOpt = Annotated[
    str | None, typer.Option("--secret-key", "-s", help="The account's secret key (7+ chars).")
]
AdminOpt = Annotated[
    bool | None, typer.Option("--admin/--no-admin", help="Admin account (may change the broker).")
]
TopicPermOpt = Annotated[
    list[str] | None, typer.Option("--topic-perm", help="TOPIC=PERM (DENY, PUB, SUB, PUB|SUB); repeatable.")
]
GroupPermOpt = Annotated[list[str] | None, typer.Option("--group-perm", help="GROUP=PERM; repeatable.")]
DefaultTopicOpt = Annotated[
    str | None, typer.Option("--default-topic-perm", help="Perm for unlisted topics.")
]
DefaultGroupOpt = Annotated[
    str | None, typer.Option("--default-group-perm", help="Perm for unlisted groups.")
]
SecretFileOpt = Annotated[
    Path | None,
    typer.Option("--secret-key-file", help="Read the secret key from this file (keeps it out of ps)."),
]
WhiteOpt = Annotated[
    str | None, typer.Option("--white-address", help="Addresses trusted without a signature (e.g. 10.0.0.*).")
]


@app.command("ls")
@cluster_options()
def ls(
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    show_secret: ShowSecretOpt = False,
) -> None:
    """List the accounts of each broker (GET_BROKER_CLUSTER_ACL_CONFIG)."""
    from mqctl.services.acl import list_accounts

    online(
        lambda admin: list_accounts(admin, cluster=cluster, broker=broker, show_secret=show_secret),
    )


@app.command("show")
@cluster_options()
def show(
    access_key: Annotated[
        str | None,
        typer.Argument(
            help="Account to show, as -a (default: each broker's ACL summary).", show_default=False
        ),
    ] = None,
    key_option: Annotated[
        str | None,
        typer.Option("--access-key", "-a", help="Account to show, as create/update/delete take it."),
    ] = None,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    show_secret: ShowSecretOpt = False,
) -> None:
    """Show one account, or each broker's ACL version (the time of its last change, and its counter) and
    global whitelist."""
    from mqctl.errors import UsageError
    from mqctl.services.acl import show as show_

    if key_option is not None and access_key is not None and key_option != access_key:
        raise UsageError(f"two accounts named: {access_key!r} and -a {key_option!r}; give one")
    access_key = access_key if access_key is not None else key_option

    online(
        lambda admin: show_(admin, access_key, cluster=cluster, broker=broker, show_secret=show_secret),
    )


def _upsert(mode: str, spec: Any, cluster: str | None, broker: str | None) -> None:
    from mqctl.services.acl import upsert

    online(lambda admin: upsert(admin, spec, cluster=cluster, broker=broker, mode=mode), changes=True)


def _spec(secret_file: Path | None, **fields: Any) -> Any:
    from mqctl.errors import UsageError
    from mqctl.services.acl import AccountSpec

    if secret_file is not None:
        if fields["secret_key"]:
            raise UsageError("give --secret-key or --secret-key-file, not both")
        fields["secret_key"] = secret_file.read_text(encoding="utf-8").strip()
    fields["topic_perms"] = fields["topic_perms"] or []
    fields["group_perms"] = fields["group_perms"] or []
    return AccountSpec(**fields)


def _account_command(mode: str, doc: str) -> None:
    """Register ``acl create`` or ``acl update``: the same options, one meaning each; only the request's
    handling of an existing account differs (see :func:`_upsert`)."""

    @cluster_options()
    def command(
        access_key: AccessKeyOpt,
        secret_key: SecretOpt = None,
        secret_key_file: SecretFileOpt = None,
        admin: AdminOpt = None,
        topic_perm: TopicPermOpt = None,
        group_perm: GroupPermOpt = None,
        default_topic_perm: DefaultTopicOpt = None,
        default_group_perm: DefaultGroupOpt = None,
        white_address: WhiteOpt = None,
        cluster: ClusterOpt = None,
        broker: BrokerAddrOpt = None,
    ) -> None:
        spec = _spec(
            secret_key_file, access_key=access_key, secret_key=secret_key, admin=admin, white_address=white_address,
            default_topic_perm=default_topic_perm, default_group_perm=default_group_perm,
            topic_perms=topic_perm, group_perms=group_perm,
        )  # fmt: skip
        _upsert(mode, spec, cluster, broker)

    command.__doc__ = doc
    app.command(mode)(command)


_account_command(
    "create", "Create an account on each broker (UPDATE_AND_CREATE_ACL_CONFIG); an existing one is refused."
)
_account_command(
    "update", "Change an account; what is not given stays (a perm list given replaces that list)."
)


@app.command("delete")
@cluster_options()
def delete(
    access_key: AccessKeyOpt,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    yes: YesOpt = False,
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="An account no broker holds is not an error.")
    ] = False,
) -> None:
    """Delete an account from each broker (DELETE_ACL_CONFIG); asks first unless --yes.

    An account no broker holds exits 3, unless --if-exists."""
    from mqctl.services.acl import delete as delete_

    confirm(f"delete ACL account {access_key}?", yes=yes)
    online(
        lambda admin: delete_(admin, access_key, cluster=cluster, broker=broker, if_exists=if_exists),
        changes=True,
    )


whitelist_app = typer.Typer(
    help="The global whitelist: addresses trusted without credentials.", no_args_is_help=True
)
app.add_typer(whitelist_app, name="whitelist")


@whitelist_app.command("set")
@cluster_options()
def whitelist_set(
    addresses: Annotated[
        list[str] | None,
        typer.Argument(help="Address patterns (10.0.0.*, 10.1.1.{1,2}, ...); none clears it."),
    ] = None,
    cluster: ClusterOpt = None,
    broker: BrokerAddrOpt = None,
    yes: YesOpt = False,
) -> None:
    """Replace globalWhiteRemoteAddresses on each broker (UPDATE_GLOBAL_WHITE_ADDRS_CONFIG)."""
    from mqctl.services.acl import set_whitelist

    if addresses and any(a.strip() in ("*", "*.*.*.*") for a in addresses):
        confirm("'*' trusts every address: ACL is then off in effect. Continue?", yes=yes)
    online(lambda admin: set_whitelist(admin, addresses or [], cluster=cluster, broker=broker), changes=True)
