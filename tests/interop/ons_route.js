'use strict';
// Resolve a topic's publish route with the Node client ali-ons (npm), against NAMESRV.
// Usage: node ons_route.js NAMESRV TOPIC  -> prints {"queues":[{brokerName,queueId}...],"brokerAddr":...}
// Bounded by the harness' deadline (watchdog.js): past it, the script says what it was waiting for.
const watchdog = require('./watchdog');
const { Producer } = require('ali-ons');
const urllib = require('urllib');

async function main(nameSrv, topic) {
  const producer = new Producer({
    nameSrv, producerGroup: 'MQCTL_INTEROP_ONS', httpclient: urllib, logger: watchdog.logger,
  });
  producer.on('error', err => process.stderr.write(`ali-ons error event: ${err.message}\n`));
  watchdog.step('producer.ready');
  await producer.ready();
  watchdog.step('the route');
  const info = await producer.tryToFindTopicPublishInfo(topic);
  const queues = (info ? info.messageQueueList : []).map(q => ({ brokerName: q.brokerName, queueId: q.queueId }));
  const brokerAddr = queues.length ? producer._mqClient.findBrokerAddressInPublish(queues[0].brokerName) : null;
  // close() unregisters from the (absent) broker: its failure says nothing about the route.
  watchdog.step('producer.close');
  await producer.close().catch(err => process.stderr.write(`close: ${err.message}\n`));
  return { queues, brokerAddr };
}

watchdog.run(main(process.argv[2], process.argv[3]));
