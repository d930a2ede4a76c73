"""A NameServer with aclEnable=true checks its writes and leaves lookups open."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from daemon.acl.signature import Signer
from daemon.namesrv.controller import NamesrvController
from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from tests.support.acl import ADMIN_AK, ADMIN_SK, PLAIN_ACL, USER_AK, USER_SK, write_acl
from tests.support.namesrv import Namesrv, namesrv_config


@pytest.mark.slow
async def test_namesrv_acl_guards_writes_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_acl(home)
    controller = NamesrvController(namesrv_config(tmp_path, acl_enable=True, rocketmq_home=str(home)))
    await controller.start()
    kv = {"namespace": "NS", "key": "k", "value": "v"}
    try:
        async with RemotingClient() as anonymous, RemotingClient(signer=Signer(USER_AK, USER_SK)) as user, \
                RemotingClient(signer=Signer(ADMIN_AK, ADMIN_SK)) as admin:  # fmt: skip
            ns = Namesrv(controller, anonymous)
            lookup = await ns.call(RequestCode.GET_BROKER_CLUSTER_INFO)
            assert lookup.code == ResponseCode.SUCCESS
            for client in (anonymous, user):
                put = await client.invoke(
                    ns.addr, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, dict(kv))
                )
                assert put.code == ResponseCode.NO_PERMISSION, put.remark
                reg = await ns.register({"T": 1}, client=client)
                assert reg.code == ResponseCode.NO_PERMISSION
            assert controller.kv.namespace("NS") in (None, {})
            put = await admin.invoke(ns.addr, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, dict(kv)))
            assert put.code == ResponseCode.SUCCESS, put.remark
            assert (await ns.register({"T": 1}, client=admin)).code == ResponseCode.SUCCESS

            write_acl(home, PLAIN_ACL.replace("10.10.103.*", "127.0.0.1"))  # brokers by address
            for _ in range(40):  # the NameServer's watch re-reads the edited file
                if (
                    await ns.register({"T": 1}, broker_name="b2", broker_addr="127.0.0.1:1", client=anonymous)
                ).code == 0:
                    break
                await asyncio.sleep(0.1)
            assert "b2" in controller.routes.broker_addr_table
    finally:
        await controller.stop()
