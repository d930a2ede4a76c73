"""POP acks and changes of invisibility answered OK through a 5.x front hold on the next DLedger leader
(``mqctl up --dledger 3``): each is a revive record held by the group's quorum before it is answered, and
a member elected leader reads them before it lends. The followers' copy of the ack watermark (every
10 s) is not waited for: acks land above unacked messages, where no watermark covers them."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from tests.dledger.test_group import elected_master, member_pid
from tests.dledger.test_grpc_failover import META, receive
from tests.dledger.test_roles import (
    grpc_port,
    hand_over,
    member_addrs,
    new_master,
    quick,
    raft_group,
    runner,
    topic_everywhere,
)
from tests.support.broker import BrokerClient

pytestmark = pytest.mark.slow

TOPIC = "PopQ"
GROUP = "GPopQ"
BODIES = [f"m{i}".encode() for i in range(12)]
#: Acked: in each of the 2 queues every other one, above an unacked one (m0 and m3 are not acked).
ACKED = [b for b in BODIES if int(b[1:]) % 4 in (1, 2)]
CHANGED = b"m3"


def ack_on(port: int, handles: list[str]) -> list[int]:
    """One AckMessage of `handles` on a front: each entry's status code."""
    import grpc

    from tests.support.grpc5 import MessagingServiceStub, pb, spb

    entries = [spb.AckMessageEntry(message_id="0" * 34, receipt_handle=h) for h in handles]
    request = spb.AckMessageRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), entries=entries
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = MessagingServiceStub(channel).AckMessage(request, metadata=META, timeout=10)
    return [int(e.status.code) for e in reply.entries]


def change_on(port: int, handle: str, seconds: int) -> tuple[int, str]:
    """ChangeInvisibleDuration of `handle` on a front: its status code and the new handle."""
    import grpc

    from tests.support.grpc5 import MessagingServiceStub, pb, spb

    request = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), receipt_handle=handle
    )
    request.invisible_duration.FromSeconds(seconds)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = MessagingServiceStub(channel).ChangeInvisibleDuration(request, metadata=META, timeout=10)
    return int(reply.status.code), reply.receipt_handle


async def lend_all(client: RemotingClient, data: Path, leader: str) -> tuple[int, dict[bytes, str]]:
    """BODIES sent to the leader (2 queues) and all received through its front (60 s): its gRPC port
    and each body's handle."""
    on = BrokerClient(leader, client)
    await on.create_topic(TOPIC, 2)
    await topic_everywhere(client, data, TOPIC)
    for i, body in enumerate(BODIES):
        assert (await on.send(TOPIC, body, queue_id=i % 2)).code == 0
    port = await grpc_port(client, leader)
    lent: dict[bytes, str] = {}
    deadline = time.monotonic() + 30
    while len(lent) < len(BODIES):
        assert time.monotonic() < deadline, sorted(lent)
        lent.update(await asyncio.to_thread(receive, port, TOPIC, GROUP, 60))
    return port, lent


async def settle_some(port: int, lent: dict[bytes, str]) -> str:
    """ACKED acked and CHANGED lent on for 60 s more on the leader's front, each answered OK: the
    changed message's new handle."""
    from tests.support.grpc5 import pb

    assert await asyncio.to_thread(ack_on, port, [lent[b] for b in ACKED]) == [pb.OK] * len(ACKED)
    code, handle = await asyncio.to_thread(change_on, port, lent[CHANGED], 60)
    assert code == pb.OK and handle
    return handle


async def lent_again(port: int, expected: int) -> list[bytes]:
    """What the front lends: received until `expected` came (30 s at most), then one more long poll for
    anything that should not come."""
    again: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(again) < expected and time.monotonic() < deadline:
        again += [b for b, _ in await asyncio.to_thread(receive, port, TOPIC, GROUP, 60)]
    again += [b for b, _ in await asyncio.to_thread(receive, port, TOPIC, GROUP, 60)]
    return sorted(again)


async def check_the_new_leader(port: int, changed_handle: str) -> None:
    """The new leader lends exactly the messages neither acked nor changed, and takes the changed one's
    handle: its ack is answered OK."""
    from tests.support.grpc5 import pb

    unsettled = sorted(set(BODIES) - set(ACKED) - {CHANGED})
    again = await lent_again(port, len(unsettled))
    print("lent again by the new leader:", b" ".join(again).decode())
    assert again == unsettled
    assert await asyncio.to_thread(ack_on, port, [changed_handle]) == [pb.OK]


async def test_acks_and_a_change_answered_ok_hold_on_the_leader_elected_after_a_kill(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Twelve messages received from the leader's front, six acked and one lent on for 60 s, each
    answered OK; the leader SIGKILLed at once. The new leader lends the other five again, never an acked
    or the changed one, and the change's handle acks there."""
    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        old = await elected_master(client, ns)
        port, lent = await lend_all(client, data, old)
        changed_handle = await settle_some(port, lent)
        os.kill(member_pid(data, old), signal.SIGKILL)
        new = await new_master(client, ns, old)
        await check_the_new_leader(await grpc_port(client, new), changed_handle)


async def test_acks_and_a_change_answered_ok_hold_across_a_leadership_transfer(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The same, the leadership handed over ('broker ha transfer') right after the answers; the deposed
    leader then answers its own handles as no longer valid."""
    from tests.support.grpc5 import pb

    async with raft_group(tmp_path, cli_env) as (data, ns, client):
        mq = runner({**quick(cli_env), "NAMESRV_ADDR": ns})
        old = await elected_master(client, ns)
        port, lent = await lend_all(client, data, old)
        changed_handle = await settle_some(port, lent)
        follower = next(a for a in member_addrs(data) if a != old)
        await hand_over(mq, data, follower)
        assert await new_master(client, ns, old) == follower
        await check_the_new_leader(await grpc_port(client, follower), changed_handle)
        assert await asyncio.to_thread(ack_on, port, [lent[b"m0"]]) == [pb.INVALID_RECEIPT_HANDLE]
