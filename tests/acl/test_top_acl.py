"""`mqctl top`'s data source signs with the invocation's credentials like every other command."""

from __future__ import annotations

import pytest

from mqctl.top.live import LiveSource
from tests.support.acl import USER_AK, USER_SK
from tests.support.broker import ClusterHandle


async def test_top_snapshot_is_signed(acl_cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    acl_cluster.broker.topics.create_system_like("TopicA", 2, 6)
    await acl_cluster.broker.register_all()
    monkeypatch.delenv("MQCTL_ACCESS_KEY", raising=False)
    anonymous = LiveSource([acl_cluster.namesrv_addr])
    try:
        refused = await anonymous.snapshot(frozenset({"overview", "topics"}))
    finally:
        await anonymous.close()
    assert any("no AccessKey" in e for e in refused.errors), refused.errors

    monkeypatch.setenv("MQCTL_ACCESS_KEY", USER_AK)
    monkeypatch.setenv("MQCTL_SECRET_KEY", USER_SK)
    signed = LiveSource([acl_cluster.namesrv_addr])
    try:
        seen = await signed.snapshot(frozenset({"overview", "topics"}))
    finally:
        await signed.close()
    assert not seen.errors, seen.errors
    assert seen.topics is not None and "TopicA" in {t.name for t in seen.topics}


async def test_a_refusing_broker_shows_acl_denied_not_down(
    acl_cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker that answers but refuses (another cluster's ACL) is up: top says why it shows nothing."""
    from mqctl.top.app import down_summary
    from mqctl.top.format import broker_cells

    monkeypatch.delenv("MQCTL_ACCESS_KEY", raising=False)
    anonymous = LiveSource([acl_cluster.namesrv_addr])
    try:
        refused = await anonymous.snapshot(frozenset({"overview"}))
    finally:
        await anonymous.close()
    assert refused.overview is not None
    (broker,) = refused.overview.brokers
    cells = broker_cells(broker)
    assert cells[3] == "ACL denied" and "no AccessKey" in cells[-1], cells
    assert down_summary(refused.overview.brokers) == f"ACL denied: {broker.name}"
