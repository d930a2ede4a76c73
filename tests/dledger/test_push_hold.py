"""A leader's pushes under a burst of sends, in a group of three brokers in this process (fast timings).

Sixteen senders pipelined on one connection keep the followers busy, so the leader's rounds of sends wait
for the next polls' before they are pushed (`Node.hold_push`, its rules tested in `test_machines`): every
send is still acknowledged, every member commits every entry, and once the burst is over no push is left
queued (a round held for ever would leave the next sends to the 10 ms tick). The group is STEADY: on a
loaded host a burst's rounds come late, and what is asserted is that every send is acknowledged, not how
soon (a send waiting past FAST's second, or an election in the middle, answers a failure).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.remoting.codes import ResponseCode
from tests.dledger.test_rejoin import STEADY, led, members, running
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


async def test_a_burst_of_sends_is_acknowledged_and_committed_everywhere_with_no_push_left_queued(
    tmp_path: Path,
) -> None:
    async with running([{**k, **STEADY} for k in members(tmp_path)]) as (brokers, client):
        leader, on = await led(brokers, client, "Burst", 1)

        async def sender(i: int) -> list[int]:
            return [
                (await on.send("Burst", b"burst-%d-%d" % (i, j), queue_id=0, timeout=120)).code
                for j in range(25)
            ]

        codes = await asyncio.gather(*(sender(i) for i in range(16)))
        assert {code for sent in codes for code in sent} == {ResponseCode.SUCCESS}
        assert leader.dledger is not None
        last = leader.dledger.log.last_index
        assert last >= 400  # (every send an entry of its own)

        def everywhere() -> bool:
            return all(
                b is not None and b.dledger is not None and b.dledger.log.committed_index == last
                for b in brokers
            )

        await wait_until(everywhere, 60)
        assert not leader.dledger._push_soon
