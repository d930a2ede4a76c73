"""Safe administration with ACL off: config updates never move data or listeners, a near-zero
fileReservedTime needs --force, and a live master cannot be replaced at the NameServer."""

from __future__ import annotations

import asyncio
from pathlib import Path

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.safe_config import FORCE_FIELD, locked_keys
from tests.broker.conftest import BrokerHandle
from tests.namesrv.conftest import Namesrv


def test_locked_keys_cover_every_spelling() -> None:
    keys = {
        "storePathRootDir": "/x",
        "store_path_commit_log": "/x",
        "mappedFileSizeCommitLog": "4096",
        "maxIndexNum": "1",
        "brokerIP1": "1.2.3.4",
        "listenPort": "1",
        "aclEnable": "false",
        "fileReservedTime": "48",
        "brokerPermission": "6",
    }
    assert set(locked_keys(keys)) == set(keys) - {"fileReservedTime", "brokerPermission"}


async def test_broker_config_updates_refuse_keys_that_move_data(broker: BrokerHandle) -> None:
    config = broker.broker.config
    path = Path(config.config_path)
    size, root, port = config.mapped_file_size_commit_log, config.store_path_root_dir, config.listen_port
    for body in (
        b"mappedFileSizeCommitLog=4096\n",
        b"storePathRootDir=/tmp/elsewhere\n",
        b"listenPort=1\n",
        b"brokerName=evil\nfileReservedTime=48\n",
    ):
        r = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=body)
        assert r.code == ResponseCode.NO_PERMISSION and "black list" in (r.remark or ""), r.remark
    assert (config.mapped_file_size_commit_log, config.store_path_root_dir, config.listen_port) == (
        size,
        root,
        port,
    )
    assert config.broker_name == "broker-a" and config.file_reserved_time != 48
    assert not path.exists() or "mappedFileSize" not in path.read_text()

    wipe = await broker.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=0\n")
    assert wipe.code == ResponseCode.NO_PERMISSION and "--force" in (wipe.remark or "")
    assert config.file_reserved_time != 0
    forced = await broker.call(
        RequestCode.UPDATE_BROKER_CONFIG, {FORCE_FIELD: "true"}, b"fileReservedTime=0\n"
    )
    assert forced.code == ResponseCode.SUCCESS and config.file_reserved_time == 0


async def test_namesrv_keeps_a_live_master(namesrv: Namesrv) -> None:
    async with RemotingClient() as real, RemotingClient() as intruder:
        assert (await namesrv.register({"T": 4}, client=real)).code == ResponseCode.SUCCESS
        hijack = await namesrv.register({"T": 4}, broker_addr="10.6.6.6:10911", client=intruder)
        assert hijack.code == ResponseCode.NO_PERMISSION and "live connection" in (hijack.remark or "")
        fields = {
            "brokerName": "broker-a",
            "brokerAddr": "127.0.0.1:10911",
            "clusterName": "DefaultCluster",
            "brokerId": "0",
        }
        gone = await intruder.invoke(
            namesrv.addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields)
        )
        assert gone.code == ResponseCode.NO_PERMISSION
        route = namesrv.controller.routes.broker_addr_table["broker-a"].broker_addrs
        assert route == {0: "127.0.0.1:10911"}
        assert (await namesrv.register({"T": 4}, client=real)).code == ResponseCode.SUCCESS  # its own renewal
        await real.close()  # the real master's channel is gone: a new master may take over
        for _ in range(50):
            took = await namesrv.register({"T": 4}, broker_addr="10.7.7.7:10911", client=intruder)
            if took.code == ResponseCode.SUCCESS:
                break
            await asyncio.sleep(0.1)
        assert took.code == ResponseCode.SUCCESS, took.remark
        assert namesrv.controller.routes.broker_addr_table["broker-a"].broker_addrs[0] == "10.7.7.7:10911"
