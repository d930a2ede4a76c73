"""The HA port's gate under a flood: what a stranger's connections may hold while the gate asks the
NameServers whether it is a slave."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from daemon.broker.ha import GATE_WAITING_PER_HOST
from daemon.namesrv.controller import NamesrvController
from tests.support.broker import start_broker
from tests.support.namesrv import namesrv_config
from tests.support.netns import peer_namespace

pytestmark = pytest.mark.slow

#: In the namespace: argv[3] connections to argv[1]:argv[2], opened at once and held silent; prints
#: "opened", then holds them until stdin closes.
_FLOOD = """
import socket, sys
held = []
for _ in range(int(sys.argv[3])):
    try:
        held.append(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10))
    except OSError:
        pass
print("opened", flush=True)
sys.stdin.read()
"""


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_strangers_connections_waiting_for_the_gate_are_bounded(tmp_path: Path) -> None:
    """A connection to the HA port waits for the gate's NameServer look-up before it is refused, and a
    look-up waits for every NameServer configured: with one of them silent (down behind a firewall that
    drops its packets) each takes seconds. A stranger's flood meanwhile held a descriptor and a task per
    connection, without bound (the remoting port counts its own against `remotingMaxConnections`), so
    a few thousand a second exhausted the broker's descriptors, its store's files too."""
    silent = socket.socket()  # a NameServer that takes the connection and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(1024)
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    flooded = 300
    try:
        with peer_namespace() as peer:
            addrs = f"127.0.0.1:{namesrv.port};127.0.0.1:{silent.getsockname()[1]}"
            broker = await start_broker(tmp_path / "store", listen_host="0.0.0.0", namesrv_addr=addrs)
            try:
                assert broker.ha_master is not None
                before = _descriptors()
                peak = [before]
                done = threading.Event()

                def sample() -> None:
                    while not done.wait(0.005):
                        peak[0] = max(peak[0], _descriptors())

                sampler = threading.Thread(target=sample)
                sampler.start()
                argv = peer.python(_FLOOD, peer.host_ip, str(broker.ha_master.port), str(flooded))
                flood = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                try:
                    assert flood.stdout is not None
                    assert (await asyncio.to_thread(flood.stdout.readline)).strip() == "opened"
                    await asyncio.sleep(
                        1
                    )  # (every connection accepted meanwhile: the gate's look-up lasts 3 s)
                finally:
                    flood.communicate("", timeout=30)
                    done.set()
                    sampler.join()
                assert peak[0] - before <= GATE_WAITING_PER_HOST + 8, (peak[0], before)
            finally:
                await broker.stop()
    finally:
        await namesrv.stop()
        silent.close()
