"""What a flood of registrations from a peer beyond loopback makes the NameServer hold. Registration is open
to any peer (protected mode leaves it open), and a slave's topic table is not taken into the routes (as in
4.9.8), so `routeMaxQueueDatas` does not count it: the NameServer held each registering address's last
body, bytes and all, to skip its next parse, and a peer registering invented slaves with 16 MiB bodies
made it hold 16 MiB per address."""

from __future__ import annotations

import asyncio
import gc
import sys
import tracemalloc
from pathlib import Path

import pytest

from daemon.namesrv.controller import NamesrvController
from tests.support.bounded import run_bounded
from tests.support.namesrv import namesrv_config
from tests.support.netns import peer_namespace

#: Registrations the peer sends, and the topics of each body (some 3 MiB of JSON).
SLAVES = 8
TOPICS = 8_000

#: From the namespace, against argv[1]: SLAVES invented slaves (broker id 1) at the peer's address argv[2]
#: (protected mode takes no other host's), each registering a body of TOPICS topics at its own port, then
#: each one again; prints the answers' codes.
_FLOOD = f"""
import asyncio, sys
from daemon.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from daemon.remoting.client import RemotingClient
from daemon.remoting.command import RemotingCommand
from daemon.remoting.headers import RegisterBrokerRequestHeader

async def main():
    table = {{f"Invented-{{'x' * 100}}-{{i}}": TopicConfig(f"Invented-{{'x' * 100}}-{{i}}", 8, 8) for i in range({TOPICS})}}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1700000000000))).encode()
    codes = []
    async with RemotingClient() as client:
        for again in range(2):
            for i in range({SLAVES}):
                addr = f"{{sys.argv[2]}}:{{10911 + i}}"
                header = RegisterBrokerRequestHeader(f"invented-{{i}}", addr, "DefaultCluster", addr, 1)
                request = RemotingCommand.request(103, header.to_ext_fields(), body)
                codes.append((await client.invoke(sys.argv[1], request, 120)).code)
    print(len(body), *codes)

asyncio.run(main())
"""


@pytest.mark.slow
async def test_invented_slaves_registering_large_bodies_leave_no_body_held(tmp_path: Path) -> None:
    with peer_namespace() as peer:
        controller = NamesrvController(namesrv_config(tmp_path, listen_host=peer.host_ip))
        await controller.start()
        try:
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            argv = ["ip", "netns", "exec", peer.name, sys.executable, "-c", _FLOOD]
            done = await run_bounded(
                [*argv, f"{peer.host_ip}:{controller.port}", peer.peer_ip], deadline=600, what="flood"
            )
            assert done.returncode == 0, done.stderr
            size, *codes = (int(x) for x in done.stdout.split())
            assert codes == [0] * (2 * SLAVES)  # registered: a slave's table is not the routes' to cap
            # listed while they register (the flood's connection closed as it ended: one address is dropped)
            assert len(controller.routes.broker_live_table) >= SLAVES - 1
            await asyncio.sleep(0)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
            await controller.stop()
    assert size > 2 << 20
    # a few KiB an address (its routes, its live entry, a digest of its body) and what the flood's connection
    # read into (a buffer of a frame's size): never the bodies, seven or eight times their size before
    assert held < 3 * size, f"{held} bytes held after {SLAVES} registrations of {size} bytes each"
