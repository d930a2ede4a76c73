"""A consumer group's subscriptions are its members' own: one member's heartbeat (anyone may send one
naming an existing group) does not change what another member's pulls match, nor take a topic from
the group that another member lists."""

from __future__ import annotations

from daemon.broker.bodies import ConsumerData, HeartbeatData, SubscriptionData
from daemon.broker.headers import PullMessageRequestHeader
from daemon.broker.managers.consumers import CHANNEL_EXPIRED_MS, ClientChannel, ConsumerManager
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.connection import RequestDispatcher
from daemon.remoting.memory import connect_pair
from tests.support.broker import BrokerHandle, send_fields

R = RequestCode
NEVER = 1 << 62  # a subVersion no real client reaches (it is a time in ms)


def beat(client_id: str, *subs: SubscriptionData) -> bytes:
    return HeartbeatData(client_id, [], [ConsumerData("G", subscription_data_set=list(subs))]).dumps()


def pull(queue_offset: int = 0, sub_version: int = 0) -> dict[str, str]:
    """A 4.9.8 push consumer's pull by default (postSubscriptionWhenPull=false): no subscription flag,
    so the broker filters by the heartbeat's subscription."""
    header = PullMessageRequestHeader("G", "T", 0, queue_offset, 32, 0, 0, 0, sub_version, None, None)
    return {k: str(v) for k, v in header.to_ext_fields().items()}


async def test_a_members_heartbeat_changes_no_other_members_pulls(broker: BrokerHandle) -> None:
    await broker.create_topic("T", 1)
    for _ in range(3):
        sent = await broker.call(R.SEND_MESSAGE_V2, send_fields("T", tags="A"), b"victim-body")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    mine = SubscriptionData("T", "*", sub_version=1000)
    assert (await broker.call(R.HEART_BEAT, body=beat("victim@1", mine))).code == ResponseCode.SUCCESS
    nothing = SubscriptionData("T", "NOPE", False, ["NOPE"], [2402061], NEVER, "TAG")
    async with RemotingClient() as other:
        joined = await other.invoke(
            broker.addr, RemotingCommand.request(R.HEART_BEAT, {}, beat("evil@1", nothing))
        )
        assert joined.code == ResponseCode.SUCCESS
        info = broker.broker.consumers.get("G")
        assert info is not None and info.subscriptions["T"].sub_version == NEVER  # the group's view
        pulled = await broker.call(R.PULL_MESSAGE, pull(sub_version=1000))
        assert pulled.code == ResponseCode.SUCCESS, (pulled.code, pulled.remark)
        assert pulled.body.count(b"victim-body") == 3
        # a member listing another topic only takes T from nobody: the group keeps what its members list
        elsewhere = SubscriptionData("Other", "*", sub_version=NEVER)
        moved = await other.invoke(
            broker.addr, RemotingCommand.request(R.HEART_BEAT, {}, beat("evil@1", elsewhere))
        )
        assert moved.code == ResponseCode.SUCCESS
        assert sorted(info.subscriptions) == ["Other", "T"]
        assert info.subscriptions["T"].sub_version == 1000  # the victim's: the one member listing T
        again = await broker.call(R.PULL_MESSAGE, pull(sub_version=1000))
        assert again.code == ResponseCode.SUCCESS and again.body.count(b"victim-body") == 3
        # a connection that registered nothing is filtered by the group's view, as 4.9.8 filters
        stranger = await other.invoke(broker.addr, RemotingCommand.request(R.PULL_MESSAGE, pull()))
        assert (
            stranger.code == ResponseCode.SUBSCRIPTION_NOT_EXIST or stranger.body.count(b"victim-body") == 3
        )
    # the other member left: its topic leaves the group with it
    assert sorted(info.subscriptions) == ["T"]


async def test_a_lone_consumer_merges_its_subscriptions_as_4_9_8(broker: BrokerHandle) -> None:
    """One member: the group's subscriptions are what 4.9.8's updateSubscription makes of its heartbeats."""
    await broker.create_topic("T", 1)
    newer = SubscriptionData("T", "A", sub_version=2000)
    older = SubscriptionData("T", "*", sub_version=1000)
    extra = SubscriptionData("U", "*", sub_version=1000)
    await broker.call(R.HEART_BEAT, body=beat("c@1", newer, extra))
    info = broker.broker.consumers.get("G")
    assert info is not None and info.subscriptions == {"T": newer, "U": extra}
    await broker.call(R.HEART_BEAT, body=beat("c@1", older))  # an older subVersion keeps the newer; U drops
    assert info.subscriptions == {"T": newer}
    stale = await broker.call(R.PULL_MESSAGE, pull(sub_version=3000))
    assert stale.code == ResponseCode.SUBSCRIPTION_NOT_LATEST


async def test_an_expired_member_leaves_only_when_its_client_has_no_other_live_connection() -> None:
    """The scan of expired members counts each group's client ids once (asking each expiry whether its
    client was still there walked every member): a client with another live connection stays, one whose
    every connection expired leaves, once."""
    manager = ConsumerManager()
    left: list[tuple[str, str]] = []
    manager.on_member_left = lambda group, client_id, conn: left.append((group, client_id))
    conns = [connect_pair(RequestDispatcher())[1] for _ in range(4)]
    data = ConsumerData("G", subscription_data_set=[SubscriptionData("T", "*")])
    for conn, client_id in zip(conns, ["a@1", "a@1", "b@1", "b@1"], strict=True):
        manager.register(ClientChannel(conn, client_id, "JAVA", 1), data)
    old = -CHANNEL_EXPIRED_MS - 1
    info = manager.groups["G"]
    info.channels[conns[0]].last_update = old  # one of a's two connections
    info.channels[conns[2]].last_update = info.channels[conns[3]].last_update = old  # both of b's
    manager.scan_expired()
    assert left == [("G", "b@1")]
    assert info.client_ids() == ["a@1"]


async def test_the_group_s_entry_of_a_topic_is_the_newest_a_live_member_lists() -> None:
    """The group's view kept the entry of the member that sent the highest ``subVersion`` after it left, or
    stopped listing the topic, while others listed it: a pull without its own subscription (and the admin
    commands) went on matching a departed member's filter."""
    manager = ConsumerManager()
    conns = [connect_pair(RequestDispatcher())[1] for _ in range(3)]
    subs = [
        SubscriptionData("T", tag, sub_version=version)
        for tag, version in [("A", 1000), ("B", 3000), ("C", 2000)]
    ]
    for i, (conn, sub) in enumerate(zip(conns, subs, strict=True)):
        manager.register(
            ClientChannel(conn, f"c{i}@1", "JAVA", 1), ConsumerData("G", subscription_data_set=[sub])
        )
    info = manager.groups["G"]
    assert info.subscriptions["T"] is subs[1]
    # the newest stops listing T: the next newest of those still listing it
    other = SubscriptionData("U", "*", sub_version=3000)
    manager.register(
        ClientChannel(conns[1], "c1@1", "JAVA", 1), ConsumerData("G", subscription_data_set=[other])
    )
    assert info.subscriptions == {"T": subs[2], "U": other}
    # a member whose entry the view does not hold leaves: the view keeps its own
    manager.unregister(conns[0], "G")
    assert info.subscriptions["T"] is subs[2]
    manager.register(
        ClientChannel(conns[0], "c0@1", "JAVA", 1), ConsumerData("G", subscription_data_set=[subs[0]])
    )
    # the newest leaves (its connection closed): the remaining member's
    manager.connection_closed(conns[2])
    assert info.subscriptions == {"T": subs[0], "U": other}
    manager.connection_closed(conns[0])
    assert info.subscriptions == {"U": other}
