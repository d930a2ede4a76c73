"""The Jepsen harness on today's master/slave groups: a SYNC_MASTER and its slave as real processes,
producers sending with retries into a recorded history, the nemesis killing the master or cutting the
slave off through the proxy, and the checker reading every queue back afterwards."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from tests.jepsen.checker import CheckResult, check, check_resumed
from tests.jepsen.client import OnsProducer, Producer, master_of, read_topic
from tests.jepsen.history import History, Op
from tests.jepsen.nodes import Nemesis, Node
from tests.jepsen.proxy import Mode, Proxy
from tests.support.broker import BrokerClient
from tests.support.namesrv import namesrv_config
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

TOPIC = "JepsenMS"
QUEUES = 4


@dataclass
class MasterSlave:
    history: History
    nemesis: Nemesis
    proxy: Proxy
    client: RemotingClient
    namesrv: str
    master: Node
    slave: Node
    producers: list[Producer | OnsProducer]

    def acked(self) -> int:
        return sum(p.sent for p in self.producers)

    async def read(self, node: Node) -> CheckResult:
        """The history so far against everything ``node`` serves."""
        return check(list(self.history.ops), await read_topic(self.client, node.addr, TOPIC, QUEUES))

    async def settled(self, node: Node, timeout: float = 20.0) -> CheckResult:
        """``node``'s check once it serves every acknowledged message (replication and dispatch run in
        their own time), or its last check after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            result = await self.read(node)
            if result.valid or loop.time() > deadline:
                return result
            await asyncio.sleep(0.3)


@contextlib.asynccontextmanager
async def master_slave(
    tmp_path: Path,
    env: dict[str, str],
    *,
    proxied_ha: bool,
    clients: str = "python",
    proxied_clients: bool = False,
    **master_keys: object,
) -> AsyncIterator[MasterSlave]:
    """A NameServer (in this process), a SYNC_MASTER and its slave (subprocesses), the topic created, and
        the producers (not yet running): four of ours, or with ``clients="ali-ons"`` two ali-ons; with ``proxied_ha`` the slave reaches the master's HA port through
        the proxy link "ha"; with ``proxied_clients`` our producers reach the master through the link "clients".
    The history is left in ``tmp_path/history.jsonl``."""
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    history = History()
    proxy = Proxy()
    client = RemotingClient()
    ha_port = free_port()
    common = {"brokerName": "broker-a", "namesrvAddr": ns, "mappedFileSizeCommitLog": 1024 * 1024}
    master = Node(
        "master",
        tmp_path / "master",
        {**common, "brokerRole": "SYNC_MASTER", "haListenPort": ha_port, **master_keys},
        env,
    )
    slave_keys: dict[str, object] = {
        **common,
        "brokerRole": "SLAVE",
        "brokerId": 1,
        "haListenPort": free_port(),
        "haSendHeartbeatInterval": 500,
    }
    if proxied_ha:
        slave_keys["haMasterAddress"] = (await proxy.link("ha", f"127.0.0.1:{ha_port}")).addr
    slave = Node("slave", tmp_path / "slave", slave_keys, env)
    via = {master.addr: (await proxy.link("clients", master.addr)).addr} if proxied_clients else {}
    producers: list[Producer | OnsProducer] = (
        [OnsProducer(history, f"ons{i}", ns, TOPIC) for i in range(2)]
        if clients == "ali-ons"
        else [Producer(history, f"p{i}", ns, TOPIC, queues=QUEUES, timeout=1.0, via=via) for i in range(4)]
    )
    try:
        master.start()
        await master.ready(client)
        slave.start()
        await slave.ready(client)
        await BrokerClient(master.addr, client).create_topic(TOPIC, QUEUES)

        async def routed() -> bool:
            return await master_of(client, ns, TOPIC) == master.addr

        await wait_until(routed)
        yield MasterSlave(history, Nemesis(history), proxy, client, ns, master, slave, producers)
    finally:
        history.dump(tmp_path / "history.jsonl")
        for p in producers:
            await p.close()
        await proxy.close()
        await client.close()
        slave.stop()
        master.stop()
        await namesrv.stop()


@contextlib.asynccontextmanager
async def producing(g: MasterSlave) -> AsyncIterator[None]:
    """The producers run inside the block and are stopped (their last sends completed) at its end."""
    stop = asyncio.Event()
    tasks = [asyncio.create_task(p.run(stop)) for p in g.producers]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


@pytest.mark.parametrize("client", ["python", pytest.param("ali-ons", marks=pytest.mark.interop)])
async def test_sigkill_of_the_sync_master_loses_no_acknowledged_send(
    tmp_path: Path, cli_env: dict[str, str], client: str
) -> None:
    """Every SEND_OK is readable from the slave once the master is killed, and from the master again once
    it restarts on its old store; the producers' retries of unknown outcomes are the only duplicates. Our
    producer retries across route lookups; ali-ons retries inside each send."""
    async with master_slave(tmp_path, cli_env, proxied_ha=False, clients=client) as g:
        async with producing(g):
            await wait_until(lambda: g.acked() >= 150)
            g.nemesis.kill(g.master)
            before = g.acked()
            await asyncio.sleep(1.0)  # the producers meet a dead master: refused, or no master listed
            on_slave = await g.settled(g.slave)
            assert on_slave.valid, on_slave.summary()
            assert on_slave.counts["ok"] >= 150

            g.nemesis.restart(g.master)
            await g.master.ready(g.client)
            restarted = g.history.last("restart").time
            await wait_until(lambda: check_resumed(g.history.ops, restarted).valid)
            await wait_until(lambda: g.acked() >= before + 50)
        for node in (g.master, g.slave):
            result = await g.settled(node)
            assert result.valid, f"{node.name}: {result.summary()}"
        assert check_resumed(g.history.ops, restarted).valid


@pytest.mark.parametrize("fault", ["stall", "refuse", "pause"])
async def test_a_slave_cut_off_gets_no_send_ok_until_it_heals(
    tmp_path: Path, cli_env: dict[str, str], fault: str
) -> None:
    """Cut the slave off the master's HA port through the proxy (a stalled or a refusing link), or freeze
    it (SIGSTOP): a SYNC_MASTER answers FLUSH_SLAVE_TIMEOUT, then (once it drops the silent slave)
    SLAVE_NOT_AVAILABLE, never SEND_OK; after the heal (SIGCONT) the slave catches up and SEND_OK
    returns; nothing acknowledged is lost on either."""
    async with master_slave(
        tmp_path, cli_env, proxied_ha=True, slaveTimeout=1000, haHousekeepingInterval=3000
    ) as g:
        async with producing(g):
            await wait_until(lambda: g.acked() >= 100)
            if fault == "pause":
                cut = g.nemesis.pause(g.slave)
                await asyncio.sleep(5.0)
                healed = g.nemesis.resume(g.slave)
            else:
                cut = g.nemesis.partition(g.proxy, "ha", cast(Mode, fault))
                await asyncio.sleep(5.0)
                healed = g.nemesis.heal(g.proxy, "ha")
            await wait_until(lambda: check_resumed(g.history.ops, healed.time).valid)
            await wait_until(lambda: g.acked() >= 150)
        ops = g.history.ops
        during = [
            c
            for c in ops
            if c.f == "send"
            and c.type != "invoke"
            and cut.time < c.time < healed.time
            and _invoked_after(ops, c, cut.index)
        ]
        assert during, "no send completed during the partition"
        assert not [c for c in during if c.type == "ok"], "SEND_OK without the slave"
        errors = {(c.error or "").split(":")[0] for c in during}
        assert errors & {"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"}, errors
        for node in (g.master, g.slave):
            result = await g.settled(node)
            assert result.valid, f"{node.name}: {result.summary()}"


def _invoked_after(ops: list[Op], completion: Op, index: int) -> bool:
    """Whether ``completion``'s invocation (its process's last invoke before it) came after ``index``."""
    for op in reversed(ops[: completion.index]):
        if op.process == completion.process and op.type == "invoke":
            return op.index > index
    return False


async def test_a_client_cut_off_the_master_retries_into_explained_duplicates(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The producers' link to the master stalls: their sends time out (unknown), they send again, and
    when the link heals the master stores every copy that waited. At-least-once: the checker finds the
    copies, each explained by the retries, and nothing acknowledged lost."""
    async with master_slave(tmp_path, cli_env, proxied_ha=False, proxied_clients=True) as g:
        async with producing(g):
            await wait_until(lambda: g.acked() >= 50)
            g.nemesis.partition(g.proxy, "clients")
            await asyncio.sleep(3.0)
            healed = g.nemesis.heal(g.proxy, "clients")
            await wait_until(lambda: check_resumed(g.history.ops, healed.time).valid)
        for node in (g.master, g.slave):
            result = await g.settled(node)
            assert result.valid, f"{node.name}: {result.summary()}"
            assert result.retried_duplicates, result.summary()  # the stalled retries all landed
