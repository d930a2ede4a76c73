'use strict';
// Resolve a topic's publish route with the Node client ali-ons (npm), against NAMESRV.
// Usage: node ons_route.js NAMESRV TOPIC  -> prints {"queues":[{brokerName,queueId}...],"brokerAddr":...}
const { Producer } = require('ali-ons');
const urllib = require('urllib');

async function main(nameSrv, topic) {
  const producer = new Producer({ nameSrv, producerGroup: 'MQCTL_INTEROP_ONS', httpclient: urllib });
  producer.on('error', err => process.stderr.write(`ali-ons error event: ${err.message}\n`));
  await producer.ready();
  const info = await producer.tryToFindTopicPublishInfo(topic);
  const queues = (info ? info.messageQueueList : []).map(q => ({ brokerName: q.brokerName, queueId: q.queueId }));
  const brokerAddr = queues.length ? producer._mqClient.findBrokerAddressInPublish(queues[0].brokerName) : null;
  process.stdout.write(JSON.stringify({ queues, brokerAddr }) + '\n');
  // close() unregisters from the (absent) broker: its failure says nothing about the route.
  await producer.close().catch(err => process.stderr.write(`close: ${err.message}\n`));
}

main(process.argv[2], process.argv[3]).then(
  () => process.exit(0),
  err => { process.stderr.write(`${err.stack}\n`); process.exit(1); }
);
