"""RocketMQ 4.x compatible broker: receives sends, serves pulls, keeps offsets, registers with NameServers.

Layout: `config` (broker.conf as a dataclass extending the store's config), `broker.Broker` (lifecycle:
`await start()` / `await stop()`, a `daemon.lifecycle.Service`), `processors/` (one module per request
family: send, pull, heartbeat, offset, query, admin, lock, transaction), `managers/` (topics, groups,
consumers, producers, order locks; topics, groups and offsets persist through the store's
`config_files`), `long_poll` (held pulls), `schedule` (delay levels), `filter` (tag subscriptions),
`stats` and `metrics` (Prometheus `/metrics` and `/healthz`), `headers` and `bodies` (wire types).
"""

from __future__ import annotations

from store.native import extend

extend(__name__, __path__)  # the compiled build of the hot modules, when it is fresh (store/native.py)
