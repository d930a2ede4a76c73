"""Broker processes the nemesis can hurt: each is ``mqctl broker start -c broker.conf`` in a subprocess
(so SIGKILL and SIGSTOP hit a real process), on a fixed loopback port, with its store and log in the
test's directory; a restart starts the same configuration on the same store."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from daemon.remoting.client import RemotingClient
from daemon.remoting.codes import RequestCode, ResponseCode
from daemon.remoting.command import RemotingCommand
from tests.jepsen.history import History, Op
from tests.jepsen.proxy import Mode, Proxy
from tests.listeners import listening
from tests.support.paths import ROOT
from tests.support.ports import free_port
from tests.support.waiting import wait_until


def write_conf(path: Path, keys: dict[str, object]) -> Path:
    """A broker.conf with RocketMQ's own key names (``brokerRole=SYNC_MASTER``...)."""
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))
    return path


@dataclass
class Node:
    """One broker process: ``keys`` is its broker.conf; ``dir`` holds the conf, the store and the log."""

    name: str
    dir: Path
    keys: dict[str, object]
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    #: Where the store lives, when not in ``dir`` (a small file system of its own, say).
    store_dir: Path | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def store(self) -> Path:
        return self.store_dir or self.dir / "store"

    @property
    def log(self) -> Path:
        return self.dir / "broker.log"

    def start(self) -> None:
        """Start (or restart, on the store it left) the broker; ``ready`` waits for it to answer."""
        self.dir.mkdir(parents=True, exist_ok=True)
        keys = {
            "brokerIP1": "127.0.0.1",
            "listenHost": "127.0.0.1",
            "listenPort": self.port,
            "storePathRootDir": self.store,
            "metricsEnable": "false",
            # no VIP port (listenPort - 2): the ports the harness picks (HA, peers, proxy links) are
            # free-port picks, which the OS hands out close together, and one may be listenPort - 2
            "vipListenEnable": "false",
            **self.keys,
        }
        conf = write_conf(self.dir / "broker.conf", keys)
        argv = [sys.executable, "-m", "mqctl", "broker", "start", "-c", str(conf)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=log, stderr=log)

    async def ready(self, client: RemotingClient, timeout: float = 120.0) -> None:
        """Wait until the broker answers (it must not exit meanwhile). Patient: a process started on a
        loaded host takes many times its quiet start to import, open its store and bind, and a request
        to a loop still busy starting is answered late rather than not at all."""

        async def answers() -> bool:
            assert self.proc is not None and self.proc.poll() is None, (
                f"{self.name} exited:\n{self.log_tail()}"
            )
            try:
                r = await client.invoke(
                    self.addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10.0
                )
            except Exception:
                return False
            return r.code == ResponseCode.SUCCESS

        await wait_until(
            answers, timeout, lambda: f"{self.name} ({self.addr}) never answered:\n{self.log_tail()}"
        )
        # another process on this port (free_port races with the machine's other tests) would answer too
        assert self.proc is not None and ("127.0.0.1", self.port) in listening(self.proc.pid), (
            f"{self.name} does not listen on {self.addr}:\n{self.log_tail()}"
        )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        """SIGTERM (after SIGCONT, should it be paused), then SIGKILL if it does not go in time."""
        if not self.running:
            return
        assert self.proc is not None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


async def stop_all(nodes: list[Node]) -> None:
    """Stop ``nodes`` together, off the event loop: the NameServer they unregister from runs on it."""
    await asyncio.gather(*(asyncio.to_thread(node.stop) for node in nodes))


class Nemesis:
    """Process faults, each recorded in the history as the nemesis' operation."""

    def __init__(self, history: History) -> None:
        self.history = history

    def kill(self, node: Node) -> None:
        """SIGKILL: no shutdown hook, no flush; what the page cache holds survives, as after a crash."""
        node.signal(signal.SIGKILL)
        assert node.proc is not None
        node.proc.wait(10)
        self.history.nemesis("kill", node.name)

    def pause(self, node: Node) -> Op:
        """SIGSTOP: the process holds its sockets and answers nothing (a long GC pause, a frozen VM)."""
        op = self.history.nemesis("pause", node.name)
        node.signal(signal.SIGSTOP)
        return op

    def resume(self, node: Node) -> Op:
        node.signal(signal.SIGCONT)
        return self.history.nemesis("resume", node.name)

    def partition(self, proxy: Proxy, link: str, mode: Mode = "stall") -> Op:
        """Cut a proxy link (see :class:`tests.jepsen.proxy.Proxy`); the entry comes first, so every send
        invoked after it met the partition."""
        op = self.history.nemesis("partition", f"{link}:{mode}")
        proxy.partition(link, mode)
        return op

    def slow(self, proxy: Proxy, link: str, seconds: float) -> Op:
        """Give a proxy link ``seconds`` of latency each way (0: back to normal)."""
        op = self.history.nemesis("delay", f"{link}:{seconds:g}s")
        proxy.set_delay(link, seconds)
        return op

    def heal(self, proxy: Proxy, link: str) -> Op:
        proxy.heal(link)
        return self.history.nemesis("heal", link)

    async def stop(self, node: Node) -> Op:
        """SIGTERM, and wait (off the event loop, where the NameServer and the clients run) until it exits."""
        node.signal(signal.SIGTERM)
        assert node.proc is not None
        await asyncio.to_thread(node.proc.wait, 30)
        return self.history.nemesis("stop", node.name)

    def restart(self, node: Node) -> None:
        """Start a stopped or killed node again on its old store."""
        assert not node.running, f"{node.name} is still running"
        node.start()
        self.history.nemesis("restart", node.name)
