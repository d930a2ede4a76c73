'use strict';
// The overall deadline of an interop client script, and what the script was waiting for when it passed.
//
//   const watchdog = require('./watchdog');
//   watchdog.step('consumer.ready');              // what the script is doing now
//   watchdog.watch('consumer', () => ({...}));     // state to show if the deadline passes
//   new Consumer({ ..., logger: watchdog.logger }) // ali-ons' own log lines, kept (it drops info/debug)
//   watchdog.run(main(argv));                      // its JSON result on stdout, exit 0
//
// Every remoting request ali-ons sends (its code, the broker or NameServer address) and its answer is
// recorded, as are connections closed and requests the servers send to the client. When the deadline
// (MQCTL_INTEROP_DEADLINE_MS, from the test harness) passes, the event loop drains with the script's
// work unfinished (a promise nothing will ever settle), or the harness ends it (SIGTERM), the report goes
// to stderr: the current step and
// how long it has lasted, the requests still unanswered, the watched state, the last requests, answers and
// log lines. The script then exits with EXIT_DEADLINE, so the test fails at once and says why.
const util = require('util');

const EXIT_DEADLINE = 3;
const KEEP = 40; // the last events and log lines shown
const started = Date.now() - Math.round(process.uptime() * 1000); // the process' start, as the harness counts
const events = [];
const logLines = [];
const pending = new Map();
const watched = new Map();
let current = { name: 'start', at: started };
let finished = false;

function since(at) {
  return `${Date.now() - at} ms`;
}

function keep(list, line) {
  list.push(`+${Date.now() - started} ms ${line.length > 300 ? `${line.slice(0, 300)}...` : line}`);
  if (list.length > KEEP) list.shift();
}

function step(name) {
  current = { name, at: Date.now() };
  keep(events, `step: ${name}`);
}

function watch(name, state) {
  watched.set(name, state);
}

function logWith(level, toStderr) {
  return (...args) => {
    const line = util.format(...args);
    keep(logLines, `${level} ${line}`);
    if (toStderr) process.stderr.write(`${level}: ${line}\n`);
  };
}

// ali-ons' logger interface: warnings and errors still reach stderr as with its default logger.
const logger = {
  debug: logWith('debug', false),
  info: logWith('info', false),
  warn: logWith('warn', true),
  error: logWith('error', true),
};

function describe(value) {
  try {
    return JSON.stringify(value, (key, v) => (v instanceof Map ? Object.fromEntries(v) : v));
  } catch (err) {
    return `(unprintable: ${err.message})`;
  }
}

// The headline last: a harness shows the end of stderr.
function report(why) {
  const lines = ['last client log lines:', ...logLines.map(l => `  ${l}`)];
  lines.push('last requests, answers and steps:', ...events.map(e => `  ${e}`));
  for (const [name, state] of watched) {
    let value;
    try {
      value = describe(state());
    } catch (err) {
      value = `(failed: ${err.message})`;
    }
    lines.push(`${name}: ${value}`);
  }
  lines.push(`unanswered requests (${pending.size}):`);
  for (const entry of pending.values()) {
    lines.push(`  code ${entry.code} to ${entry.addr} (opaque ${entry.opaque}) for ${since(entry.at)}, timeout ${entry.timeout} ms`);
  }
  lines.push(`interop watchdog: ${why} after ${since(started)}; step "${current.name}" for ${since(current.at)}`);
  process.stderr.write(lines.join('\n') + '\n');
}

function expire(why) {
  if (finished) return;
  finished = true;
  report(why);
  process.exit(EXIT_DEADLINE);
}

// ali-ons' channel (one per address): record each request and what became of it.
function instrumentAliOns() {
  let Channel;
  try {
    Channel = require('ali-ons/lib/channel');
  } catch (err) {
    return; // a script of another client
  }
  const invoke = Channel.prototype.invoke;
  Channel.prototype.invoke = function(command, timeout) {
    const entry = { addr: this.address, code: command.code, opaque: command.opaque, at: Date.now(), timeout };
    pending.set(entry, entry);
    keep(events, `-> code ${entry.code} to ${entry.addr} (opaque ${entry.opaque})`);
    return invoke.call(this, command, timeout).then(
      response => {
        pending.delete(entry);
        const remark = response && response.remark ? ` "${String(response.remark).slice(0, 120)}"` : '';
        keep(events, `<- code ${response && response.code}${remark} for code ${entry.code} from ${entry.addr} in ${since(entry.at)}`);
        return response;
      },
      err => {
        pending.delete(entry);
        keep(events, `x  code ${entry.code} to ${entry.addr} after ${since(entry.at)}: ${err.name}: ${err.message}`);
        throw err;
      }
    );
  };
  const invokeOneway = Channel.prototype.invokeOneway;
  Channel.prototype.invokeOneway = function(command) {
    keep(events, `-> code ${command.code} to ${this.address} (oneway)`);
    return invokeOneway.call(this, command);
  };
  const decode = Channel.prototype.decode;
  Channel.prototype.decode = function(body, header) {
    const packet = decode.call(this, body, header);
    if (!packet.isResponse) keep(events, `<= server request code ${packet.data.code} from ${this.address}`);
    return packet;
  };
  const handleClose = Channel.prototype._handleClose;
  Channel.prototype._handleClose = function() {
    if (this._socket) {
      const why = this._lastError ? `: ${this._lastError.message}` : '';
      keep(events, `connection to ${this.address} closed${why}`);
    }
    return handleClose.call(this);
  };
}

// Runs the script's main promise: its result as one JSON line on stdout (exit 0), its error on stderr
// (exit 1), or the report (exit EXIT_DEADLINE) if neither comes in time.
function run(main) {
  const deadline = Number(process.env.MQCTL_INTEROP_DEADLINE_MS || 0);
  if (deadline > 0) {
    setTimeout(() => expire(`deadline of ${deadline} ms passed`), Math.max(0, started + deadline - Date.now())).unref();
  }
  // Nothing left to wait for but the script is not done: no timer or socket will ever settle it.
  process.on('beforeExit', () => expire('the event loop drained with the script unfinished'));
  // The harness ends a script that outstayed it (tests/support/bounded.py's end_reporting): say why first.
  process.on('SIGTERM', () => expire('ended by the harness (SIGTERM)'));
  main.then(
    result => {
      finished = true;
      process.stdout.write(JSON.stringify(result) + '\n');
      process.exit(0);
    },
    err => {
      finished = true;
      process.stderr.write(`${err && err.stack ? err.stack : err}\n`);
      report('the script failed');
      process.exit(1);
    }
  );
}

instrumentAliOns();

module.exports = { step, watch, logger, run, EXIT_DEADLINE };
