"""DLedger mode: a broker group of 3 or 5 replicating its CommitLog by Raft, as RocketMQ 4.9.8's
multi-replica mode (openmessaging DLedger) does: `protocol` the wire beans, `machines` the pure elector and
pusher, `server` their I/O on the broker's event loop."""
