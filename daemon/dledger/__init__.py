"""DLedger mode: a broker group of 3 or 5 replicating its CommitLog by Raft, as RocketMQ 4.9.8's
multi-replica mode (openmessaging DLedger) does: `protocol` the wire beans, `machines` the pure elector and
pusher, `server` their I/O on the broker's event loop."""

from __future__ import annotations

from store.native import extend

extend(__name__, __path__)  # the compiled build of the hot modules, when it is fresh (store/native.py)
