"""A real RocketMQ client over TLS: ali-ons (npm) against a TLS-only NameServer and broker.

ali-ons has no TLS option of its own; `ons_tls_shim.js` hands its connections to Node's TLS stack (which
checks our certificate against the test CA), so the client's protocol code runs unchanged over TLS. The
C++ client (PyPI rocketmq 0.4.4) is built without OpenSSL and cannot be tested so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.namesrv.controller import NamesrvController
from daemon.remoting.tls import write_local_ca
from store.engine import DefaultMessageStore
from tests.daemons import tls_only
from tests.support.ali_ons import INTEROP, node
from tests.support.broker import start_broker
from tests.support.namesrv import namesrv_config

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "OnsTlsTopic"
COUNT = 20


async def test_ali_ons_produces_over_tls_to_an_enforcing_cluster(tmp_path: Path) -> None:
    certs = write_local_ca(tmp_path / "certs")
    server = tls_only(certs)
    namesrv = NamesrvController(namesrv_config(tmp_path, **server))
    await namesrv.start()
    ns = f"127.0.0.1:{namesrv.port}"
    broker = await start_broker(
        tmp_path / "store",
        namesrv_addr=ns,
        tls_enable=True,
        tls_client_trust_cert_path=str(certs["ca"]),
        **server,
    )
    try:
        broker.topics.create_system_like(TOPIC, 4, 6)
        await broker.register_all()
        shim = str(INTEROP / "ons_tls_shim.js")
        sent = (
            await node("produce", ns, TOPIC, str(COUNT), preload=shim, env={"MQCTL_TLS_CA": str(certs["ca"])})
        )["sent"]
        assert isinstance(sent, list) and {s["status"] for s in sent} == {"SEND_OK"} and len(sent) == COUNT
        plaintext = namesrv.server.tls_refused, broker.server.tls_refused
        assert plaintext == (0, 0)  # every connection it made was TLS
    finally:
        await broker.stop()
        await namesrv.stop()
    with DefaultMessageStore(broker.config.store_config(), read_only=True) as store:
        assert sum(store.get_max_offset(TOPIC, q) for q in range(4)) == COUNT
