"""``mqctl cluster``: clusters and their brokers."""

from __future__ import annotations

import typer

from mqctl.cli.common import ClusterOpt, cluster_options, online

app = typer.Typer(no_args_is_help=True)  # its help: NOUNS in mqctl.cli.app


@app.command("list")
@cluster_options(watch=True)
def list_(
    cluster: ClusterOpt = None,
) -> None:
    """Every broker the NameServer knows: cluster, broker name, id (0 = master), address and role."""
    from mqctl.services.cluster import broker_list

    online(lambda admin: broker_list(admin, cluster))


@app.command("status")
@cluster_options(watch=True)
def status(
    cluster: ClusterOpt = None,
) -> None:
    """Each broker's version, put/get TPS, CommitLog disk ratio, max offset, role and a slave's lag (bytes)."""
    from mqctl.services.cluster import cluster_status

    online(lambda admin: cluster_status(admin, cluster))
