"""Faults: SIGKILL under SYNC_FLUSH sends, clients vanishing mid-pull, a thousand idle connections."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from daemon.broker.broker import Broker
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.remoting.errors import RemotingConnectError
from daemon.remoting.frame import encode_command
from store.config_files import ConsumerOffsetManager
from store.errors import StoreLockedError
from store.record import decode_records
from tests.support.bounded import Daemon
from tests.support.broker import BrokerClient, BrokerHandle, broker_config, start_broker
from tests.support.load import Acked, send_until_dead
from tests.support.namesrv import namesrv_config
from tests.support.ports import free_port
from tests.support.waiting import wait_until


@pytest.mark.slow
async def test_sigkill_under_sync_flush_loses_no_acknowledged_send(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    namesrv = NamesrvController(namesrv_config(tmp_path))
    await namesrv.start()
    ns_addr = f"127.0.0.1:{namesrv.port}"
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=broker-k\nbrokerIP1=127.0.0.1\nlistenPort={port}\nnamesrvAddr={ns_addr}\n"
        f"storePathRootDir={tmp_path / 'store'}\nflushDiskType=SYNC_FLUSH\nmappedFileSizeCommitLog=4194304\n"
        "flushConsumerOffsetInterval=200\nmetricsEnable=false\n"
    )
    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
    client = RemotingClient()
    addr = f"127.0.0.1:{port}"
    handle = BrokerClient(addr, client)

    async def broker_up() -> bool:
        try:
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0)
        except Exception:
            return False
        return r.code == ResponseCode.SUCCESS

    async def registered() -> bool:
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        return (await client.invoke(ns_addr, request)).code == ResponseCode.SUCCESS

    async def call(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        return await client.invoke(addr, RemotingCommand.request(code, ext, body), 5.0)

    async def offset_persisted() -> bool:
        offsets = ConsumerOffsetManager(
            str(tmp_path / "store" / "config" / "consumerOffset.json"), read_only=True
        )
        offsets.load()
        return offsets.query_offset("KG", "Kill", 0) == 7

    broker = Daemon(argv, cli_env, tmp_path / "broker.log")
    broker.start()
    acked: Acked = []
    try:
        await broker.serving(broker_up)
        await wait_until(registered)
        update = {"consumerGroup": "KG", "topic": "Kill", "queueId": "0", "commitOffset": "0"}

        senders = [
            asyncio.create_task(
                send_until_dead(handle, "Kill", n, lambda n, i: f"{n}-{i}".encode() * 10, acked)
            )
            for n in range(8)
        ]
        await wait_until(lambda: _at_least(acked, 200))
        committed = {**update, "commitOffset": "7"}
        assert (await call(RequestCode.UPDATE_CONSUMER_OFFSET, committed)).code == ResponseCode.SUCCESS
        await wait_until(offset_persisted)  # flushConsumerOffsetInterval wrote it before the kill
        await wait_until(lambda: _at_least(acked, 400))
        broker.kill()
        await asyncio.gather(*senders)
        await wait_until(lambda: _not(registered))  # the NameServer dropped the dead broker's connection

        broker.start()
        await broker.serving(broker_up)
        await wait_until(registered)  # registered again
        for queue_id, offset, body in acked:
            pulled = await handle.pull("KG", "Kill", queue_id, offset, max_nums=1)
            assert pulled.code == ResponseCode.SUCCESS, (queue_id, offset, pulled.remark)
            assert decode_records(pulled.body)[0].body == body
        q = await call(
            RequestCode.QUERY_CONSUMER_OFFSET, {k: update[k] for k in ("consumerGroup", "topic", "queueId")}
        )
        assert q.ext_fields["offset"] == "7"
    finally:
        broker.stop()
        await client.close()
        await namesrv.stop()


async def _at_least(items: list[object], n: int) -> bool:
    return len(items) >= n


async def _not(check: Callable[[], Awaitable[bool]]) -> bool:
    return not await check()


async def test_client_disconnecting_mid_pull_does_not_disturb_others(broker: BrokerHandle) -> None:
    broker.broker.topics.create_system_like("Gone", 1, 6)
    leaver = RemotingClient()
    header = {
        "consumerGroup": "G",
        "topic": "Gone",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "6",
        "commitOffset": "0",
        "suspendTimeoutMillis": "20000",
        "subVersion": "0",
        "subscription": "*",
    }
    held = asyncio.create_task(
        leaver.invoke(broker.addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, header), 30)
    )
    while broker.broker.hold.parked == 0:
        await asyncio.sleep(0.01)
    await leaver.close()
    with pytest.raises(RemotingConnectError):
        await held
    assert (await broker.send("Gone", b"still-works")).code == ResponseCode.SUCCESS
    pulled = await broker.pull("G", "Gone", 0, 0)
    assert decode_records(pulled.body)[0].body == b"still-works"
    while broker.broker.hold.parked:
        await asyncio.sleep(0.01)  # the abandoned pull was woken by the send and dropped


@pytest.mark.slow
async def test_a_thousand_idle_connections_do_not_stall_a_client(broker: BrokerHandle) -> None:
    host, port = broker.addr.split(":")
    idle = [await asyncio.open_connection(host, int(port)) for _ in range(1000)]
    try:
        while broker.broker.server.open_connections < 1000:
            await asyncio.sleep(0.01)
        assert (await broker.send("Busy", b"x")).code == ResponseCode.SUCCESS
        assert decode_records((await broker.pull("G", "Busy", 0, 0)).body)[0].body == b"x"
    finally:
        for _, writer in idle:
            writer.close()


async def test_a_consumer_that_never_reads_does_not_stall_others(broker: BrokerHandle) -> None:
    big = b"x" * 60_000
    for _ in range(8):
        assert (await broker.send("Slow", big)).code == ResponseCode.SUCCESS
    host, port = broker.addr.split(":")
    _reader, writer = await asyncio.open_connection(host, int(port))
    header = {
        "consumerGroup": "SG",
        "topic": "Slow",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
        "subscription": "*",
    }
    frame = encode_command(RemotingCommand.request(RequestCode.PULL_MESSAGE, header))
    writer.write(frame * 400)  # ~190 MB of responses that this client never reads
    await writer.drain()
    try:
        for i in range(20):
            assert (await broker.send("Fast", f"{i}".encode())).code == ResponseCode.SUCCESS
        got = await broker.pull("G", "Fast", 0, 0)
        assert len(decode_records(got.body)) == 20
    finally:
        writer.close()


async def test_metrics_port_in_use_does_not_prevent_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        b = await start_broker(tmp_path / "s", metrics_port=taken.getsockname()[1])
        try:
            assert b.metrics_port is None
        finally:
            await b.stop()


async def test_second_broker_on_a_locked_store_fails_and_frees_its_port(broker: BrokerHandle) -> None:
    second = Broker(broker_config(Path(broker.broker.config.store_path_root_dir)))
    with pytest.raises(StoreLockedError):
        await second.start()
    with socket.socket() as probe:  # the listener it had opened is closed again
        probe.bind(("127.0.0.1", second.server.port))
