"""The NameServer process: config + route tables + KV store + remoting server + liveness scan."""

from __future__ import annotations

import asyncio
import logging

from daemon.acl.plain import NAMESRV_WRITE_CODES, RELOAD_CHECK_INTERVAL, AclFiles, PlainAccessValidator
from daemon.lifecycle import cancel_tasks, every, supervise
from daemon.namesrv.config import NamesrvConfig
from daemon.namesrv.kvconfig import KVConfigManager
from daemon.namesrv.processor import NamesrvProcessor
from daemon.namesrv.routes import RouteInfoManager
from daemon.protect import (
    LOOPBACK_WHY,
    ProtectedModeGuard,
    Protection,
    binds_beyond_loopback,
    listening,
    protection,
)
from daemon.remoting.codes import RequestCode
from daemon.remoting.connection import Connection
from daemon.remoting.limits import MAX_JSON_BODY
from daemon.remoting.server import RemotingServer
from daemon.remoting.tls import ServerTls

log = logging.getLogger(__name__)

#: Java runs the first scan 5 s after start, then every scan interval.
FIRST_SCAN_DELAY_MS = 5_000


class NamesrvController:
    """Start/stop wrapper; `port` is the bound port once `start()` returned."""

    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.routes = RouteInfoManager(broker_expire_ms=config.broker_expire_ms)
        self.kv = KVConfigManager(config)
        self.processor = NamesrvProcessor(config, self.routes, self.kv)
        self.server = RemotingServer(
            self.processor.table(),
            host=config.listen_host,
            port=config.listen_port,
            idle_timeout=config.server_channel_max_idle_time_seconds,
            limits=config,
            tls=ServerTls(config.tls_settings()),
        )
        # (a broker's DataVersion is some sixty bytes; REGISTER_BROKER's body, parsed in a thread, is not here)
        self.server.dispatcher.limit_bodies({RequestCode.QUERY_DATA_VERSION: MAX_JSON_BODY})
        self.server.on_connection_closed(self._connection_closed)
        #: The broker scan, and the ACL files' watch when ACL is on.
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def protection(self) -> Protection:
        c = self.config
        return protection(enabled=c.protected_mode, acl_enable=c.acl_enable, hosts=[c.listen_host])

    def listening(self) -> str:
        """Where the NameServer listens and whether protected mode is on (the start-up line)."""
        host = self.config.listen_host
        # (127.0.0.4 is no default: it was set, and "the default: loopback only" misread the file)
        why = LOOPBACK_WHY if host == "127.0.0.1" else f"listenHost={host}"
        return listening(host, self.port, why, self.protection)

    async def start(self) -> None:
        self.config.home.mkdir(parents=True, exist_ok=True)
        self.kv.load()
        self.processor.reserve_known_places()
        files = None
        if self.config.acl_enable:  # before the port opens
            files = AclFiles(self.config.rocketmq_home, self.config.acl_file_path)
            self.server.dispatcher.guard = PlainAccessValidator(
                files, "namesrv", freshness=self.config.acl_admin_freshness
            ).only(NAMESRV_WRITE_CODES)
        elif self.protection.active:
            self.server.dispatcher.guard = ProtectedModeGuard("namesrv")
        await self.server.start()
        self._tasks.append(supervise(self._scan_loop, "namesrv-broker-scan"))
        if files is not None:
            acl = files
            self._tasks.append(supervise(lambda: every(RELOAD_CHECK_INTERVAL, acl.maybe_reload), "acl-watch"))
        log.info(
            "NameServer started (tls.server.mode=%s), data in %s; %s",
            self.config.tls_server_mode,
            self.config.home,
            self.listening(),
        )
        if not self.config.acl_enable and binds_beyond_loopback(self.config.listen_host):
            # (registration is a broker's client traffic: protected mode leaves it open)
            log.warning(
                "NameServer on %s with ACL off: any peer that reaches it can register a broker of its own, "
                "with queues of existing topics (taking a share of their sends), or a slave (an HA master's "
                "gate then admits it); set aclEnable=true with the brokers' hosts in "
                "globalWhiteRemoteAddresses where untrusted hosts share the network",
                self.config.listen_host,
            )

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []
        await self.server.stop()
        await self.kv.close()
        await self.processor.places.close()
        log.info("NameServer stopped")

    def _connection_closed(self, conn: Connection) -> None:
        self.routes.on_connection_closed(conn, conn.peer)

    async def _scan_loop(self) -> None:
        interval = self.config.scan_interval_ms / 1000
        await asyncio.sleep(min(FIRST_SCAN_DELAY_MS / 1000, interval))
        while True:
            for expired in self.routes.scan_not_active_brokers():
                if isinstance(expired.connection, Connection):
                    expired.connection.close()
            await asyncio.sleep(interval)
