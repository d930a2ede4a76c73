'use strict';
// ali-ons (npm) against our NameServer + broker. One mode per run, one JSON line on stdout:
//   node ons_broker_roundtrip.js produce NAMESRV TOPIC COUNT
//     -> {"sent":[{"key","msgId","queueId","queueOffset","status"}...]}
//   node ons_broker_roundtrip.js consume NAMESRV TOPIC GROUP COUNT FAIL_ONCE LINGER_MS TIMEOUT_MS
//     -> {"received":[{"key","keys","tags","len","sha1","reconsumeTimes"}...],"failures":N}
// Message i has tags Tag<i%3>, keys "key-i alt-i" and a deterministic body of 10 B .. 6 KiB
// (ali-ons deflates bodies >= 4 KiB). With FAIL_ONCE=1 the handler throws on the first delivery of
// each message, so every message must come back through %RETRY%<group>. The consumer keeps running
// LINGER_MS after the last expected message so its offsets get committed (every 5 s) before close().
// Bounded by the harness' deadline (watchdog.js): past it, the script says what it was waiting for.
const watchdog = require('./watchdog');
const crypto = require('crypto');
const { Producer, Consumer, Message } = require('ali-ons');
const urllib = require('urllib');

// ACL: ONS_ACCESS_KEY / ONS_SECRET_KEY in the environment make ali-ons sign every request.
const credentials = process.env.ONS_ACCESS_KEY
  ? { accessKeyId: process.env.ONS_ACCESS_KEY, accessKeySecret: process.env.ONS_SECRET_KEY }
  : {};
const logger = watchdog.logger;

function body(i, count) {
  const len = 10 + Math.floor((i * (6144 - 10)) / Math.max(1, count - 1));
  const buf = Buffer.alloc(len);
  for (let j = 0; j < len; j++) buf[j] = (i * 31 + j) % 251;
  return buf;
}

async function produce(nameSrv, topic, count) {
  const producer = new Producer({ nameSrv, producerGroup: 'MQCTL_ONS_PRODUCER', httpclient: urllib, logger, ...credentials });
  producer.on('error', err => process.stderr.write(`producer error: ${err.message}\n`));
  const sent = [];
  watchdog.watch('producer', () => ({ sent: sent.length, brokers: producer._mqClient._brokerAddrTable }));
  watchdog.step('producer.ready');
  await producer.ready();
  for (let i = 0; i < count; i++) {
    watchdog.step(`producer.send of message ${i}`);
    const msg = new Message(topic, `Tag${i % 3}`, body(i, count));
    msg.keys = [`key-${i}`, `alt-${i}`];
    const r = await producer.send(msg);
    sent.push({ key: `key-${i}`, msgId: r.msgId, queueId: r.messageQueue.queueId, queueOffset: r.queueOffset, status: r.sendStatus });
  }
  watchdog.step('producer.close');
  await producer.close();
  return { sent };
}

async function consume(nameSrv, topic, group, count, failOnce, lingerMs, timeoutMs) {
  const consumer = new Consumer({ nameSrv, consumerGroup: group, httpclient: urllib, logger, ...credentials });
  consumer.on('error', err => process.stderr.write(`consumer error: ${err.message}\n`));
  const received = [];
  const failed = new Set();
  let failures = 0;
  let done;
  const allIn = new Promise(resolve => { done = resolve; });
  consumer.subscribe(topic, '*', async msg => {
    const key = msg.keys.split(' ')[0];
    if (failOnce && !failed.has(key)) {
      failed.add(key);
      failures++;
      throw new Error(`failing ${key} once on purpose`);
    }
    received.push({
      key, keys: msg.keys, tags: msg.tags, len: msg.body.length, reconsumeTimes: msg.reconsumeTimes,
      sha1: crypto.createHash('sha1').update(msg.body).digest('hex'),
    });
    if (received.length >= count) done();
  });
  watchdog.watch('consumer', () => ({
    received: received.length,
    failures,
    brokers: consumer._mqClient._brokerAddrTable,
    queues: Array.from(consumer._processQueueTable.values(), q => ({
      queue: q.messageQueue.key, nextOffset: q.nextOffset, held: q.processQueue.msgCount,
    })),
    offsets: consumer._offsetStore.offsetTable,
  }));
  watchdog.step('consumer.ready');
  await consumer.ready();
  if (count > 0) {
    watchdog.step(`waiting up to ${timeoutMs} ms for ${count} messages`);
    await Promise.race([allIn, new Promise(resolve => setTimeout(resolve, timeoutMs))]);
  }
  watchdog.step(`lingering ${lingerMs} ms`);
  await new Promise(resolve => setTimeout(resolve, lingerMs));
  watchdog.step('consumer.close');
  await consumer.close();
  return { received, failures };
}

async function main(argv) {
  const [mode, nameSrv, topic] = argv;
  if (mode === 'produce') return produce(nameSrv, topic, Number(argv[3]));
  if (mode === 'consume') {
    return consume(nameSrv, topic, argv[3], Number(argv[4]), argv[5] === '1', Number(argv[6]), Number(argv[7]));
  }
  throw new Error(`unknown mode ${mode}`);
}

watchdog.run(main(process.argv.slice(2)));
