'use strict';
// ali-ons (npm) as a Jepsen client: sends distinct messages one at a time, with the producer's own
// retries (retryTimesWhenSendFailed), until stdin closes, and prints one JSON line per event:
//   {"type":"invoke","value":SHA1}                       before each send
//   {"type":"ok","value","queue","offset","msgId","broker"}  SEND_OK ("broker": the store host in msgId)
//   {"type":"info","value","error",...}                  any other status, or an error after its retries
//   {"type":"done","sent":N}                             last, once it stopped and closed its producer
//   node ons_history.js NAMESRV TOPIC PROCESS [ROUTE_POLL_MS]
// ROUTE_POLL_MS is the producer's pollNameServerInteval (30000 by default): how soon it sees a new master.
// Message SEQ of PROCESS has the body "PROCESS:SEQ:" eight times (what the Python producer sends).
// Bounded by the harness' deadline (watchdog.js): past it, or ended by the harness, the script says what
// it was waiting for.
const crypto = require('crypto');
const { Producer, Message } = require('ali-ons');
const urllib = require('urllib');
const watchdog = require('./watchdog');

const [nameSrv, topic, processName, routePoll] = process.argv.slice(2);
// ali-ons' background tasks (heartbeats, route polls) throw connection errors from timers when a broker
// dies under them: log them and go on sending, as an application keeping its producer would.
process.on('uncaughtException', err => process.stderr.write(`uncaught: ${err.message}\n`));
process.on('unhandledRejection', err => process.stderr.write(`unhandled: ${err && err.message}\n`));
let stopping = false;
process.stdin.on('end', () => { stopping = true; });
process.stdin.resume();

// ali-ons' msgId is the broker's offset msgId: the store host's IPv4 and port, then the CommitLog offset.
function storeHost(msgId) {
  if (!msgId || msgId.length !== 32) return undefined;
  const b = Buffer.from(msgId, 'hex');
  return `${b[0]}.${b[1]}.${b[2]}.${b[3]}:${b.readUInt32BE(4)}`;
}

function emit(event) {
  process.stdout.write(JSON.stringify(event) + '\n');
}

async function main() {
  const options = { nameSrv, producerGroup: 'JEPSEN_ONS_PG', httpclient: urllib, logger: watchdog.logger };
  if (routePoll) options.pollNameServerInteval = Number(routePoll);
  const producer = new Producer(options);
  producer.on('error', err => process.stderr.write(`producer error: ${err.message}\n`));
  let seq = 0;
  watchdog.watch('producer', () => ({ seq, stopping, brokers: producer._mqClient._brokerAddrTable }));
  watchdog.step('producer.ready');
  await producer.ready();
  emit({ type: 'ready', tries: 1 + producer.options.retryTimesWhenSendFailed });
  for (; !stopping; seq++) {
    const body = Buffer.from(`${processName}:${seq}:`.repeat(8));
    const value = crypto.createHash('sha1').update(body).digest('hex');
    watchdog.step(`producer.send of message ${seq}`);
    emit({ type: 'invoke', value });
    try {
      const r = await producer.send(new Message(topic, 'jepsen', body));
      const where = { value, queue: r.messageQueue.queueId, offset: r.queueOffset, msgId: r.msgId, broker: storeHost(r.msgId) };
      emit(r.sendStatus === 'SEND_OK' ? { type: 'ok', ...where } : { type: 'info', error: r.sendStatus, ...where });
    } catch (err) {
      emit({ type: 'info', value, error: err.message.split('\n')[0] });
      await new Promise(resolve => setTimeout(resolve, 200));
    }
  }
  watchdog.step('producer.close');
  try {
    await producer.close();
  } catch (err) {  // it unregisters from every broker it knew, the killed one too
    process.stderr.write(`close: ${err.message}\n`);
  }
  return { type: 'done', sent: seq };
}

watchdog.run(main());
