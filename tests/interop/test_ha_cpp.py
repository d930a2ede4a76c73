"""The official C++ client (PyPI `rocketmq==0.4.4`) against a broker group whose master is gone: what it
sent while the master was up, it push-consumes from the slave the route still lists (#16)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from store.config import SLAVE
from store.engine import DefaultMessageStore
from tests.support.broker import start_broker, start_cluster, stop_cluster
from tests.support.paths import ROOT

pytestmark = [pytest.mark.interop, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
INTEROP_PYTHON = ROOT / ".venv-interop" / "bin" / "python"
TOPIC = "CppHaTopic"
GROUP = "CID_MQCTL_CPP_HA"
COUNT = 60


async def _client(namesrv: str, phase: str) -> dict[str, object]:
    proc = await asyncio.create_subprocess_exec(
        str(INTEROP_PYTHON),
        str(HERE / "cpp_broker_roundtrip.py"),
        namesrv,
        TOPIC,
        GROUP,
        str(COUNT),
        "90",
        phase,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=HERE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()[-3000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


async def test_cpp_client_consumes_from_the_slave_with_the_master_down(tmp_path: Path) -> None:
    if not INTEROP_PYTHON.exists():
        pytest.fail("C++ client venv missing: run scripts/install-interop-clients.sh (make test does)")
    handle = await start_cluster(tmp_path, ha_listen_port=0)
    master = handle.broker
    slave = await start_broker(
        tmp_path / "slave", namesrv_addr=handle.namesrv_addr, broker_id=1, broker_role=SLAVE, ha_listen_port=0
    )
    try:
        master.topics.create_system_like(TOPIC, 4, 6)
        await master.register_all()
        produced = await _client(handle.namesrv_addr, "produce")
        assert [s["status"] for s in produced["sent"]] == [0] * COUNT  # type: ignore[union-attr]  # SEND_OK
        store = slave.store
        assert isinstance(store, DefaultMessageStore)
        await slave.sync_from_master()
        end = master.store.max_phy_offset
        for _ in range(300):
            if store.max_phy_offset == end and store.reput_from_offset >= end:
                break
            await asyncio.sleep(0.05)
        assert store.reput_from_offset >= end
        await master.stop()  # unregistered: the route lists only the slave now

        consumed = await _client(handle.namesrv_addr, "consume")
        received = consumed["received"]
        expected = consumed["expected"]
        assert isinstance(received, dict) and isinstance(expected, dict)
        assert sorted(received) == sorted(expected)
        for key, entry in received.items():
            assert entry["sha1"] == expected[key] and entry["n"] >= 1
    finally:
        await slave.stop()
        await stop_cluster(handle)
