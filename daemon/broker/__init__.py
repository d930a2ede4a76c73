"""RocketMQ 4.x compatible broker: receives sends, serves pulls, keeps offsets, registers with NameServers.

Layout: `config` (broker.conf as a dataclass), `broker.Broker` (lifecycle), `processors/` (one module
per request family), `managers/` (topics, groups, offsets, consumers, producers, locks), `long_poll`,
`schedule` (delay levels), `metrics` (Prometheus endpoint), `headers` and `bodies` (wire types).
"""

from __future__ import annotations
