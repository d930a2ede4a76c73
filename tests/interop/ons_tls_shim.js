'use strict';
// Preload (node -r ./ons_tls_shim.js SCRIPT ...): every TCP connection ali-ons opens goes over TLS,
// through Node's own TLS stack. ali-ons has no TLS option; its transport (tcp-base) calls net.connect,
// which this replaces with tls.connect. MQCTL_TLS_CA names the PEM CA the servers' certificates must
// chain to (checked, with the address, as any TLS client does).
const fs = require('fs');
const net = require('net');
const tls = require('tls');

const ca = fs.readFileSync(process.env.MQCTL_TLS_CA);
const connect = options => tls.connect({ ...options, ca, rejectUnauthorized: true });
net.connect = connect;
net.createConnection = connect;
