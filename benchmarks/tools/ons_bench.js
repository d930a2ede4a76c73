'use strict';
// ali-ons load for benchmarks/bench_ali_ons.py (which starts the broker and prints the figures).
//   node ons_bench.js produce NAMESRV TOPIC CONCURRENCY SECONDS
//     N async loops share one Producer, each awaiting `producer.send()` of a 1 KiB body in turn (like N
//     producer threads of RocketMQ's benchmark Producer); 1 s warm-up, then SECONDS timed; the result
//     carries the send round trips' p50/p99 in ms.
//   node ons_bench.js consume NAMESRV TOPIC GROUP COUNT
//     A push consumer (new group, from the first offset) receives COUNT messages; timed from the first
//     message to the last, as that is the drain rate (client start to first message is firstMs).
//   node ons_bench.js tail NAMESRV TOPIC GROUP QUEUES RATE COUNT WARM_UP
//     bench_broker_tail.py --client ons: benchmarks/tools/cpp_tail.py's protocol with this client (a
//     Producer and a push Consumer in this process; probes until every queue delivered one, "start", COUNT
//     sends at RATE on an absolute schedule, not awaited, each stamped with process.hrtime, which is
//     CLOCK_MONOTONIC on Linux as Python's time.monotonic_ns; one JSON line {sent, received, failures,
//     latenciesMs, sentNs}, the last two from index WARM_UP on; closes once stdin does).
// Prints "start" when the timed window opens (the caller samples the broker's CPU then), and one JSON
// line when it closes: {count, seconds, nodeCpu (share of one core over the window), ...}.
const path = require('path');
const modules = path.join(__dirname, '..', '..', 'tests', 'interop', 'node_modules');
const { Producer, Consumer, Message } = require(path.join(modules, 'ali-ons'));
const urllib = require(path.join(modules, 'urllib'));

const BODY = Buffer.alloc(1024, 'x');

function window() {
  process.stdout.write('start\n');
  const wall = process.hrtime.bigint();
  const cpu = process.cpuUsage();
  return () => {
    const seconds = Number(process.hrtime.bigint() - wall) / 1e9;
    const used = process.cpuUsage(cpu);
    return { seconds, nodeCpu: (used.user + used.system) / 1e6 / seconds };
  };
}

function percentiles(rts) {
  rts.sort((x, y) => x - y);
  const at = q => (rts.length ? rts[Math.min(rts.length - 1, Math.floor(q * rts.length))] : 0);
  return { p50Ms: at(0.5), p99Ms: at(0.99) };
}

async function produce(nameSrv, topic, concurrency, seconds) {
  const producer = new Producer({ nameSrv, producerGroup: 'MQCTL_ONS_BENCH', httpclient: urllib });
  producer.on('error', err => process.stderr.write(`producer error: ${err.message}\n`));
  await producer.ready();
  let failures = 0;
  const loop = async (deadline, counter) => {
    while (Date.now() < deadline) {
      const begun = process.hrtime.bigint();
      const r = await producer.send(new Message(topic, 'bench', BODY));
      counter.rts.push(Number(process.hrtime.bigint() - begun) / 1e6);
      if (r.sendStatus === 'SEND_OK') counter.sent++; else failures++;
    }
  };
  const run = async ms => {
    const counter = { sent: 0, rts: [] };
    const deadline = Date.now() + ms;
    await Promise.all(Array.from({ length: concurrency }, () => loop(deadline, counter)));
    return counter;
  };
  await run(1000);
  const close = window();
  const { sent: count, rts } = await run(seconds * 1000);
  const result = { count, failures, ...close(), ...percentiles(rts) };
  await producer.close();
  return result;
}

async function consume(nameSrv, topic, group, count) {
  const consumer = new Consumer({
    nameSrv, consumerGroup: group, httpclient: urllib, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
  });
  consumer.on('error', err => process.stderr.write(`consumer error: ${err.message}\n`));
  const begun = Date.now();
  let received = 0;
  let firstMs;
  let close;
  let done;
  const allIn = new Promise(resolve => { done = resolve; });
  consumer.subscribe(topic, '*', async () => {
    if (received++ === 0) {
      firstMs = Date.now() - begun;
      close = window();
    }
    if (received === count) done(close());
  });
  await consumer.ready();
  const result = await allIn;
  await consumer.close();
  return { count: received, firstMs, ...result };
}

const SENT = 'benchSent'; // "<index> <CLOCK_MONOTONIC ns at send start>", as bench_broker_latency's property
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function tail(nameSrv, topic, group, queues, rate, count, warmUp) {
  const producer = new Producer({ nameSrv, producerGroup: 'MQCTL_ONS_TAIL', httpclient: urllib });
  const consumer = new Consumer({ nameSrv, consumerGroup: group, httpclient: urllib });
  producer.on('error', err => process.stderr.write(`producer error: ${err.message}\n`));
  consumer.on('error', err => process.stderr.write(`consumer error: ${err.message}\n`));
  const probed = new Set();
  const latenciesMs = [];
  const sentNs = [];
  let received = 0;
  let failures = 0;
  let done;
  const allIn = new Promise(resolve => { done = resolve; });
  consumer.subscribe(topic, '*', async msg => {
    const now = process.hrtime.bigint();
    const [index, sent] = msg.properties[SENT].split(' ');
    if (Number(index) < 0) return void probed.add(msg.queueId);
    if (Number(index) >= warmUp) {
      latenciesMs.push(Number(now - BigInt(sent)) / 1e6);
      sentNs.push(Number(sent));
    }
    if (++received + failures === count) done();
  });
  await Promise.all([producer.ready(), consumer.ready()]);
  const send = index => {
    const msg = new Message(topic, 'tail', BODY);
    msg.properties[SENT] = `${index} ${process.hrtime.bigint()}`;
    return producer.send(msg);
  };
  const deadline = Date.now() + 60000;
  while (probed.size < queues) {
    if (Date.now() > deadline) throw new Error(`probes received from ${probed.size} of ${queues} queues`);
    await send(-1).catch(() => {});
    await sleep(20);
  }
  process.stdout.write('start\n');
  const t0 = process.hrtime.bigint() + 100000000n;
  for (let i = 0; i < count; i++) {
    const wait = Number(t0 + BigInt(Math.round((i * 1e9) / rate)) - process.hrtime.bigint()) / 1e6;
    if (wait > 0) await sleep(wait);
    const failed = err => {
      if (failures++ === 0) process.stderr.write(`send failed: ${err.message || err}\n`);
      if (received + failures === count) done();
    };
    send(i).then(r => { if (r.sendStatus !== 'SEND_OK') failed(r.sendStatus); }, failed);
  }
  await Promise.race([allIn, sleep(30000)]);
  const result = { sent: count, received, failures, latenciesMs, sentNs };
  // a pipe's write is asynchronous: all of it out before the clients close and main() exits
  await new Promise(resolve => process.stdout.write(JSON.stringify(result) + '\n', resolve));
  await new Promise(resolve => process.stdin.once('end', resolve).resume()); // the caller has read /proc
  await consumer.close(); // one at a time: they share one MQClient and its connections
  await producer.close();
  return null;
}

async function main([mode, nameSrv, topic, a, b, ...rest]) {
  if (mode === 'produce') return produce(nameSrv, topic, Number(a), Number(b));
  if (mode === 'consume') return consume(nameSrv, topic, a, Number(b));
  if (mode === 'tail') return tail(nameSrv, topic, a, Number(b), ...rest.map(Number));
  throw new Error(`unknown mode ${mode}`);
}

main(process.argv.slice(2)).then(
  result => { if (result !== null) process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0); },
  err => { process.stderr.write(`${err.stack}\n`); process.exit(1); }
);
