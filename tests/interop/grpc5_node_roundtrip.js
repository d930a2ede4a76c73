'use strict';
// The official Node 5.x client (npm rocketmq-client-nodejs) against a broker's gRPC front: a Producer sends
// COUNT messages (every third with a message group), then a SimpleConsumer receives and acks them all.
// Usage: node grpc5_node_roundtrip.js ENDPOINT TOPIC GROUP COUNT
//   -> prints {"sent":[ids],"received":[{id,body,attempt}],"acked":N} on its last line
// Bounded by the harness' deadline (watchdog.js): past it, the script says which step it was waiting in.
const watchdog = require('./watchdog');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const quiet = { info() {}, warn() {}, debug() {}, error: (...a) => process.stderr.write(a.join(' ') + '\n') };

async function main(endpoints, topic, group, count) {
  const producer = new Producer({ endpoints, namespace: '', topics: [topic], logger: quiet });
  watchdog.step('producer.startup');
  await producer.startup();
  const sent = [];
  const received = [];
  watchdog.watch('progress', () => ({ sent: sent.length, received: received.length }));
  for (let i = 0; i < count; i++) {
    watchdog.step(`producer.send of message ${i}`);
    const message = { topic, tag: 'node', keys: [`node-${i}`], body: Buffer.from(`node-${i}`) };
    if (i % 3 === 0) message.messageGroup = `g${i % 2}`;
    sent.push((await producer.send(message)).messageId);
  }
  watchdog.step('producer.shutdown');
  await producer.shutdown();
  const consumer = new SimpleConsumer({
    endpoints, namespace: '', consumerGroup: group, subscriptions: new Map().set(topic, '*'),
    awaitDuration: 3000, logger: quiet,
  });
  watchdog.step('consumer.startup');
  await consumer.startup();
  let acked = 0;
  const deadline = Date.now() + 60000;
  while (received.length < count && Date.now() < deadline) {
    watchdog.step(`consumer.receive (${received.length} of ${count} so far)`);
    for (const m of await consumer.receive(16, 30000)) {
      received.push({ id: m.messageId, body: m.body.toString(), attempt: m.deliveryAttempt });
      await consumer.ack(m);
      acked++;
    }
  }
  watchdog.step('consumer.shutdown');
  await consumer.shutdown();
  return { sent, received, acked };
}

watchdog.run(main(process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5])));
