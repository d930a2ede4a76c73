"""``offset reset`` plans writes: a broker whose offset table (GET_ALL_CONSUMER_OFFSET) cannot be read
fails the plan, in every mode, instead of reading its 0s as "never committed" (``--from-group`` then left
the source's rewound queues out and the target kept its own offsets)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.broker.bodies import TopicOffset
from daemon.remoting.codes import RequestCode
from daemon.remoting.errors import RemotingTimeoutError
from mqctl.admin.client import Admin
from mqctl.errors import NothingReadError
from mqctl.services import offsets
from mqctl.services.fanout import collecting
from store import SubscriptionGroupConfig

ADDR = "127.0.0.1:2"
T = "Old"
SRC, DST = "Src", "Dst"
#: the source committed 0 on queue 0 (rewound to the start) and 40 on queue 1; the target is at 100 on both
COMMITTED = {(SRC, T, 0): 0, (SRC, T, 1): 40, (DST, T, 0): 100, (DST, T, 1): 100}

TARGETS = [
    offsets.ResetTarget("group", source=SRC),
    offsets.ResetTarget("earliest"),
    offsets.ResetTarget("latest"),
    offsets.ResetTarget("offset", value=10),
    offsets.ResetTarget("shift", value=-5),
]


async def _plan(
    monkeypatch: pytest.MonkeyPatch, group: str, target: offsets.ResetTarget, *, table_fails: bool
):
    admin = Admin(["127.0.0.1:1"], timeout=0.5)

    async def queue_offsets(admin: Admin, topic: str, **_: Any) -> list[tuple[str, str, int, TopicOffset]]:
        return [("broker-a", ADDR, q, TopicOffset(0, 200)) for q in (0, 1)]

    async def consumer_offset(addr: str, group: str, topic: str, queue_id: int) -> int | None:
        return COMMITTED.get((group, topic, queue_id), 0)

    async def all_consumer_offsets(addr: str) -> dict[tuple[str, str, int], int]:
        if table_fails:
            raise RemotingTimeoutError(ADDR, 0.5, RequestCode.GET_ALL_CONSUMER_OFFSET)
        return dict(COMMITTED)

    async def group_configs(addr: str) -> dict[str, SubscriptionGroupConfig]:
        return {SRC: SubscriptionGroupConfig(SRC), DST: SubscriptionGroupConfig(DST)}

    monkeypatch.setattr(offsets, "queue_offsets", queue_offsets)
    monkeypatch.setattr(admin, "consumer_offset", consumer_offset)
    monkeypatch.setattr(admin, "all_consumer_offsets", all_consumer_offsets)
    monkeypatch.setattr(admin, "group_configs", group_configs)
    try:
        with collecting():
            return await offsets.plan(admin, group, T, target)
    finally:
        await admin.client.close()


async def test_from_group_copies_a_committed_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = await _plan(monkeypatch, DST, offsets.ResetTarget("group", source=SRC), table_fails=False)
    assert [(r.queue_id, r.new) for r in rows] == [(0, 0), (1, 40)]


async def test_from_group_fails_on_an_unread_source_table(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: planned [(0, 100), (1, 40)]: the source's committed 0 read as never committed, not copied
    with pytest.raises(NothingReadError, match=ADDR):
        await _plan(monkeypatch, DST, offsets.ResetTarget("group", source=SRC), table_fails=True)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.kind)
async def test_every_mode_fails_on_an_unread_table(
    monkeypatch: pytest.MonkeyPatch, target: offsets.ResetTarget
) -> None:
    # the group being reset holds a 0 too (queue 0 of the source): its own table is read strictly as well
    with pytest.raises(NothingReadError, match="offset table"):
        await _plan(monkeypatch, SRC, target, table_fails=True)
