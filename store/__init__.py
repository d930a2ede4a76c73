"""RocketMQ 4.x compatible storage engine: byte-compatible CommitLog, ConsumeQueue, IndexFile,
checkpoint, abort/lock files and config JSON (the format: docs/store-format.md).

Imports nothing from ``daemon`` or ``mqctl``. The broker codes against :class:`MessageStore`
(:mod:`store.api`); :class:`DefaultMessageStore` (:mod:`store.engine`) is the file-backed
implementation and :class:`InMemoryMessageStore` (:mod:`store.memory`) a file-less one with the
same records, offsets and statuses, for broker unit tests.

Lifecycle::

    from store import DefaultMessageStore, Message, StoreConfig

    store = DefaultMessageStore(StoreConfig(store_path_root_dir="/data/store"),
                                store_host=("10.0.0.1", 10911))   # clock=FakeClock() in tests
    store.open()     # lock file, load, recover (normal or abnormal per the abort file; abnormal
                     # re-dispatches from the checkpoint's recovery point, see store.checkpoint)
    store.start()    # catch-up dispatch, create abort, checkpoint, start flush / warm-up threads
    ...
    store.shutdown() # flush, checkpoint, persist offsets, delete abort, release the lock

    with DefaultMessageStore(cfg) as store: ...                   # open + start / shutdown
    DefaultMessageStore(cfg, read_only=True).open()               # inspect any store, changes nothing

Writes (thread-safe; one internal put lock):

* ``put_message(Message) -> PutResult(status, phys_offset, queue_offset, msg_id, wrote_bytes,
  store_timestamp, msg_num)``; ``status`` is a :class:`PutMessageStatus` (``PUT_OK``,
  ``MESSAGE_ILLEGAL``, ``PROPERTIES_SIZE_EXCEEDED``, ``FLUSH_DISK_TIMEOUT``, ``SERVICE_NOT_AVAILABLE``
  when stopped, read-only, ``disk_full`` or when the file system has no block left for the record, its
  ConsumeQueue unit or index entries (``ENOSPC``/``EDQUOT``: blocks are allocated before they are
  written, so a disk filled from outside refuses puts instead of killing the process with SIGBUS, and
  puts succeed again as soon as space returns), ``CREATE_MAPEDFILE_FAILED`` when a file cannot be
  created for another reason).
  The message's properties are stored as given (the broker adds ``CLUSTER``, drops ``WAIT``);
  ``Message.wait_store_msg_ok`` says whether a SYNC_FLUSH put waits for the fsync. A ``DELAY``
  property redirects the message to ``SCHEDULE_TOPIC_XXXX`` as RocketMQ's CommitLog does
  (delivery back to the real topic is the broker's schedule service; not implemented here).
  ``Message.delay_time_level`` overrides the property (``0``: store a ``DELAY`` property without
  delaying, as 4.9.8 does for delivered copies).
* ``put_messages(list[Message])``: a batch for one (topic, queue), consecutive queue offsets,
  ``msg_id`` is the comma-joined ids.
* A put dispatches its own records (ConsumeQueue unit + index entries) before returning, so the
  message is immediately pullable; ``add_arrival_listener(cb)`` registers
  ``cb(topic, queue_id, max_offset)`` called on the putting thread after each put (long polling;
  hop to asyncio with ``loop.call_soon_threadsafe``). In SYNC_FLUSH mode call puts from a thread
  pool (``loop.run_in_executor``): concurrent puts share one fsync (group commit).

Reads (lock-free):

* ``get_messages(group, topic, queue_id, offset, max_count, tag_filter=None) -> GetResult(status,
  messages, next_begin_offset, min_offset, max_offset)``; ``status`` is a :class:`GetMessageStatus`
  (FOUND, NO_MESSAGE_IN_QUEUE, OFFSET_OVERFLOW_ONE, OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL,
  NO_MATCHED_LOGIC_QUEUE, NO_MATCHED_MESSAGE, OFFSET_FOUND_NULL, MESSAGE_WAS_REMOVING);
  ``tag_filter`` is a set of tag hash codes (:func:`tags_code`). Batches stop at 32 messages /
  256 KiB like the broker (``max_transfer_*`` config).
* Each :class:`SelectedMessage` has ``raw`` (memoryview of the stored record — send it as-is in a
  pull response), ``phys_offset``, ``size``, ``queue_offset``, ``tags_code`` and ``message`` (lazily
  decoded, CRC-checked :class:`StoredMessage`; raises :class:`CorruptRecordError` with file and offset).
* ``get_min_offset / get_max_offset(topic, qid)``, ``get_store_timestamp(topic, qid, offset)``,
  ``search_offset_by_timestamp(topic, qid, ts)``, ``get_earliest_message_time(topic=None, qid=0)``,
  ``look_message_by_offset(phys)``, ``look_message_by_msg_id(msg_id)``,
  ``query_message(topic, key, max_num, begin_ms, end_ms) -> QueryResult(messages,
  index_last_update_timestamp, index_last_update_phy_offset)`` (key = a KEYS entry or UNIQ_KEY;
  hits are verified against the stored record), ``max_phy_offset``, ``min_phy_offset``,
  ``flushed_phy_offset``, ``topic_queue_table()``, ``get_consume_queue(topic, qid)``.
* ``dispatch()`` re-runs the CommitLog → ConsumeQueue/index reput (done automatically at start).

Cleanup (docs/store-format.md §cleanup, :mod:`store.cleanup`): a background thread (first run 60 s after
start, then every ``clean_resource_interval``) deletes expired CommitLog files (``file_reserved_time`` hours
after their mtime, during ``delete_when`` hours or above ``disk_max_used_space_ratio``), forcibly above 85 %,
at most 10 per run, never the newest; a forcible run logs at ERROR the unconsumed messages per group it
destroyed, and ``clean_file_forcibly_enable=False`` (4.9.8's ``cleanFileForciblyEnable``) or a
``disk_space_clean_forcibly_ratio`` of 100 or more turns it off; a 10-s disk check refuses puts above 90 %
(``disk_full``) and accepts them again below. ConsumeQueue and index files below the new minimum go too. What
it deletes is one pure plan (:func:`store.cleanup.make_plan`); ``cleanup_plan()`` shows it with the unconsumed
messages per group, ``apply_cleanup_plan(plan)`` applies it at once (offline), and
``delete_expired_files_manually()`` / ``clean_expired_consume_queues()`` serve the admin requests 329 and 306.
Disk usage comes through the :class:`store.cleanup.DiskUsage` seam (``disk_usage=`` argument;
:class:`store.cleanup.FakeDiskUsage` in tests).

Config files: ``store.configs`` (:class:`ConfigFiles`) holds ``topics`` (:class:`TopicConfig`,
``dataVersion``), ``subscription_groups`` (:class:`SubscriptionGroupConfig`), ``consumer_offsets``
(``commit_offset(group, topic, qid, offset)``, ``query_offset`` → -1 if none) and
``delay_offsets``; they read fastjson's shapes and write the broker's byte for byte
(``persist()``: ``.tmp`` then rename, previous version kept as ``.bak``). Topic and group
``update``/``delete`` persist at once; offsets persist at shutdown or when the broker calls
``configs.persist_offsets()``.

DLedger mode (``enable_dleger_commit_log``, 4.9.8's ``DLedgerCommitLog``): records live in DLedger entries
under ``<root>/dledger-<selfId>/`` (:mod:`store.dledger` codecs and the ``RaftLog`` contract,
:mod:`store.dledger_log` the file-backed log, :mod:`store.dledger_commitlog` the CommitLog on it); reads
and dispatch stop at the committed index; ``dispatch_committed()`` after a Raft driver commits.

Codecs (pure, over bytes/memoryview): :mod:`store.record` (records, properties, msgId,
UNIQ_KEY), :mod:`store.javahash`, :mod:`store.consumequeue` (units), :mod:`store.indexfile`,
:mod:`store.fastjson` (the one fastjson codec: wire form and config-file form).

Shared by every layer, each defined once: :mod:`store.models` (``TopicConfig``,
``SubscriptionGroupConfig``, ``DataVersion``, ``PermName`` and their JSON form), :mod:`store.names`
(system topics, groups and prefixes), :mod:`store.message` (property keys, sysflag bits),
:mod:`store.clock` (``Clock``).
Errors: :mod:`store.errors` (``StoreError`` → ``CorruptRecordError(path, offset, reason)``,
``StoreLockedError``, ``StoreFormatError``, ``StoreClosedError``, ``ConfigFileError``,
``UnsupportedCompressionError``).
"""

import lazy_loader

# The public names and where each lives: store/__init__.pyi (read by type checkers and, here, by
# lazy_loader): a name's module is imported on its first use, so ``mqctl topic list`` does not load the
# engine, cleanup and recovery modules it never calls.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

from store.native import extend  # noqa: E402  (after the public names: extend() is not one of them)

extend(__name__, __path__)  # the compiled build of the hot modules, when it is fresh (store/native.py)
