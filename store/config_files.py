"""The broker's ``config/*.json`` files (docs/store-format.md §config-files): their managers, over
:mod:`store.fastjson` and :mod:`store.models`.

fastjson writes maps with integer keys unquoted (``{0:400,1:400\\n\\t\\t}``), which is not JSON:
:func:`store.fastjson.loads` accepts that shape, :func:`store.fastjson.dumps_pretty` reproduces the
broker's pretty format byte for byte, beans with their properties in alphabetical order
(:meth:`store.models.Bean.to_file_json`). Files are replaced atomically, keeping the previous version
as ``.bak`` as ``ConfigManager.persist`` does.

``topics.json`` also has an append-only ``topics.json.journal`` (ours, unknown to Java): rewriting the
whole table for each of N topics created one at a time costs O(N) each (``benchmarks/bench_topic_apply.py``
measures it; docs/performance.md). A created topic is made durable by
appending one line (the entry and the data version after the change) and one fdatasync; the lines are
replayed at load over the file (those newer than its data version) and folded into the file there, once
the journal holds as many lines as the table has entries (amortized O(1)), at every whole-file write,
and at clean shutdown, so a Java broker started on the store reads complete ``topics.json``.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Collection, Iterator
from typing import Any, ClassVar, Generic, TypeVar

from store import fastjson
from store.clock import Clock, SystemClock
from store.durability import replace_durably, sync_directory
from store.errors import ConfigFileError
from store.models import Bean, DataVersion, SubscriptionGroupConfig, TopicConfig
from store.words import plural

log = logging.getLogger(__name__)

B = TypeVar("B", bound=Bean)

_ENTRY = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*(\{[^{}]*\})', re.S)
_MAX_REPORTED = 200  # differences named in one ERROR line


def salvage_entries(text: str) -> dict[str, Any]:
    """The flat ``"name":{...}`` objects still readable in a damaged config file's text, by name (what a
    fallback to ``.bak`` is measured against: the last good state that can be reconstructed)."""
    out: dict[str, Any] = {}
    for m in _ENTRY.finditer(text):
        try:
            out[m.group(1)] = fastjson.loads(m.group(2))
        except ValueError:
            continue
    return out


class JsonConfigFile:
    """Load from ``<name>`` or its ``.bak``; persist atomically keeping ``.bak``
    (docs/store-format.md §persistence).

    With ``path=None`` the manager lives in memory only (load and persist do nothing).
    """

    def __init__(self, path: str | None, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self.lock = threading.RLock()
        # Persists come from the event loop and from worker threads (group-committed topic creations,
        # periodic offset flushes): one writer of ``<name>.tmp`` at a time, each writing a snapshot.
        # (Re-entrant: a journaled table folds its journal from inside its own journal write.)
        self._write_lock = threading.RLock()
        # Changes counted by the managers that persist periodically (`persist_if_changed`); one counted
        # from the start, so the first periodic persist writes whatever load found (a .bak's table too).
        self._changes = 1
        self._persisted = 0

    def mark_changed(self) -> None:
        """Count a change of the table (call under ``lock``), for `persist_if_changed`."""
        self._changes += 1

    def persist_if_changed(self) -> None:
        """`persist`, unless no change was counted since the last one wrote: the periodic writer of a large
        offset table (tens of ms of Python with 10,000 entries, the GIL held against the event loop the
        while) then costs nothing while no offset moves."""
        if self._changes != self._persisted:
            self.persist()

    def unwritten_changes(self) -> int | None:
        """The change count to pass to `write_text` with a text taken now, or None when the file already
        holds every change counted (or this manager writes nothing)."""
        if self.read_only or self.path is None or self._changes == self._persisted:
            return None
        return self._changes

    def write_text(self, text: str, changes: int) -> None:
        """Write ``text``, taken when the count was ``changes`` (`unwritten_changes`), unless a newer text
        was written since: a text made in slices must not replace what a persist wrote meanwhile."""
        with self._write_lock:
            if changes <= self._persisted:
                return
            self._write(text)
            self._persisted = changes

    def load(self) -> None:
        """Load ``<name>``; when it is damaged, its ``.bak`` (as the broker does), but only after logging at
        ERROR every entry still readable in the damaged file that the ``.bak`` lacks or holds otherwise."""
        if self.path is None:
            return
        damaged: tuple[str, str] | None = None  # (why, text) of an unreadable main file
        for candidate in (self.path, self.path + ".bak"):
            try:
                with open(candidate, "rb") as f:
                    raw = f.read()
            except FileNotFoundError:
                continue
            if not raw.strip():
                continue
            try:
                data = fastjson.loads(raw.decode("utf-8"))
                with self.lock:
                    self.decode(data)  # all or nothing: a value of the wrong type damages the file too
            except (ValueError, TypeError, AttributeError) as e:
                if candidate == self.path:
                    damaged = (str(e), raw.decode("utf-8", errors="replace"))
                    continue
                raise ConfigFileError(f"{self.path} and its .bak are unreadable: {e}") from e
            if damaged is not None:
                self._report_fallback(*damaged, data, source=".bak")
            return
        if damaged is not None:
            self._report_fallback(*damaged, {}, source="nothing (no usable .bak)")

    def _report_fallback(self, why: str, text: str, fallback: dict[str, Any], *, source: str) -> None:
        diffs = self.fallback_differences(text, fallback)
        shown = "; ".join(diffs[:_MAX_REPORTED]) + (
            f"; and {len(diffs) - _MAX_REPORTED} more" if len(diffs) > _MAX_REPORTED else ""
        )
        log.error(
            "%s is unreadable (%s); loading %s instead, which differs from what the damaged file still shows: %s",
            self.path,
            why,
            source,
            shown or "none readable in the damaged file",
        )

    def fallback_differences(self, damaged: str, fallback: dict[str, Any]) -> list[str]:
        """What loading ``fallback`` instead of the ``damaged`` file's text changes, one entry per line
        (each manager knows its entries; by default nothing can be told)."""
        return []

    def persist(self) -> None:
        if self.read_only or self.path is None:
            return
        with self._write_lock:
            with self.lock:
                text = self.text()
                changes = self._changes
            self._write(text)
            self._persisted = changes

    def _write(self, text: str) -> None:
        """Replace the file with ``text`` durably, keeping the previous version as ``.bak``."""
        assert self.path is not None
        with self._write_lock:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            tmp = self.path + ".tmp"
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                if os.path.exists(self.path):
                    shutil.copyfile(self.path, self.path + ".bak")
            except OSError:
                with contextlib.suppress(OSError):  # a disk full half-way: leave no partial file behind
                    os.unlink(tmp)
                raise
            replace_durably(tmp, self.path)

    def text(self) -> str:
        """What ``persist`` writes: ``encode()`` in fastjson's pretty format (called under ``lock``)."""
        return fastjson.dumps_pretty(self.encode())

    def encode(self) -> dict[str, Any]:
        raise NotImplementedError

    def decode(self, data: dict[str, Any]) -> None:
        raise NotImplementedError


#: A journal is folded once it holds as many lines as the table has entries, and at least this many.
JOURNAL_FOLD_MIN = 1000


class _VersionedTable(JsonConfigFile, Generic[B]):
    """A ``dataVersion`` plus a name → bean table; every update or delete bumps the version and persists."""

    TABLE: str  # the table's key in the file
    BEAN: type[B]
    NAME: str  # the bean property that names an entry
    #: Whether :meth:`persist_changes` appends to ``<name>.journal`` (see the module docstring).
    JOURNALED: ClassVar[bool] = False

    def __init__(self, path: str | None, clock: Clock, *, read_only: bool = False) -> None:
        super().__init__(path, read_only=read_only)
        self.clock = clock
        self.data_version = DataVersion()
        self.table: dict[str, B] = {}
        #: Moves on every change of the table (an entry put, replaced or deleted, the table replaced), whether
        #: or not the data version moves with it: what a reader keeping entries compares (one int).
        self.generation = 0
        #: Each entry as last written (a copy: entries may be changed in place) and its line: rewriting
        #: the file after one change among 1,000 entries renders one (pretty-printing is json's slow
        #: pure-Python encoder) and compares the rest.
        self._rendered: dict[str, tuple[B, str]] = {}
        #: Entries changed since the file or the journal last took them.
        self._unjournaled: set[str] = set()
        self._journal_lines = 0
        #: Bodies of the whole table kept by name, with the generation and data version each was made at.
        self._bodies: dict[str, tuple[tuple[int, int, int], bytes | None]] = {}

    @property
    def journal_path(self) -> str | None:
        return self.path + ".journal" if self.JOURNALED and self.path is not None else None

    def load(self) -> None:
        """The file (or its ``.bak``), then the journal's lines newer than its data version, folded in;
        older lines no fold line says the file took are restored where the file lacks their topic."""
        super().load()
        journal = self.journal_path
        if journal is None or not os.path.exists(journal):
            return
        with open(journal, "rb") as f:
            lines = f.read().split(b"\n")
        self._journal_lines = 0 if lines == [b""] else len(lines)  # (what persist() resets)
        changes: list[tuple[DataVersion, B | None, str]] = []  # (version, the put or None: a delete, name)
        held = 0  # the lines before the last fold line at the file's version: that file holds them
        for n, line in enumerate(lines[:-1]):  # (what follows the last newline never completed)
            try:
                entry = json.loads(line)  # values in fastjson's text: bare int keys survive the trip
                if "fold" in entry:
                    if DataVersion.from_json(fastjson.loads(entry["fold"])) == self.data_version:
                        held = len(changes)
                    continue
                version = DataVersion.from_json(fastjson.loads(entry["dataVersion"]))
                put = self.BEAN.from_json(fastjson.loads(entry["put"])) if "put" in entry else None
                changes.append((version, put, self._name(put) if put is not None else str(entry["delete"])))
            except (ValueError, KeyError, TypeError) as e:  # a whole line damaged: not a torn append
                kept = None if self.read_only else self._keep_damaged(journal)
                log.error(
                    "%s: line %d of %d unreadable (%s): it and the lines after it are not replayed%s",
                    journal,
                    n + 1,
                    len(lines) - 1,
                    e,
                    f"; the journal is kept as {kept}" if kept else "",
                )
                break
        applied = 0
        base = self.data_version.counter  # (the lines of one write share the version after its last change)
        in_file = set(self.table)
        restored: set[str] = set()
        for version, put, name in changes[held:]:
            if version.counter <= base and name in in_file:
                continue  # the file's writer never read this line, but has the topic: its entry stands
            with self.lock:
                if put is not None:
                    self.table[name] = put
                else:
                    self.table.pop(name, None)
                self.generation += 1
                if version.counter > base:
                    self.data_version = version
            if version.counter <= base:
                (restored.add if put is not None else restored.discard)(name)
            applied += 1
        if restored:
            with self.lock:
                self.data_version.next_version(self.clock.now_ms())
            log.error(
                "%s was rewritten at data version %d without the journal's changes (by a broker that does not "
                "read %s: a Java broker started after a crash?); restored from the journal: %s",
                self.path,
                base,
                journal,
                ", ".join(sorted(restored)),
            )
        if applied:
            log.info("%s: %s replayed from %s", self.path, plural(applied, "change"), journal)
        if self.read_only:
            return
        if applied:
            self.persist()  # folds them in and empties the journal
        elif self._journal_lines:
            self._reset_journal(journal)

    def persist(self) -> None:
        """Write the whole file, then empty the journal (the file now holds every journaled change).

        Before the file, a fold line naming the version it is written at goes to the journal: a crash
        before the journal's reset leaves lines that file holds, while lines at versions the file also
        has but no fold line vouches for were never read by whoever wrote it (a Java broker started after
        a SIGKILL), and :meth:`load` restores them."""
        if self.read_only or self.path is None:
            return
        with self._write_lock:
            with self.lock:
                taken, self._unjournaled = self._unjournaled, set()
                text = self.text()
                version = fastjson.dumps_pretty(self.data_version.to_file_json())
            try:
                journal = self.journal_path
                if journal is not None and self._journal_lines:
                    self._append(journal, [json.dumps({"fold": version}) + "\n"])
                self._write(text)
            except BaseException:
                with self.lock:
                    self._unjournaled |= taken
                raise
            journal = self.journal_path
            if journal is not None and not self.read_only and self._journal_lines:
                self._reset_journal(journal)

    def _keep_damaged(self, journal: str) -> str:
        """Copy a damaged journal aside under a name of its own (``.damaged.<ms>``): it is emptied next, and
        an earlier incident's copy must not be overwritten by a later one."""
        stamp = self.clock.now_ms()
        while os.path.exists(kept := f"{journal}.damaged.{stamp}"):
            stamp += 1
        shutil.copyfile(journal, kept)
        return kept

    def persist_changes(self) -> None:
        """Make the entries changed since the last write durable: one journal line each, one fdatasync
        (the whole file when the table is not journaled, or when the journal is due to be folded)."""
        journal = self.journal_path
        if journal is None or self.read_only:
            self.persist()
            return
        with self._write_lock:
            with self.lock:
                if not self._unjournaled:
                    return  # (a whole-file write took them meanwhile, and has finished)
                if self._journal_lines + len(self._unjournaled) >= max(JOURNAL_FOLD_MIN, len(self.table)):
                    fold = True
                else:
                    fold = False
                    names, self._unjournaled = self._unjournaled, set()
                    version = fastjson.dumps_pretty(self.data_version.to_file_json())
                    lines = []
                    for name in sorted(names):
                        bean = self.table.get(name)
                        change = (
                            {"put": fastjson.dumps_pretty(bean.to_file_json())}
                            if bean is not None
                            else {"delete": name}
                        )
                        lines.append(
                            json.dumps({"dataVersion": version, **change}, ensure_ascii=False) + "\n"
                        )
            if fold:
                self.persist()
                return
            try:
                self._append(journal, lines)
            except BaseException:
                with self.lock:
                    self._unjournaled |= names
                raise

    def _append(self, journal: str, lines: list[str]) -> None:
        """Append whole ``lines`` to the journal durably (one fdatasync), or nothing at all."""
        created = not os.path.exists(journal)
        fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = "".join(lines).encode("utf-8")
            start = os.fstat(fd).st_size
            try:
                if os.write(fd, data) != len(data):  # a full disk part-way
                    raise OSError(errno.ENOSPC, "journal write cut short")
                os.fdatasync(fd)
            except OSError:
                os.ftruncate(fd, start)  # no torn line before the next write's lines
                raise
        finally:
            os.close(fd)
        if created:
            sync_directory(os.path.dirname(os.path.abspath(journal)))
        self._journal_lines += len(lines)

    def fold(self) -> None:
        """Write journaled (or not yet written) changes into the file: at clean shutdown, for Java."""
        if self._journal_lines or self._unjournaled:
            self.persist()

    def _reset_journal(self, journal: str) -> None:
        with open(journal, "r+b") as f:
            f.truncate(0)
            os.fsync(f.fileno())
        self._journal_lines = 0

    def encode(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_file_json(),
            self.TABLE: {k: v.to_file_json() for k, v in self.table.items()},
        }

    def text(self) -> str:
        """``fastjson.dumps_pretty(self.encode())``, with the lines of unchanged entries reused."""
        previous, rendered = self._rendered, {}
        for name, bean in self.table.items():
            old = previous.get(name)
            if old is None or old[0] != bean:
                entry = fastjson.dumps_pretty(bean.to_file_json(), 2)
                old = (copy.deepcopy(bean), f"\t\t{json.dumps(name, ensure_ascii=False)}:{entry}")
            rendered[name] = old
        self._rendered = rendered
        table = "{\n" + ",\n".join(line for _, line in rendered.values()) + "\n\t}" if rendered else "{}"
        version = fastjson.dumps_pretty(self.data_version.to_file_json(), 1)
        return f'{{\n\t"dataVersion":{version},\n\t"{self.TABLE}":{table}\n}}'

    def decode(self, data: dict[str, Any]) -> None:
        table = {}
        for k, v in (data.get(self.TABLE) or {}).items():
            try:
                table[k] = self.BEAN.from_json(v)
            except (TypeError, ValueError) as e:
                raise ValueError(f"entry {k!r}: {e}") from e
        self.data_version = DataVersion.from_json(data.get("dataVersion") or {})
        self.table = table
        self.generation += 1

    def fallback_differences(self, damaged: str, fallback: dict[str, Any]) -> list[str]:
        """Entries readable in the damaged file that ``fallback`` lacks or holds otherwise."""
        table = fallback.get(self.TABLE) or {}
        out = []
        for name, entry in salvage_entries(damaged).items():
            if not isinstance(entry, dict) or self.NAME not in entry:
                continue
            if name not in table:
                out.append(f"{name} (missing)")
            elif table[name] != entry:
                changed = sorted(
                    k for k in entry.keys() | table[name].keys() if entry.get(k) != table[name].get(k)
                )
                out.append(
                    f"{name} ({', '.join(f'{k} {entry.get(k)} -> {table[name].get(k)}' for k in changed)})"
                )
        return out

    def _name(self, config: B) -> str:
        raise NotImplementedError

    def get(self, name: str) -> B | None:
        return self.table.get(name)

    def kept_body(self, name: str, make: Callable[[], bytes | None]) -> bytes | None:
        """``make()``'s answer, kept as ``name`` and made again only after the table or its data version
        moved (entries are replaced, never changed in place): a whole-table body a client polls costs
        one encoding per change, not one per request."""
        with self.lock:
            made_at = (self.generation, self.data_version.counter, self.data_version.timestamp)
        kept = self._bodies.get(name)
        if kept is not None and kept[0] == made_at:
            return kept[1]
        body = make()  # (of the table as at made_at or newer: a change since moved the generation)
        self._bodies[name] = (made_at, body)
        return body

    def update(self, config: B, *, persist: bool = True) -> None:
        """Add or replace ``config``; ``persist=False`` leaves the write to the caller (group commit)."""
        with self.lock:
            name = self._name(config)
            self.table[name] = config
            self.data_version.next_version(self.clock.now_ms())
            self.generation += 1
            self._unjournaled.add(name)
        if persist:
            self.persist()

    def revert(self, config: B, old: B | None) -> bool:
        """Undo ``update(config, persist=False)`` when its write failed (a refused change must not stay in
        force, nor reach the file with a later write), unless the entry changed since; whether it did."""
        with self.lock:
            name = self._name(config)
            if self.table.get(name) is not config:
                return False
            if old is None:
                del self.table[name]
            else:
                self.table[name] = old
            self.generation += 1
            self.data_version.next_version(self.clock.now_ms())
            self._unjournaled.add(name)
        return True

    def delete(self, name: str) -> bool:
        with self.lock:
            if self.table.pop(name, None) is None:
                return False
            self.generation += 1
            self.data_version.next_version(self.clock.now_ms())
            self._unjournaled.add(name)
        self.persist()
        return True


class TopicConfigFile(_VersionedTable[TopicConfig]):
    """``topics.json``: topic configs plus a ``dataVersion`` bumped on every change."""

    TABLE = "topicConfigTable"
    BEAN = TopicConfig
    NAME = "topicName"
    JOURNALED = True

    def _name(self, config: TopicConfig) -> str:
        return config.topic_name


class SubscriptionGroupFile(_VersionedTable[SubscriptionGroupConfig]):
    """``subscriptionGroup.json``."""

    TABLE = "subscriptionGroupTable"
    BEAN = SubscriptionGroupConfig
    NAME = "groupName"

    def _name(self, config: SubscriptionGroupConfig) -> str:
        return config.group_name


class ConsumerOffsetManager(JsonConfigFile):
    """``consumerOffset.json``: ``topic@group`` → {queueId: next offset to consume}
    (docs/store-format.md §consumer-offsets)."""

    def __init__(self, path: str | None, *, read_only: bool = False) -> None:
        super().__init__(path, read_only=read_only)
        self.table: dict[str, dict[int, int]] = {}
        #: the ``topic@group`` keys :meth:`merge` took from a master and kept (this process's only)
        self.synced: set[str] = set()
        #: of those, the ones the master's last table lacked, kept all the same
        self.kept: set[str] = set()

    def encode(self) -> dict[str, Any]:
        return {"offsetTable": {k: dict(v) for k, v in self.table.items()}}

    def decode(self, data: dict[str, Any]) -> None:
        self.table = {
            k: {int(q): int(o) for q, o in v.items()} for k, v in (data.get("offsetTable") or {}).items()
        }

    def fallback_differences(self, damaged: str, fallback: dict[str, Any]) -> list[str]:
        """Every committed offset that falls back: group/topic/queue with the value it now has, and the value
        the damaged file held when it is still readable there."""
        older = {
            k: {int(q): int(o) for q, o in v.items()} for k, v in (fallback.get("offsetTable") or {}).items()
        }
        newer: dict[str, dict[int, int]] = {}
        for key, queues in salvage_entries(damaged).items():
            if "@" in key and isinstance(queues, dict):
                with contextlib.suppress(TypeError, ValueError):
                    newer[key] = {int(q): int(o) for q, o in queues.items()}
        out = []
        for key in sorted(older.keys() | newer.keys()):
            topic, _, group = key.partition("@")
            old_q, new_q = older.get(key, {}), newer.get(key, {})
            for q in sorted(old_q.keys() | new_q.keys()):
                was, now = new_q.get(q), old_q.get(q)
                if was == now:
                    continue
                value = "none" if now is None else str(now)
                out.append(f"{group}/{topic}/{q} = {value} ({'unreadable' if was is None else f'was {was}'})")
        return out

    def text_slices(self, size: int) -> Iterator[str]:
        """`text()` in pieces of ``size`` entries each, for a caller that serves requests between them (the
        broker's event loop: made in one piece, 10,000 entries are tens of ms of Python). Each entry is
        read when its piece is made; an entry changed after the pieces began is counted as a change, so
        the next periodic persist writes it."""
        with self.lock:
            items = list(self.table.items())
        if not items:
            yield self.text()
            return
        yield '{\n\t"offsetTable":{\n'
        for start in range(0, len(items), size):
            with self.lock:
                piece = ",\n".join(
                    f"\t\t{json.dumps(key, ensure_ascii=False)}:{fastjson.dumps_pretty(dict(queues), 2)}"
                    for key, queues in items[start : start + size]
                )
            yield (",\n" if start else "") + piece
        yield "\n\t}\n}"

    def wire_slices(self, size: int) -> Iterator[str]:
        """GET_ALL_CONSUMER_OFFSET's body, ``fastjson.dumps({"offsetTable": table}, bare_int_keys=True)``'s
        text, in pieces of ``size`` entries for a caller that serves requests between them: fastjson's
        general writer took tens of ms for 10,000 entries in one piece. Each entry is read when its piece
        is made (one deleted since the names were taken is left out)."""
        with self.lock:
            keys = sorted(self.table)
        yield '{"offsetTable":{'
        first = True
        for start in range(0, len(keys), size):
            parts: list[str] = []
            with self.lock:
                table = self.table
                for key in keys[start : start + size]:
                    queues = table.get(key)
                    if queues is None:
                        continue
                    inner = ",".join(f"{q}:{queues[q]}" for q in sorted(queues))
                    parts.append(f"{json.dumps(key, ensure_ascii=False)}:{{{inner}}}")
            if parts:
                yield ("" if first else ",") + ",".join(parts)
                first = False
        yield "}}"

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self.lock:
            queues = self.table.setdefault(f"{topic}@{group}", {})
            if queues.get(queue_id) != offset:  # (an idle consumer commits the same offsets every 5 s)
                queues[queue_id] = offset
                self._changes += 1

    def unheld(self, table: dict[str, dict[int, int]]) -> set[str]:
        """The keys an earlier :meth:`merge` took from a master that ``table`` (its table now) lacks."""
        with self.lock:
            return self.synced - table.keys()

    def merge(self, table: dict[str, dict[int, int]], drop: Collection[str] = ()) -> bool:
        """Take every entry of ``table`` (a master's, on a slave) and drop the entries ``drop`` names, which
        an earlier merge took and ``table`` no longer holds (the master deleted them: a failover must not
        bring them back). Such an entry not in ``drop`` is kept, and still counts as taken from the master;
        an entry never taken from a master (committed to this member alone) is kept. Whether anything
        changed."""
        with self.lock:
            before = {k: dict(v) for k, v in self.table.items()}
            unheld = self.synced - table.keys()
            for key in unheld.intersection(drop):
                self.table.pop(key, None)
            self.kept = unheld.difference(drop)
            self.synced = set(table) | self.kept
            self.table.update(table)
            if self.table == before:
                return False
            self._changes += 1
            return True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Committed offset, or -1 when the group never committed one for that queue."""
        return self.table.get(f"{topic}@{group}", {}).get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}@{group}", {}))

    def groups_of(self, topic: str) -> set[str]:
        return {k.split("@", 1)[1] for k in self.table if k.split("@", 1)[0] == topic}

    def topics_of(self, group: str) -> set[str]:
        return {k.split("@", 1)[0] for k in self.table if k.split("@", 1)[1] == group}

    def groups(self) -> set[str]:
        """Every group with a committed offset."""
        return {k.split("@", 1)[1] for k in list(self.table)}

    def snapshot(self) -> dict[str, dict[int, int]]:
        """A copy of ``topic@group`` → {queue: offset}, safe to walk while commits go on."""
        with self.lock:
            return {k: dict(v) for k, v in self.table.items()}

    def delete_topic(self, topic: str) -> int:
        """Forget every group's offsets of ``topic`` (DELETE_TOPIC_IN_BROKER); returns the entries dropped."""
        return self._delete(lambda t, _g: t == topic)

    def delete_group(self, group: str) -> int:
        """Forget ``group``'s offsets of every topic (DELETE_SUBSCRIPTIONGROUP with removeOffset)."""
        return self._delete(lambda _t, g: g == group)

    def _delete(self, doomed: Callable[[str, str], bool]) -> int:
        with self.lock:
            keys = [k for k in self.table if doomed(*_split_key(k))]
            for key in keys:
                del self.table[key]
            if keys:
                self._changes += 1
        return len(keys)


def _split_key(key: str) -> tuple[str, str]:
    """``topic@group`` → (topic, group); a key without ``@`` (hand-edited) has an empty group."""
    topic, _, group = key.partition("@")
    return topic, group


class DelayOffsetManager(JsonConfigFile):
    """``delayOffset.json``: delay level → next offset of queue ``level - 1`` of SCHEDULE_TOPIC_XXXX."""

    def __init__(self, path: str | None, *, read_only: bool = False) -> None:
        super().__init__(path, read_only=read_only)
        self.table: dict[int, int] = {}

    def encode(self) -> dict[str, Any]:
        return {"offsetTable": dict(self.table)}

    def decode(self, data: dict[str, Any]) -> None:
        self.table = {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}

    def offset(self, level: int) -> int:
        """Next offset of ``level``'s queue (0: nothing delivered yet)."""
        return self.table.get(level, 0)

    def set_offset(self, level: int, offset: int) -> None:
        with self.lock:  # (the broker persists the table from a worker thread)
            if self.table.get(level) != offset:
                self.table[level] = offset
                self._changes += 1

    def replace(self, table: dict[int, int]) -> bool:
        """Take a master's table (on a slave); whether anything changed."""
        with self.lock:
            if table == self.table:
                return False
            self.table = table
            self._changes += 1
            return True

    def offsets(self) -> dict[int, int]:
        """A copy of level → next offset."""
        return dict(self.table)


class ConfigFiles:
    """The managers of one store's ``config/`` directory (``directory=None``: in memory only)."""

    def __init__(self, directory: str | None, *, clock: Clock | None = None, read_only: bool = False) -> None:
        clk = clock or SystemClock()
        self.directory = directory

        def path(name: str) -> str | None:
            return os.path.join(directory, name) if directory is not None else None

        self.topics = TopicConfigFile(path("topics.json"), clk, read_only=read_only)
        self.subscription_groups = SubscriptionGroupFile(
            path("subscriptionGroup.json"), clk, read_only=read_only
        )
        self.consumer_offsets = ConsumerOffsetManager(path("consumerOffset.json"), read_only=read_only)
        self.delay_offsets = DelayOffsetManager(path("delayOffset.json"), read_only=read_only)

    def load(self) -> None:
        for m in (self.topics, self.subscription_groups, self.consumer_offsets, self.delay_offsets):
            m.load()

    def persist_offsets(self) -> None:
        """What the broker persists periodically and at shutdown (topics and groups persist on change): each
        file only when an offset in it changed since it was last written."""
        self.consumer_offsets.persist_if_changed()
        self.delay_offsets.persist_if_changed()
