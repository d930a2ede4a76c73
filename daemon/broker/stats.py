"""Put/get counters per topic and group, with the moving TPS averages runtime info and metrics report."""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque


class _Rate:
    """A total plus one sample per second for the last 10 minutes."""

    __slots__ = ("samples", "total")

    def __init__(self) -> None:
        self.total = 0
        self.samples: deque[tuple[float, int]] = deque(maxlen=601)

    def add(self, n: int, now: float) -> None:
        self.total += n
        if not self.samples or now - self.samples[-1][0] >= 1.0:
            self.samples.append((now, self.total))

    def tps(self, window: float, now: float) -> float:
        base = None
        for ts, total in self.samples:
            if now - ts <= window:
                base = (ts, total)
                break
        if base is None or now - base[0] <= 0:
            return 0.0
        return (self.total - base[1]) / max(now - base[0], 1.0)


class TopicPuts:
    """Messages and body bytes stored in one topic: one object per topic, so a send updates one entry."""

    __slots__ = ("bytes", "messages")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0


class BrokerStats:
    """Thread-safe counters: messages put per topic, messages got per (group, topic)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.put = _Rate()
        self.get = _Rate()
        self.put_by_topic: dict[str, TopicPuts] = defaultdict(TopicPuts)
        self.get_by_group_topic: dict[tuple[str, str], int] = defaultdict(int)
        self.get_by_group: dict[str, _Rate] = defaultdict(_Rate)

    def on_put(self, topic: str, count: int = 1, size: int = 0) -> None:
        with self._lock:
            self.put.add(count, time.monotonic())
            puts = self.put_by_topic[topic]
            puts.messages += count
            puts.bytes += size

    def on_get(self, group: str, topic: str, count: int) -> None:
        with self._lock:
            now = time.monotonic()
            self.get.add(count, now)
            self.get_by_group[group].add(count, now)
            self.get_by_group_topic[(group, topic)] += count

    def tps(self, rate: _Rate, window: float) -> float:
        """Average rate over the last `window` seconds."""
        with self._lock:
            return rate.tps(window, time.monotonic())

    def group_get_tps(self, group: str, window: float = 10) -> float:
        """Messages/s a consumer group pulled (ConsumeStats.consumeTps)."""
        with self._lock:
            rate = self.get_by_group.get(group)
            return rate.tps(window, time.monotonic()) if rate is not None else 0.0

    def tps_triplet(self, rate: _Rate) -> str:
        """`putTps`/`getTransferedTps` format: 10 s, 1 min and 10 min averages."""
        return " ".join(f"{self.tps(rate, w):.2f}" for w in (10, 60, 600))
