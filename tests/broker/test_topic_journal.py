"""Topic creations journaled beside topics.json (issue 19): durable when answered, across a SIGKILL too,
and folded into topics.json by a clean stop, which is all a Java broker reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from daemon.broker.headers import CreateTopicRequestHeader
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from store import fastjson
from store.clock import SystemClock
from store.config_files import TopicConfigFile
from tests.conftest import ROOT
from tests.support.ports import free_port
from tests.support.waiting import wait_until


async def test_created_topics_survive_sigkill_and_a_clean_stop_folds_them_into_topics_json(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerName=broker-j\nbrokerIP1=127.0.0.1\nlistenPort={port}\nstorePathRootDir={tmp_path / 'store'}\n"
        "mappedFileSizeCommitLog=4194304\nmetricsEnable=false\n"
    )
    topics_json = tmp_path / "store" / "config" / "topics.json"
    journal = Path(f"{topics_json}.journal")
    argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
    client = RemotingClient()
    addr = f"127.0.0.1:{port}"

    async def broker_up() -> bool:
        try:
            r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 1.0)
        except Exception:
            return False
        return r.code == ResponseCode.SUCCESS

    def on_disk() -> set[str]:
        return set(fastjson.loads(topics_json.read_text())["topicConfigTable"])

    names = [f"Journaled{i}" for i in range(30)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=cli_env, stderr=subprocess.DEVNULL)
    try:
        await wait_until(broker_up)
        for name in names:
            header = CreateTopicRequestHeader(name, "TBW102", 2, 2, 6, "SINGLE_TAG").to_ext_fields()
            request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
            assert (await client.invoke(addr, request, 5.0)).code == ResponseCode.SUCCESS
        assert not set(names) & on_disk()  # answered from the journal: topics.json was not rewritten
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        crashed = TopicConfigFile(str(topics_json), SystemClock(), read_only=True)
        crashed.load()
        assert set(names) <= set(crashed.table) and journal.stat().st_size > 0

        proc = subprocess.Popen(argv, cwd=ROOT, env=cli_env, stderr=subprocess.DEVNULL)
        await wait_until(broker_up)
        assert set(names) <= on_disk() and journal.stat().st_size == 0  # replayed and folded at start
        header = CreateTopicRequestHeader("AfterRestart", "TBW102", 2, 2, 6, "SINGLE_TAG").to_ext_fields()
        request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        assert (await client.invoke(addr, request, 5.0)).code == ResponseCode.SUCCESS
        assert "AfterRestart" not in on_disk()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        await client.close()
    assert {*names, "AfterRestart"} <= on_disk() and journal.stat().st_size == 0  # the clean stop folded it
