"""The NameServer's route table under a flood of registrations: registration is open to any peer (protected
mode leaves it open), and a peer registering thousands of invented brokers of thousands of topics each
(a few KiB compressed per broker) filled its memory without bound. `routeMaxQueueDatas` caps the entries."""

from __future__ import annotations

from pathlib import Path

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.bodies import TopicRouteData
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from store.models import DataVersion
from tests.support.namesrv import Namesrv, namesrv_config


async def _route(namesrv: Namesrv, topic: str) -> TopicRouteData | None:
    answer = await namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return TopicRouteData.loads(answer.body) if answer.code == ResponseCode.SUCCESS else None


async def test_registrations_past_the_route_cap_add_no_entries_and_listed_brokers_stay(
    tmp_path: Path,
) -> None:
    controller = NamesrvController(namesrv_config(tmp_path, route_max_queue_datas=10))
    await controller.start()
    try:
        async with RemotingClient() as client:
            ns = Namesrv(controller, client)
            real = {f"Real{i}": 4 for i in range(6)}
            assert (await ns.register(real, compressed=True)).code == ResponseCode.SUCCESS
            # an invented broker whose topics would pass the cap: refused, nothing of it held
            evil = await ns.register(
                {f"Evil{i}": 8 for i in range(6)}, broker_name="evil-1", broker_addr="10.9.9.9:10911"
            )
            assert evil.code == ResponseCode.SYSTEM_ERROR and "routeMaxQueueDatas=10" in (evil.remark or "")
            assert await _route(ns, "Evil0") is None
            assert "evil-1" not in controller.routes.broker_addr_table
            # the listed broker's next table, past the cap: it stays listed with what it had
            grown = {**real, **{f"New{i}": 4 for i in range(6)}}
            again = await ns.register(grown, version=DataVersion(2, 1700000000001))
            assert again.code == ResponseCode.SUCCESS, again.remark
            assert await _route(ns, "New0") is None
            held = await _route(ns, "Real0")
            assert held is not None and [b.broker_name for b in held.broker_datas] == ["broker-a"]
            assert controller.routes.queue_datas == 6
            # room again (a topic deleted): the same table is read whole and added up to the cap
            await ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Real5"})
            assert controller.routes.queue_datas == 5
            assert (
                await ns.register(grown, version=DataVersion(2, 1700000000001))
            ).code == ResponseCode.SUCCESS
            assert await _route(ns, "New0") is None  # 5 + 7 is still past 10: left out again
            small = {**real, "New0": 4}
            assert (
                await ns.register(small, version=DataVersion(3, 1700000000002))
            ).code == ResponseCode.SUCCESS
            assert await _route(ns, "New0") is not None and controller.routes.queue_datas == 7
    finally:
        await controller.stop()
