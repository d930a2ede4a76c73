"""ACL on timer messages parked in the timer topic: an offset names their real topic's permission."""

from __future__ import annotations

from pathlib import Path

from daemon.remoting.codes import RequestCode, ResponseCode
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, as_account, write_acl
from tests.support.broker import start_cluster, stop_cluster

READER = """\
  - accessKey: reader
    secretKey: reader-secret
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
    topicPerms:
      - TopicDeny=DENY
"""


async def test_a_parked_timer_message_is_read_by_offset_only_with_sub_on_its_real_topic(
    tmp_path: Path,
) -> None:
    """An account that may read every topic but TopicDeny must not read TopicDeny's message while it
    waits in the timer topic (which its default permission covers)."""
    home = tmp_path / "home"
    write_acl(home, PLAIN_ACL + READER)
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home))
    admin = await as_account(handle, ADMIN_AK, ADMIN_SK)
    reader = await as_account(handle, "reader", "reader-secret")
    try:
        broker = handle.broker
        broker.topics.create_system_like("TopicDeny", 1, 6)
        parked_at = broker.store.max_phy_offset
        r = await admin.send("TopicDeny", b"top-secret", props={"TIMER_DELAY_SEC": "600"})
        assert r.code == ResponseCode.SUCCESS, r.remark
        view = await reader.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(parked_at)})
        assert view.code == ResponseCode.NO_PERMISSION and b"top-secret" not in view.body, view.remark
        assert "TopicDeny" in (view.remark or "")
    finally:
        await admin.client.close()
        await reader.client.close()
        await stop_cluster(handle)
