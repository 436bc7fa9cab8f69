#!/usr/bin/env node
// sds_client.js: an Envoy stand-in for test/agent/workload_sds.t.  Speaks
// Envoy's SDS v3 to bcd's Workload API socket with @grpc/grpc-js (a gRPC of
// its own, not the C core bcd and python3-grpcio share), its messages those
// of Envoy's UPSTREAM protos (@grpc/grpc-js-xds's deps/envoy-api, loaded by
// @grpc/proto-loader; google/protobuf/*.proto from python3-grpc-tools), never
// bcd's src/agent/workload/sds.proto: a transcription error there shows here.
//
//   node sds_client.js SOCKET WKT_DIR
// reads one JSON command a line on stdin and writes one JSON answer a line:
//   {"op":"open","s":S,"req":{...}}          StreamSecrets S, its first request ({"bytes"}: its size)
//   {"op":"send","s":S,"req":{...}}          a later request on S
//   {"op":"recv","s":S,"ms":N}               the next answer of S (or how it ended)
//   {"op":"quiet","s":S,"ms":N}              {"n": answers that came in N ms}
//   {"op":"fetch","req":{...}}               FetchSecrets
//   {"op":"delta"}                           DeltaSecrets' status
//   {"op":"close","s":S}
// A request is a DiscoveryRequest as JSON (proto field names); only the
// fields given are sent, as Envoy's C++ protobuf sends no default values.
// An answer's resources are decoded (Any expanded by the protos: "@type"),
// bytes as text.
'use strict';
const path = require('path');
const readline = require('readline');
const NM = path.join(__dirname, '..', 'node', 'node_modules');
const grpc = require(path.join(NM, '@grpc', 'grpc-js'));
const loader = require(path.join(NM, '@grpc', 'proto-loader'));

const [sock, wkt] = process.argv.slice(2);
const deps = path.join(NM, '@grpc', 'grpc-js-xds', 'deps');
const def = loader.loadSync([
  'envoy/service/secret/v3/sds.proto',
  'envoy/extensions/transport_sockets/tls/v3/secret.proto',
  'envoy/extensions/transport_sockets/tls/v3/tls_spiffe_validator_config.proto',
], {
  keepCase: true, longs: String, enums: String, bytes: String, defaults: false,
  oneofs: true, json: true,
  includeDirs: [path.join(deps, 'envoy-api'), path.join(deps, 'xds'),
    path.join(deps, 'protoc-gen-validate'), path.join(deps, 'googleapis'), wkt],
});
const pkg = grpc.loadPackageDefinition(def);
const Sds = pkg.envoy.service.secret.v3.SecretDiscoveryService;
const client = new Sds('unix:' + sock, grpc.credentials.createInsecure(),
  {'grpc.max_receive_message_length': 4 << 20});

// Base64 "bytes" (proto-loader's bytes: String) as text, everywhere in o.
function texts(o) {
  if (Array.isArray(o)) return o.map(texts);
  if (o && typeof o === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(o)) {
      out[k] = (k === 'inline_bytes' && typeof v === 'string') ?
        Buffer.from(v, 'base64').toString('latin1') : texts(v);
    }
    return out;
  }
  return o;
}

function answer(r) {
  return {version_info: r.version_info || '', nonce: r.nonce || '', type_url: r.type_url || '',
    resources: texts(r.resources || [])};
}

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const streams = {};

function openStream(name, req) {
  const st = {q: [], waiters: [], end: null};
  st.call = client.StreamSecrets();
  const wake = () => {
    while (st.waiters.length && (st.q.length || st.end)) st.waiters.shift()();
  };
  st.call.on('data', (r) => { st.q.push(answer(r)); wake(); });
  st.call.on('error', (e) => { st.end = {end: grpc.status[e.code], code: e.code, details: e.details}; wake(); });
  st.call.on('end', () => { if (!st.end) st.end = {end: 'END'}; wake(); });
  st.call.on('status', (s) => { if (!st.end && s.code !== 0) st.end = {end: grpc.status[s.code], details: s.details}; });
  st.call.write(req);
  streams[name] = st;
}

function recv(st, ms) {
  return new Promise((resolve) => {
    const take = () => {
      clearTimeout(t);
      resolve(st.q.length ? st.q.shift() : st.end);
    };
    const t = setTimeout(() => {
      st.waiters = st.waiters.filter((f) => f !== take);
      resolve({timeout: true});
    }, ms);
    if (st.q.length || st.end) take(); else st.waiters.push(take);
  });
}

async function run(cmd) {
  const st = streams[cmd.s];
  switch (cmd.op) {
    case 'open':
      openStream(cmd.s, cmd.req);
      return {ok: true, bytes: Sds.service.StreamSecrets.requestSerialize(cmd.req).length};
    case 'send': st.call.write(cmd.req); return {ok: true};
    case 'recv': return recv(st, cmd.ms || 10000);
    case 'quiet': {
      await new Promise((r) => setTimeout(r, cmd.ms));
      const n = st.q.length;
      st.q = [];
      return {n, end: st.end};
    }
    case 'close': st.call.end(); st.call.cancel(); delete streams[cmd.s]; return {ok: true};
    case 'fetch':
      return new Promise((resolve) => client.FetchSecrets(cmd.req,
        {deadline: Date.now() + (cmd.ms || 10000)}, (e, r) => resolve(e ?
          {end: grpc.status[e.code], details: e.details} : answer(r))));
    case 'delta':
      return new Promise((resolve) => {
        const c = client.DeltaSecrets();
        c.on('data', () => {});
        c.on('error', (e) => resolve({end: grpc.status[e.code], details: e.details}));
        c.on('end', () => resolve({end: 'END'}));
        c.write({type_url: 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret'});
      });
    default: return {error: 'unknown op ' + cmd.op};
  }
}

// one command at a time, in order
const rl = readline.createInterface({input: process.stdin});
let chain = Promise.resolve();
rl.on('line', (line) => {
  chain = chain.then(async () => {
    try { out(await run(JSON.parse(line))); } catch (e) { out({error: String(e && e.stack || e)}); }
  });
});
rl.on('close', () => chain.then(() => { client.close(); process.exit(0); }));
