'use strict';
// The official Node 5.x client (npm rocketmq-client-nodejs) against a broker's gRPC front: a Producer sends
// COUNT messages (every third with a message group), then a SimpleConsumer receives and acks them all.
// Usage: node grpc5_node_roundtrip.js ENDPOINT TOPIC GROUP COUNT
//   -> prints {"sent":[ids],"received":[{id,body,attempt}],"acked":N} on its last line
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const quiet = { info() {}, warn() {}, debug() {}, error: (...a) => process.stderr.write(a.join(' ') + '\n') };

async function main(endpoints, topic, group, count) {
  const producer = new Producer({ endpoints, namespace: '', topics: [topic], logger: quiet });
  await producer.startup();
  const sent = [];
  for (let i = 0; i < count; i++) {
    const message = { topic, tag: 'node', keys: [`node-${i}`], body: Buffer.from(`node-${i}`) };
    if (i % 3 === 0) message.messageGroup = `g${i % 2}`;
    sent.push((await producer.send(message)).messageId);
  }
  await producer.shutdown();
  const consumer = new SimpleConsumer({
    endpoints, namespace: '', consumerGroup: group, subscriptions: new Map().set(topic, '*'),
    awaitDuration: 3000, logger: quiet,
  });
  await consumer.startup();
  const received = [];
  let acked = 0;
  const deadline = Date.now() + 60000;
  while (received.length < count && Date.now() < deadline) {
    for (const m of await consumer.receive(16, 30000)) {
      received.push({ id: m.messageId, body: m.body.toString(), attempt: m.deliveryAttempt });
      await consumer.ack(m);
      acked++;
    }
  }
  await consumer.shutdown();
  process.stdout.write(JSON.stringify({ sent, received, acked }) + '\n');
}

main(process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5])).then(
  () => process.exit(0),
  err => { process.stderr.write(`${err.stack}\n`); process.exit(1); }
);
