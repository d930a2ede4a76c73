"""``mqctl export``: a cluster's topics, groups and (optionally) offsets and ACL accounts as one file."""

from __future__ import annotations

from typing import Annotated

import typer

from mqctl.cli.common import ClusterOpt, cluster_options, online

app = typer.Typer()  # its help: NOUNS in mqctl.cli.app


@app.callback(invoke_without_command=True)
@cluster_options()
def export(
    cluster: ClusterOpt = None,
    offsets: Annotated[bool, typer.Option("--offsets", help="Add the groups' committed offsets.")] = False,
    acl: Annotated[bool, typer.Option("--acl", help="Add the ACL accounts (never their secrets).")] = False,
    special_topics: Annotated[
        bool,
        typer.Option(
            "--special-topics", help="Add the retry and dead-letter topics (mqadmin exportMetadata -s)."
        ),
    ] = False,
) -> None:
    """Write the cluster's topics and subscription groups (sorted, no timestamp: two exports of the same
    cluster are the same file) for 'mqctl apply -f FILE'; save it with '-o yaml > cluster.yaml'."""
    import sys

    from mqctl.output import printable
    from mqctl.services.metadata import export as export_metadata

    def warn(text: str) -> None:
        sys.stderr.write(f"mqctl: warning: {printable(text, newlines=False)}\n")

    online(
        lambda admin: export_metadata(
            admin,
            cluster=cluster,
            offsets=offsets,
            acl=acl,
            special=special_topics,
            warn=warn,
        )
    )
