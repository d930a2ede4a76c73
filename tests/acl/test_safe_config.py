"""Safe administration with ACL off: config updates never move data or listeners, a near-zero
fileReservedTime needs --force, and a live master cannot be replaced at the NameServer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from daemon.safe_config import FORCE_FIELD, locked_keys
from store.cleanup import FakeDiskUsage
from tests.support.broker import BrokerHandle
from tests.support.namesrv import Namesrv
from tests.support.retention import retention_cluster
from tests.support.waiting import wait_until


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
        "haMasterAddress": "10.6.6.6:10912",  # where a slave copies the store from
        "readOnlyCommitLogStorePaths": "/x",
        "enableDLegerCommitLog": "true",
        "dLegerPeers": "n0-10.6.6.6:40911",
        "messageStorePlugIn": "evil.Plugin",
        "flushDiskType": "ASYNC_FLUSH",
        "messageDelayLevel": "1s",
    }
    assert set(locked_keys(keys)) == set(keys) - {"fileReservedTime", "brokerPermission"}


@pytest.mark.slow
def test_a_low_force_watermark_needs_force_as_a_short_retention(tmp_path: Path) -> None:
    """diskSpaceCleanForciblyRatio under the disk's usage deletes every young CommitLog file but the
    newest at the next cleanup run, read or not: the same wipe as fileReservedTime=0 by another key."""
    with retention_cluster(tmp_path, FakeDiskUsage(0.30)) as rc:
        rc.send("TR", 400)
        files = rc.commitlog_files()
        assert len(files) >= 3
        for body in (b"diskSpaceCleanForciblyRatio=20\n", b"diskSpaceCleanForciblyRatio = -1\n"):
            r = rc.run(rc.client.call(RequestCode.UPDATE_BROKER_CONFIG, body=body))
            assert r.code == ResponseCode.NO_PERMISSION and "--force" in (r.remark or ""), r.remark
        assert rc.store.config.disk_space_clean_forcibly_ratio == 85
        rc.after_cleanup_runs()  # cleanup runs keep every file
        assert rc.commitlog_files() == files
        ok = rc.run(
            rc.client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"diskSpaceCleanForciblyRatio=88\n")
        )
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        forced = rc.run(
            rc.client.call(
                RequestCode.UPDATE_BROKER_CONFIG, {FORCE_FIELD: "true"}, b"diskSpaceCleanForciblyRatio=20\n"
            )
        )
        assert forced.code == ResponseCode.SUCCESS and rc.store.config.disk_space_clean_forcibly_ratio == 20


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


async def test_namesrv_keeps_a_live_masters_address(namesrv: Namesrv) -> None:
    """The master's own address, re-registered by another connection under another id, name or
    cluster, must not move it out of its slot nor take over its channel (whose close drops it)."""
    master = "127.0.0.1:10911"
    async with RemotingClient() as real, RemotingClient() as intruder:
        assert (await namesrv.register({"T": 4}, client=real)).code == ResponseCode.SUCCESS
        for kwargs in (
            {"broker_id": 1},  # same address as a slave: the master's slot would be dropped
            {"broker_name": "evil"},  # the address under another name: its channel would be ours
            {"cluster": "EvilCluster"},
            {},  # same place, new topic data: the route would be the intruder's to rewrite
        ):
            r = await namesrv.register({"T": 1, "T2": 1}, broker_addr=master, client=intruder, **kwargs)
            assert r.code == ResponseCode.NO_PERMISSION, (kwargs, r.remark)
        routes = namesrv.controller.routes
        assert routes.broker_addr_table["broker-a"].broker_addrs == {0: master}
        assert set(routes.broker_addr_table) == {"broker-a"}
        assert set(routes.cluster_addr_table) == {"DefaultCluster"}
        assert "T2" not in routes.topic_queue_table
        closed: list[object] = []
        namesrv.controller.server.on_connection_closed(closed.append)  # called after the NameServer's own
        await intruder.close()
        await wait_until(lambda: len(closed) >= 1)  # the NameServer has handled the intruder's close
        assert routes.broker_addr_table["broker-a"].broker_addrs == {0: master}  # and kept the master
        assert (await namesrv.register({"T": 4}, client=real)).code == ResponseCode.SUCCESS
