"""``mqctl cluster``: clusters and their brokers."""

from __future__ import annotations

import typer

from mqctl.cli.common import ClusterOpt, ContextOpt, NamesrvOpt, OutputOpt, WatchOpt, online

app = typer.Typer(help="Clusters and their brokers.", no_args_is_help=True)


@app.command("list")
def list_(
    cluster: ClusterOpt = None,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
    watch: WatchOpt = None,
) -> None:
    """Every broker the NameServer knows: cluster, broker name, id (0 = master), address and role."""
    from mqctl.services.cluster import broker_list

    online(lambda admin: broker_list(admin, cluster), namesrv=namesrv, context=context, output=output, watch=watch)


@app.command("status")
def status(
    cluster: ClusterOpt = None,
    namesrv: NamesrvOpt = None,
    context: ContextOpt = None,
    output: OutputOpt = "table",
    watch: WatchOpt = None,
) -> None:
    """Each broker's version, put/get TPS, CommitLog disk ratio, max offset, role and a slave's lag (bytes)."""
    from mqctl.services.cluster import cluster_status

    online(lambda admin: cluster_status(admin, cluster), namesrv=namesrv, context=context, output=output, watch=watch)
