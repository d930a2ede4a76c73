"""RocketMQ 4.x compatible storage engine (byte-compatible CommitLog, ConsumeQueue, IndexFile).

The public API is documented in full once the engine lands; the codec layer is in
:mod:`store.record`, the message model in :mod:`store.message`.
"""

from __future__ import annotations
