"""Prototype for issue 19's second core: acceptor processes encode sends, one writer appends them.

    python benchmarks/bench_second_core.py [--messages 200000] [--batch 16] [--acceptors 1,2]

What a broker split into processes would do per SEND_MESSAGE_V2 (1 KiB body, ali-ons' header), using
our real codecs, with no sockets (the frames are built first, as a pipelining client delivers them):

- ``inline``: one process decodes the frame, parses the header and properties, encodes the CommitLog
  record, appends it (offsets, store timestamp, copy into a mapped file, the ConsumeQueue unit, the index
  key hash) and encodes the response: the single-core broker's path, minus the store's bookkeeping.
- ``split``: K acceptor processes (SO_REUSEPORT listeners, in a real broker) each decode, parse, check
  and encode the record with placeholder offsets, and hand ``--batch`` records at a time over a pipe to
  one writer process, which patches the offsets and the store timestamp in place, copies the bytes into
  its mapped file, writes the unit and answers (physical offset, queue offset) per record; the acceptor
  encodes the responses. The CommitLog append stays one sequential writer, as RocketMQ's design wants.

Prints messages/s over the wall clock, the CPU per message of each process (``time.process_time``) and
the total CPU per message. The trade-off it measures is written down in daemon/broker/broker.py.
"""

from __future__ import annotations

import argparse
import json
import mmap
import multiprocessing as mp
import os
import struct
import tempfile
import time
from multiprocessing.connection import Connection

from daemon.broker.headers import SendMessageResponseHeader
from daemon.broker.processors.send import parse_send
from daemon.remoting.frame import decode_frame, encode_command
from store.javahash import index_key_hash
from store.message import Message
from store.record import decode_properties, encode_host, encode_properties, encode_record_parts, topic_field

BODY = b"x" * 1024
STORE_HOST = ("127.0.0.1", 10911)
_QUEUE_OFFSET_AT = 20  # record fields the writer patches (store-format.md §2.1, IPv4 born host)
_PHYSICAL_OFFSET_AT = 28
_STORE_TIMESTAMP_AT = 56
_I64 = struct.Struct(">q")
_UNIT = struct.Struct(">qiq")
_RESULT = struct.Struct(">qq")
_LEN = struct.Struct(">i")
FILE_SIZE = 1 << 30


def frames(n: int, start: int) -> list[bytes]:
    """``n`` SEND_MESSAGE_V2 frames as ali-ons encodes them (numbers in extFields, JSON header)."""
    out = []
    for i in range(start, start + n):
        props = f"UNIQ_KEY\x01C0A80101000{i:021X}\x02WAIT\x01true\x02"
        ext = {
            "a": "ab-group",
            "b": "AbBench",
            "c": "TBW102",
            "d": 4,
            "e": i % 8,
            "f": 0,
            "g": 1_700_000_000_000 + i,
            "h": 0,
            "i": props,
            "j": 0,
            "k": False,
        }
        header = json.dumps(
            {"code": 310, "language": "JAVA", "opaque": i + 1, "flag": 0, "version": 317, "extFields": ext}
        ).encode()
        out.append(struct.pack(">ii", 4 + len(header) + len(BODY), len(header)) + header + BODY)
    return out


def accept(frame: bytes) -> tuple[bytes, str, int, object]:
    """Acceptor half: decode and parse a send, encode its record with placeholder offsets."""
    decoded = decode_frame(frame)
    assert decoded is not None
    request = decoded[0]
    h = parse_send(request.code, request.ext_fields)
    props = decode_properties(h.properties) if h.properties else {}
    props.pop("WAIT", None)
    props["CLUSTER"] = "DefaultCluster"
    msg = Message(
        h.topic, request.body, h.queue_id, h.flag, props, h.sys_flag, h.born_timestamp, ("127.0.0.1", 40000)
    )
    record = encode_record_parts(
        msg,
        encode_properties(props),
        encode_host(msg.born_host),
        encode_host(STORE_HOST),
        topic_field(h.topic),
        0,
        0,
        0,
    )
    return record, f"{h.topic}#{props['UNIQ_KEY']}", h.queue_id, request


def respond(request: object, phys: int, qoff: int) -> bytes:
    """Acceptor half: the SEND_MESSAGE_V2 response frame."""
    header = SendMessageResponseHeader(f"7F00000100002A9F{phys:016X}", 0, qoff)
    return encode_command(request.make_response(ext_fields=header.to_ext_fields()))  # type: ignore[attr-defined]


class Writer:
    """The sequential half: offsets, store timestamp, the copy into the CommitLog, the unit, the index hash."""

    def __init__(self, directory: str) -> None:
        fd = os.open(os.path.join(directory, "commitlog"), os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, FILE_SIZE)
        self.log = mmap.mmap(fd, FILE_SIZE)
        self.cq = bytearray(_UNIT.size * 8 * 1_000_000)
        self.pos = 0
        self.next_offsets = [0] * 8

    def append(self, record: bytes | memoryview, key: str, queue_id: int) -> tuple[int, int]:
        pos, size = self.pos, len(record)
        qoff = self.next_offsets[queue_id]
        self.next_offsets[queue_id] = qoff + 1
        log = self.log
        log[pos : pos + size] = record
        _I64.pack_into(log, pos + _QUEUE_OFFSET_AT, qoff)
        _I64.pack_into(log, pos + _PHYSICAL_OFFSET_AT, pos)
        _I64.pack_into(log, pos + _STORE_TIMESTAMP_AT, int(time.time() * 1000))
        _UNIT.pack_into(self.cq, (queue_id * 1_000_000 + qoff) * _UNIT.size, pos, size, 0)
        index_key_hash(key)
        self.pos = pos + size
        return pos, qoff


def run_inline(n: int) -> dict[str, float]:
    batch = frames(n, 0)
    with tempfile.TemporaryDirectory() as d:
        writer = Writer(d)
        cpu, wall = time.process_time(), time.perf_counter()
        for frame in batch:
            record, key, queue_id, request = accept(frame)
            respond(request, *writer.append(record, key, queue_id))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"msgs_per_s": n / wall, "cpu_us": cpu / n * 1e6}


def acceptor(pipe: Connection, batch: list[bytes], size: int, out: Connection) -> None:
    cpu = time.process_time()
    for at in range(0, len(batch), size):
        parts, requests = [], []
        for frame in batch[at : at + size]:
            record, key, queue_id, request = accept(frame)
            k = key.encode()
            parts += [_LEN.pack(len(record)), record, _LEN.pack(len(k)), k, bytes((queue_id,))]
            requests.append(request)
        pipe.send_bytes(b"".join(parts))
        results = pipe.recv_bytes()
        for i, request in enumerate(requests):
            respond(request, *_RESULT.unpack_from(results, i * _RESULT.size))
    pipe.send_bytes(b"")
    out.send(("acceptor", time.process_time() - cpu))


def writer_loop(pipes: list[Connection], out: Connection) -> None:
    from multiprocessing.connection import wait

    with tempfile.TemporaryDirectory() as d:
        writer = Writer(d)
        cpu = time.process_time()
        open_pipes = list(pipes)
        while open_pipes:
            for pipe in wait(open_pipes):
                data = pipe.recv_bytes()  # type: ignore[union-attr]
                if not data:
                    open_pipes.remove(pipe)  # type: ignore[arg-type]
                    continue
                view, pos, results = memoryview(data), 0, []
                while pos < len(data):
                    (size,) = _LEN.unpack_from(data, pos)
                    record = view[pos + 4 : pos + 4 + size]
                    pos += 4 + size
                    (klen,) = _LEN.unpack_from(data, pos)
                    key = bytes(view[pos + 4 : pos + 4 + klen]).decode()
                    pos += 4 + klen
                    results.append(_RESULT.pack(*writer.append(record, key, data[pos])))
                    pos += 1
                pipe.send_bytes(b"".join(results))  # type: ignore[union-attr]
        out.send(("writer", time.process_time() - cpu))


def run_split(n: int, acceptors: int, size: int) -> dict[str, float]:
    ctx = mp.get_context("fork")  # the children inherit the frames built here
    each = n // acceptors
    batch = frames(each * acceptors, 0)
    ours, theirs = zip(*(ctx.Pipe() for _ in range(acceptors)), strict=True)
    cpu_out, cpu_in = ctx.Pipe()
    procs = [ctx.Process(target=writer_loop, args=(list(theirs), cpu_in))]
    procs += [
        ctx.Process(target=acceptor, args=(ours[i], batch[i * each : (i + 1) * each], size, cpu_in))
        for i in range(acceptors)
    ]
    wall = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - wall  # (includes starting the processes: a floor)
    cpus: dict[str, float] = {}
    for _ in procs:
        name, cpu = cpu_out.recv()
        cpus[name] = cpus.get(name, 0.0) + cpu
    total = each * acceptors
    return {
        "msgs_per_s": total / wall,
        "cpu_us": sum(cpus.values()) / total * 1e6,
        "writer_cpu_us": cpus["writer"] / total * 1e6,
        "acceptors_cpu_us": cpus["acceptor"] / total * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=16, help="records per hand-off to the writer")
    parser.add_argument("--acceptors", default="1,2")
    a = parser.parse_args()
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    print("inline", run_inline(a.messages))
    for k in map(int, a.acceptors.split(",")):
        print(f"split, {k} acceptor(s), batch {a.batch}", run_split(a.messages, k, a.batch))


if __name__ == "__main__":
    main()
