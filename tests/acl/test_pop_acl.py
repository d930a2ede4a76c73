"""The POP codes under ACL, as the 5.x broker checks them: SUB on the topic and on the group."""

from __future__ import annotations

import json
from pathlib import Path

from daemon.remoting.codes import RequestCode, ResponseCode
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, USER_AK, USER_SK, as_account, write_acl
from tests.support.broker import start_cluster, stop_cluster
from tests.support.pop import PopClient

ACL = PLAIN_ACL.replace(
    "      - TopicDeny=DENY\n", "      - TopicDeny=DENY\n    groupPerms:\n      - GDeny=DENY\n"
)


async def test_pop_ack_change_need_sub_on_topic_and_group(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_acl(home, ACL)
    handle = await start_cluster(tmp_path, acl_enable=True, rocketmq_home=str(home))
    admin = await as_account(handle, ADMIN_AK, ADMIN_SK)
    user = await as_account(handle, USER_AK, USER_SK)
    anon = await as_account(handle, None)
    try:
        for topic in ("TopicA", "TopicB"):
            await admin.create_topic(topic, 1)
            assert (await admin.send(topic, b"x")).code == 0
        mine = PopClient(user, "GOk")
        got = await mine.pop("TopicA")
        assert [p.body for p in got] == [b"x"]
        # the topic needs SUB (TopicB: the account's default DENY), the group too (GDeny)
        denied = await mine.pop_raw("TopicB")
        assert denied.code == ResponseCode.NO_PERMISSION and "TopicB" in (denied.remark or "")
        assert (await PopClient(user, "GDeny").pop_raw("TopicA")).code == ResponseCode.NO_PERMISSION
        assert (await PopClient(anon, "GOk").pop_raw("TopicA")).code == ResponseCode.NO_PERMISSION
        # an ack or change naming a topic or group the account may not read is refused before it acts
        theirs = await PopClient(admin, "GDeny").pop("TopicB")
        assert len(theirs) == 1
        assert (await PopClient(user, "GDeny").ack("TopicB", theirs[0])).code == ResponseCode.NO_PERMISSION
        changed = await PopClient(user, "GDeny").change_invisible("TopicB", theirs[0], 1)
        assert changed.code == ResponseCode.NO_PERMISSION
        batch = {
            "acks": [
                {
                    "c": "GDeny",
                    "t": "TopicB",
                    "r": "0",
                    "so": 0,
                    "q": 0,
                    "rq": 0,
                    "pt": 0,
                    "it": 0,
                    "b": "AQ==",
                }
            ]
        }
        r = await user.call(RequestCode.BATCH_ACK_MESSAGE, body=json.dumps(batch).encode())
        assert r.code == ResponseCode.NO_PERMISSION
        assert handle.broker.pop.in_flight() == {"GOk": 1, "GDeny": 1}
        assert (await mine.ack("TopicA", got[0])).code == 0
    finally:
        for c in (admin, user, anon):
            await c.client.close()
        await stop_cluster(handle)
