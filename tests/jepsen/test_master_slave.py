"""The Jepsen harness on today's master/slave groups: a SYNC_MASTER and its slave as real processes,
producers sending with retries into a recorded history, the nemesis killing the master or cutting the
slave off through the proxy, and the checker reading every queue back afterwards."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from daemon.remoting.bodies import KVTable
from daemon.remoting.codes import RequestCode
from daemon.remoting.command import RemotingCommand
from store.checkpoint import StoreCheckpoint
from tests.jepsen.checker import CheckResult, check, check_resumed
from tests.jepsen.client import Producer, ScriptProducer, master_of, read_topic, real_clients, settled
from tests.jepsen.harness import Run, jepsen_run, running
from tests.jepsen.nodes import Node, stop_all
from tests.jepsen.proxy import Mode
from tests.support.broker import BrokerClient
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

TOPIC = "JepsenMS"
QUEUES = 4


@dataclass
class MasterSlave(Run):
    master: Node
    slave: Node
    producers: list[Producer | ScriptProducer]

    def acked(self) -> int:
        return sum(p.sent for p in self.producers)

    def members(self) -> list[Node]:
        return [self.master, self.slave]

    async def settled(self, node: Node) -> CheckResult:
        """``node``'s check once it serves every acknowledged message (see :func:`settled`)."""
        return await settled(self.history, self.client, node.addr, TOPIC, QUEUES)


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
    the producers (not yet running): four of ours, or two ali-ons (``clients="ali-ons"``) or two C++
    clients (``"cpp"``). With
    ``proxied_ha`` the slave reaches the master's HA port through the proxy link "ha"; with
    ``proxied_clients`` our producers reach the master through the link "clients"."""
    async with jepsen_run(tmp_path) as run:
        ns = run.namesrv
        ha_port = free_port()
        common = {"brokerName": "broker-a", "namesrvAddr": ns, "mappedFileSizeCommitLog": 1024 * 1024}
        master_conf = {**common, "brokerRole": "SYNC_MASTER", "haListenPort": ha_port, **master_keys}
        master = Node("master", tmp_path / "master", master_conf, env)
        slave_keys: dict[str, object] = {
            **common,
            "brokerRole": "SLAVE",
            "brokerId": 1,
            "haListenPort": (slave_ha := free_port()),
            "haSendHeartbeatInterval": 500,
        }
        slave = Node("slave", tmp_path / "slave", slave_keys, env)
        picked = {master.port, ha_port, slave.port, slave_ha}
        if proxied_ha:
            link = await run.proxy.link("ha", f"127.0.0.1:{ha_port}", avoid=picked)
            slave_keys["haMasterAddress"] = link.addr
        via = {}
        if proxied_clients:
            via[master.addr] = (await run.proxy.link("clients", master.addr, avoid=picked)).addr
        producers: list[Producer | ScriptProducer]
        if clients != "python":
            producers = [*real_clients(run.history, clients, ns, TOPIC)]
        else:
            # cut off the master, a client should give up on a send soon; otherwise it must outwait the
            # master's own slaveTimeout, or it could never see the FLUSH_SLAVE_TIMEOUT answer
            timeout = 1.0 if proxied_clients else 3.0
            producers = [
                Producer(run.history, f"p{i}", ns, TOPIC, queues=QUEUES, timeout=timeout, via=via)
                for i in range(4)
            ]
        try:
            master.start()
            await master.ready(run.client)
            slave.start()
            await slave.ready(run.client)
            await BrokerClient(master.addr, run.client).create_topic(TOPIC, QUEUES)

            async def routed() -> bool:
                return await master_of(run.client, ns, TOPIC) == master.addr

            await wait_until(routed)
            yield MasterSlave(*run.parts(), master, slave, producers)
        finally:
            for p in producers:
                await p.close()
            await stop_all([slave, master])


@pytest.mark.parametrize(
    "client", ["python", *(pytest.param(c, marks=pytest.mark.interop) for c in ("ali-ons", "cpp"))]
)
async def test_sigkill_of_the_sync_master_loses_no_acknowledged_send(
    tmp_path: Path, cli_env: dict[str, str], client: str
) -> None:
    """Every SEND_OK is readable from the slave once the master is killed, and from the master again once
    it restarts on its old store; the producers' retries of unknown outcomes are the only duplicates. Our
    producer retries across route lookups; ali-ons and the C++ client retry inside each send."""
    async with master_slave(tmp_path, cli_env, proxied_ha=False, clients=client) as g:
        async with running(g.producers):
            await g.acked_at_least(150)
            g.nemesis.kill(g.master)
            before = g.acked()
            await asyncio.sleep(1.0)  # the producers meet a dead master: refused, or no master listed
            on_slave = await g.settled(g.slave)
            assert on_slave.valid, on_slave.summary()
            assert on_slave.counts["ok"] >= 150

            g.nemesis.restart(g.master)
            await g.master.ready(g.client)
            restarted = g.history.last("restart").time
            await wait_until(lambda: check_resumed(g.history.ops, restarted).valid, 30, g.evidence)
            await g.acked_at_least(before + 50)
        for node in (g.master, g.slave):
            result = await g.settled(node)
            assert result.valid, f"{node.name}: {result.summary()}"
        assert check_resumed(g.history.ops, restarted).valid


def marked(node: Node) -> int | None:
    """The replica mark in ``node``'s checkpoint file, as a restart would read it."""
    return StoreCheckpoint(str(node.store / "checkpoint"), read_only=True).replica_mark


async def runtime_info(g: MasterSlave, node: Node) -> dict[str, str]:
    answer = await g.client.invoke(node.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    return KVTable.loads(answer.body).table


async def restarted_holding(g: MasterSlave, fault: Callable[[Node], object]) -> int:
    """SIGKILL of the slave while SEND_OKs stream in (between a replicated write and the write of its
    replica mark), then ``fault`` on the master; the slave restarted alone has a mark its log holds,
    serves nothing that was not sent, and holds back what lies past the mark. Returns the bytes held."""
    async with running(g.producers):
        await g.acked_at_least(150)
        await wait_until(lambda: bool(marked(g.slave)))  # (its flush loop wrote a mark once)
        await g.acked_at_least(g.acked() + 100)
        g.nemesis.kill(g.slave)
        fault(g.master)
    g.nemesis.restart(g.slave)
    await g.slave.ready(g.client)
    table = await runtime_info(g, g.slave)
    mark, end = int(table["haReplicaMark"]), int(table["commitLogMaxOffset"])
    assert 0 < mark <= end and int(table["haHeldBackBytes"]) == end - mark
    alone = check(list(g.history.ops), await read_topic(g.client, g.slave.addr, TOPIC, QUEUES))
    assert alone.kinds() <= {"lost"}, alone.summary()  # (what it holds back is not read yet)
    return end - mark


async def test_a_slave_killed_as_it_replicates_and_restarted_with_its_master_down_serves_up_to_its_mark(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SIGKILL of the slave while records stream in (between a replicated write and the write of its
    replica mark), then of the master. The slave restarted alone has a mark its log holds, serves nothing
    that was not sent, and holds back what lies past the mark; once the master is back the check releases
    it and the slave serves every SEND_OK."""
    async with master_slave(tmp_path, cli_env, proxied_ha=False) as g:
        await restarted_holding(g, g.nemesis.kill)
        g.nemesis.restart(g.master)
        await g.master.ready(g.client)
        result = await g.settled(g.slave)
        assert result.valid, result.summary()
        assert (await runtime_info(g, g.slave))["haHeldBackBytes"] == "0"


@pytest.mark.parametrize("fault", ["stall", "refuse", "pause", "slow"])
async def test_a_slave_cut_off_gets_no_send_ok_until_it_heals(
    tmp_path: Path, cli_env: dict[str, str], fault: str
) -> None:
    """Cut the slave off the master's HA port through the proxy (a stalled or a refusing link), slow that
    link beyond the master's slaveTimeout, or freeze the slave (SIGSTOP): a SYNC_MASTER answers FLUSH_SLAVE_TIMEOUT, then (once it drops the silent slave)
    SLAVE_NOT_AVAILABLE, never SEND_OK; after the heal (SIGCONT) the slave catches up and SEND_OK
    returns; nothing acknowledged is lost on either."""
    async with master_slave(
        tmp_path, cli_env, proxied_ha=True, slaveTimeout=1000, haHousekeepingInterval=3000
    ) as g:
        async with running(g.producers):
            await g.acked_at_least(100)
            if fault == "pause":
                cut = g.nemesis.pause(g.slave)
                await asyncio.sleep(5.0)
                healed = g.nemesis.resume(g.slave)
            elif (
                fault == "slow"
            ):  # each way slower than slaveTimeout, never silent for haHousekeepingInterval
                cut = g.nemesis.slow(g.proxy, "ha", 0.6)
                await asyncio.sleep(5.0)
                healed = g.nemesis.slow(g.proxy, "ha", 0.0)
            else:
                cut = g.nemesis.partition(g.proxy, "ha", cast(Mode, fault))
                await asyncio.sleep(5.0)
                healed = g.nemesis.heal(g.proxy, "ha")
            await wait_until(lambda: check_resumed(g.history.ops, healed.time).valid, 30, g.evidence)
            await g.acked_at_least(150)
        ops = g.history.ops
        during = [
            c
            for c in ops
            if c.f == "send"
            and c.type != "invoke"
            and cut.time < c.time < healed.time
            and g.history.invoked_after(c, cut)
        ]
        assert during, "no send completed during the partition"
        assert not [c for c in during if c.type == "ok"], "SEND_OK without the slave"
        errors = {(c.error or "").split(":")[0] for c in during}
        assert errors & {"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"}, errors
        for node in (g.master, g.slave):
            result = await g.settled(node)
            assert result.valid, f"{node.name}: {result.summary()}"


async def test_a_client_cut_off_the_master_retries_into_explained_duplicates(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The producers' link to the master stalls: their sends time out (unknown), they send again, and
    when the link heals the master stores every copy that waited. At-least-once: the checker finds the
    copies, each explained by the retries, and nothing acknowledged lost."""
    async with master_slave(tmp_path, cli_env, proxied_ha=False, proxied_clients=True) as g:
        async with running(g.producers):
            await g.acked_at_least(50)
            g.nemesis.partition(g.proxy, "clients")
            await asyncio.sleep(3.0)
            healed = g.nemesis.heal(g.proxy, "clients")
            await wait_until(lambda: check_resumed(g.history.ops, healed.time).valid, 30, g.evidence)
        for node in (g.master, g.slave):
            result = await g.settled(node)
            assert result.valid, f"{node.name}: {result.summary()}"
            assert result.retried_duplicates, result.summary()  # the stalled retries all landed


async def test_a_slave_holding_acknowledged_sends_back_serves_every_one_once_made_a_master(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SIGKILL of the slave as SEND_OKs stream in, then of the master, lost for good. The slave restarted
    alone holds back what lies past its mark; made a master (docs/replication.md §the-replica-mark), as an
    operator serves them, it serves every SEND_OK, held ones included."""
    async with master_slave(tmp_path, cli_env, proxied_ha=False) as g:
        held = await restarted_holding(g, g.nemesis.kill)
        await g.nemesis.stop(g.slave)
        g.slave.keys.update(brokerRole="ASYNC_MASTER", brokerId=0)
        g.nemesis.restart(g.slave)
        await g.slave.ready(g.client)
        result = await g.settled(g.slave)
        assert result.valid, (held, result.summary())


async def test_a_slave_restarted_while_its_master_is_paused_holds_its_tail_until_the_master_answers(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SIGKILL of the slave as SEND_OKs stream in, SIGSTOP of the master (its sockets accept, it answers
    nothing). The slave restarted meanwhile serves up to its mark, nothing unsent, and holds the rest
    while its check goes unanswered; once the master runs again the check releases it and every SEND_OK
    is served."""
    async with master_slave(tmp_path, cli_env, proxied_ha=False) as g:
        await restarted_holding(g, g.nemesis.pause)
        g.nemesis.resume(g.master)
        result = await g.settled(g.slave)
        assert result.valid, result.summary()
        assert (await runtime_info(g, g.slave))["haHeldBackBytes"] == "0"


async def test_roles_flipped_and_back_a_slave_alone_serves_every_send_ok_and_nothing_else(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SEND_OKs throughout while the slave is cut off (the master writes what it cannot acknowledge), the
    master SIGKILLed, its slave made the master, and the old master brought back as that one's slave;
    then the new master SIGKILLed too. The old master, a slave now, restarted alone serves every SEND_OK
    and nothing unsent: what it wrote alone was set aside by its check before its mark counted it."""
    async with master_slave(tmp_path, cli_env, proxied_ha=True) as g:
        old, new = g.master, g.slave
        async with running(g.producers):
            await g.acked_at_least(150)
            g.nemesis.partition(g.proxy, "ha")
            # the slave may still append what reached it before the cut: its end once it stopped moving
            shared = -1
            while (now := int((await runtime_info(g, new))["commitLogMaxOffset"])) != shared:
                shared = now
                await asyncio.sleep(0.5)
            while int((await runtime_info(g, old))["commitLogMaxOffset"]) <= shared:
                await asyncio.sleep(0.1)
            g.nemesis.kill(old)
            await g.nemesis.stop(new)
            new.keys.update(brokerRole="ASYNC_MASTER", brokerId=0)
            del new.keys["haMasterAddress"]
            g.nemesis.restart(new)
            await new.ready(g.client)
            await g.acked_at_least(g.acked() + 100)
            old.keys.update(brokerRole="SLAVE", brokerId=1)
            del old.keys["haListenPort"]
            g.nemesis.restart(old)
            await old.ready(g.client)
            await g.acked_at_least(g.acked() + 100)
        result = await settled(g.history, g.client, old.addr, TOPIC, QUEUES)
        assert result.valid, result.summary()
        assert list((old.store / "quarantine").iterdir())  # (what it wrote alone, set aside)
        await g.nemesis.stop(old)
        g.nemesis.kill(new)
        g.nemesis.restart(old)
        await old.ready(g.client)
        result = await settled(g.history, g.client, old.addr, TOPIC, QUEUES)
        assert result.valid, result.summary()
