#!/usr/bin/env bash
# make-corpus.sh: the seed corpus of the libFuzzer targets (test/fuzz/corpus/
# <target>/) and the public artefacts the targets pin (test/fuzz/keys/), made
# from real artefacts: a throwaway cluster with the real extension answers a
# real JoinRequest of `build/bcd join-request` (issued, then refused), swtpm
# makes the TPM structures (test/unit/tpm-fixture.sh), and seed-tool seals
# tokens and states to the targets' fixed keys (derived from a fixed seed;
# no private key is written into the repo).  Run once, as root, with
# PG_CONFIG/PATH naming the PostgreSQL that has bc_join installed; commit
# its output.  Kept cases (crashes found by test/fuzz-long) are files named
# crash-* in the corpus directories: this script keeps them.
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$(pwd)
F=test/fuzz
K=$F/keys
C=$F/corpus

make -s host fuzz build/fuzz/seed-tool >/dev/null

T=$(mktemp -d /tmp/bcj-corpus.XXXXXX)
chmod 0755 "$T"
cleanup() {
  tools/pg-throwaway stop "$T/pg" >/dev/null 2>&1 || true
  test/unit/tpm-fixture.sh stop "$T/tpm" >/dev/null 2>&1 || true
  rm -rf "$T"
}
trap cleanup EXIT

# Fresh seeds, kept cases kept.
for d in "$C"/*/; do
  [ -d "$d" ] && find "$d" -maxdepth 1 -type f ! -name 'crash-*' ! -name 'leak-*' ! -name 'timeout-*' -delete
done
rm -rf "$K"
mkdir -p "$K"
for t in b64 jws jwe csr state tpm_public tpm_attest tpm_signature tpm_ek_cert gw_addr gw_http sock_line verify discovery_req producer_output ocsp_request; do
  mkdir -p "$C/fuzz_$t"
done
seed() { printf '%s' "$2" >"$C/$1/$3"; }

# ---- a real join: service keys, a CSR, a sealed token, the answers
tools/bc-join-keygen "$T/keys" >/dev/null
port=$(tools/pg-throwaway free-port 1)
export $(tools/pg-throwaway start "$T/pg" "$port" "$T/keys" fuzz.bc-join.local)
export PGDATABASE=bcj_fuzz
psql -qAtX -d postgres -c "CREATE DATABASE bcj_fuzz" >/dev/null
sql() { psql -qAtX -v ON_ERROR_STOP=1 "$@"; }
sql -c "CREATE EXTENSION bc_join"
sql -c "SELECT bc_join.service_keys()" >"$K/service-keys.json"
tenant=$(sql -c "SELECT bc_join.create_tenant('fuzz')")
site=$(sql -c "SELECT bc_join.create_site('$tenant', 'dc')")
pool=$(sql -c "SELECT bc_join.create_pool('$tenant', '$site', 'p')")
token=$(sql -c "SELECT bc_join.create_join_token('$tenant', '$pool')")
build/bcd join-request --service-keys "$K/service-keys.json" --token "$token" \
  --out-dir "$T/node" --hostname fuzz-host >"$T/req.json"
cp "$T/node/node.csr.der" "$K/node.csr.der"
echo "SELECT bc_join(:'req')" | sql -v req="$(cat "$T/req.json")" >"$C/fuzz_verify/issued.json"
# another host with the spent token: the one refusal
build/bcd join-request --service-keys "$K/service-keys.json" --token "$token" \
  --out-dir "$T/node2" >"$T/req2.json"
echo "SELECT bc_join(:'req')" | sql -v req="$(cat "$T/req2.json")" >"$C/fuzz_verify/refused.json"
grep -q '"issued"' "$C/fuzz_verify/issued.json"
grep -q '"refused"' "$C/fuzz_verify/refused.json"
cp "$T/req.json" "$F/join-request.json"   # for test/tap/sql_fuzz.t (no secret: the token is sealed)

python3 - "$T/req.json" "$C" "$T/csrsha" <<'PY'
import json, sys, base64, hashlib
req = json.load(open(sys.argv[1])); C = sys.argv[2]
issued = json.load(open(C + "/fuzz_verify/issued.json"))
jws = issued["response"]
def w(t, name, data):
    open("%s/%s/%s" % (C, t, name), "wb").write(data if isinstance(data, bytes) else data.encode())
w("fuzz_jws", "issued.jws", jws)
w("fuzz_verify", "issued-bare.jws", jws)
w("fuzz_verify", "issued-status-only.json", json.dumps({"status": "issued", "response": jws[:-4] + "AAAA"}))
payload = json.loads(base64.urlsafe_b64decode(jws.split(".")[1] + "=="))
w("fuzz_b64", "csr", req["csr"])
w("fuzz_discovery_req", "valid", '{"csr":"%s","mac":"aa:bb:cc:dd:ee:ff"}' % req["csr"])
w("fuzz_discovery_req", "upper-mac", '{"csr":"%s","mac":"AA:bb:cc:dd:ee:ff"}' % req["csr"])
w("fuzz_discovery_req", "duplicate", '{"csr":"%s","mac":"aa:bb:cc:dd:ee:ff","csr":"x"}' % req["csr"])
w("fuzz_peer", "v2", "0::/user.slice/user-1000.slice/user@1000.service/app.slice/hook@1.service\n")
w("fuzz_peer", "hybrid", "12:pids:/user.slice\n1:name=systemd:/user.slice/x.scope\n0::/system.slice/bcd.service\n")
w("fuzz_peer", "root", "0::/\n")
api = "bc-join.dev/producer/v1"
w("fuzz_producer_output", "valid", json.dumps({"apiVersion": api, "attestation": req["csr"]}))
w("fuzz_producer_output", "with-claims", json.dumps({"apiVersion": api, "attestation": "aGVsbG8",
                                                     "claims": {"serial": "ASSET-0042", "macs": ["aa:bb:cc:dd:ee:ff"]}}))
w("fuzz_producer_output", "duplicate", '{"apiVersion":"%s","attestation":"aGVsbG8","attestation":"AA"}' % api)
w("fuzz_producer_output", "unknown-member", '{"apiVersion":"%s","attestation":"aGVsbG8","token":"x"}' % api)
w("fuzz_producer_output", "old-api", '{"apiVersion":"bc-join.dev/producer/v0","attestation":"aGVsbG8"}')
w("fuzz_producer_output", "padded", '{"apiVersion":"%s","attestation":"aGVsbG8="}' % api)
w("fuzz_producer_output", "trailing-bits", '{"apiVersion":"%s","attestation":"aGVsbG9"}' % api)
w("fuzz_producer_output", "nul", '{"apiVersion":"%s","attestation":"aGVs\\u0000bG8"}' % api)
w("fuzz_producer_output", "array", '[{"apiVersion":"%s","attestation":"aGVsbG8"}]' % api)
w("fuzz_producer_output", "two-objects", '{"apiVersion":"%s","attestation":"aGVsbG8"}{}' % api)
w("fuzz_producer_output", "claims-array", '{"apiVersion":"%s","attestation":"aGVsbG8","claims":[]}' % api)
w("fuzz_producer_output", "empty", "")
w("fuzz_b64", "payload", jws.split(".")[1])
w("fuzz_b64", "signature", jws.split(".")[2])
w("fuzz_b64", "cert-std", payload["certificateChain"][0])
w("fuzz_b64", "empty", "")
w("fuzz_b64", "two", "AA")
w("fuzz_b64", "three", "AAA")
w("fuzz_jwe", "real-sealed-token", req["sealedToken"])
w("fuzz_csr", "node.csr.der", base64.urlsafe_b64decode(req["csr"] + "=" * (-len(req["csr"]) % 4)))
open(sys.argv[3], "w").write(
    base64.urlsafe_b64encode(hashlib.sha256(base64.urlsafe_b64decode(req["csr"] + "==")).digest()).decode().rstrip("="))
PY
csrsha=$(cat "$T/csrsha")
build/fuzz/seed-tool jwe "$csrsha" "jt_fuzzseedtoken.secret" >"$C/fuzz_jwe/sealed-token"
build/fuzz/seed-tool jwe "$csrsha" "pt_provisioning" >"$C/fuzz_jwe/sealed-provisioning"
build/fuzz/seed-tool jwe "" "" >"$C/fuzz_jwe/sealed-empty"
{ printf '\0'; build/fuzz/seed-tool state '{"nonce":"AAECAw","ak":"x"}'; } >"$C/fuzz_state/state32"
{ printf '\1'; build/fuzz/seed-tool state-p256 '{"nonce":"AAECAw","ak":"x"}'; } >"$C/fuzz_state/state-p256"

# ---- CSRs the openssl CLI makes: P-256 (with a SAN), P-384 and RSA (refused)
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$T/k1" -subj /CN=fuzz \
  -addext subjectAltName=URI:spiffe://x/y -outform DER -out "$C/fuzz_csr/p256-san.der" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -keyout "$T/k2" -subj /CN=fuzz \
  -outform DER -out "$C/fuzz_csr/p384.der" 2>/dev/null
openssl req -new -newkey rsa:1024 -nodes -keyout "$T/k3" -subj /CN=fuzz \
  -outform DER -out "$C/fuzz_csr/rsa.der" 2>/dev/null

# ---- TPM structures from swtpm
if test/unit/tpm-fixture.sh setup "$T/tpm" >/dev/null 2>"$T/tpm.err"; then
  cp "$T/tpm/node.pub" "$K/tpm-node.pub"
  cp "$T/tpm/ak.pub" "$K/tpm-ak.pub"
  cp "$T/tpm/certify.attest" "$K/tpm-certify.attest"
  cp "$T/tpm/ekr.pub" "$K/tpm-ekr.pub"
  cp "$T/tpm/root.pem" "$K/tpm-root.pem"
  cp "$T/tpm/issuer.pem" "$K/tpm-issuer.pem"
  for f in "$T"/tpm/*.pub; do cp "$f" "$C/fuzz_tpm_public/"; done
  for f in "$T"/tpm/*.attest; do cp "$f" "$C/fuzz_tpm_attest/"; done
  for f in "$T"/tpm/*.sig; do cp "$f" "$C/fuzz_tpm_signature/"; done
  for f in "$T"/tpm/*.crt; do cp "$f" "$C/fuzz_tpm_ek_cert/"; done
  test/unit/tpm-fixture.sh stop "$T/tpm" >/dev/null 2>&1 || true
else
  echo "make-corpus: the swtpm fixture failed:" >&2; cat "$T/tpm.err" >&2; exit 1
fi

# ---- the gateway: peers and X-Forwarded-For, SQLSTATEs and messages
seed fuzz_gw_addr $'203.0.113.7' untrusted-peer
seed fuzz_gw_addr $'10.1.2.3:4711\n198.51.100.9, 10.0.0.5' via-proxy
seed fuzz_gw_addr $'[::1]:443\n2001:db8::1, ::ffff:10.0.0.1\n!ignored\n192.0.2.1' v6-proxy
seed fuzz_gw_addr $'127.0.0.1\nnot-an-address, 10.0.0.1' bad-hop
seed fuzz_gw_addr $'192.168.1.0/25' cidr
seed fuzz_gw_http $'\00522023invalid request: csr is not base64url' s22023
seed fuzz_gw_http $'\00522P02invalid input syntax for type json' s22P02
seed fuzz_gw_http $'\00554001stack depth limit exceeded' s54001
seed fuzz_gw_http $'\0050A000unsupported attestor' s0A000
seed fuzz_gw_http $'\00557P01terminating connection' s57P01
seed fuzz_gw_http $'\00508006connection failure' s08006
seed fuzz_gw_http $'\005XX000internal' sXX000
seed fuzz_gw_http $'\003220short' short

# ---- bcd's socket: request lines
seed fuzz_sock_line '{"op":"credential","session":"web","context":"a.b:c-d_e","dir":"/tmp/x"}'$'\n' credential
seed fuzz_sock_line '{"op":"credential","session":"web","dir":"/tmp/x"}' credential-eof
seed fuzz_sock_line '{"op":"status"}'$'\n' status
seed fuzz_sock_line '{"op":"metrics"}'$'\n' metrics
seed fuzz_sock_line '{"op":"credential","session":"w","dir":"/d","extra":1}'$'\n' unknown-member
seed fuzz_sock_line '{"op":"credential","session":"w","session":"x","dir":"/d"}'$'\n' duplicate
seed fuzz_sock_line '{"op":"nope"}'$'\n{"op":"status"}\n' unknown-op
seed fuzz_sock_line '[1,2,3]'$'\n' not-object

# ---- OCSP requests the openssl CLI makes (RFC 6960): a throwaway CA, leaves
O=$C/fuzz_ocsp_request
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$T/ca.key" -subj /CN=ocsp-ca \
  -days 1 -out "$T/ca.pem" 2>/dev/null
for i in $(seq 1 17); do
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$T/l$i.key" -subj "/CN=l$i" \
    -out "$T/l$i.csr" 2>/dev/null
  openssl x509 -req -in "$T/l$i.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -set_serial "$((i * 7919))" \
    -days 1 -out "$T/l$i.pem" 2>/dev/null
done
ocspreq() { out=$1; shift; openssl ocsp -issuer "$T/ca.pem" "$@" -reqout "$O/$out" >/dev/null 2>&1; }
ocspreq sha1-nonce -cert "$T/l1.pem"
ocspreq sha1-no-nonce -cert "$T/l1.pem" -no_nonce
ocspreq sha256-nonce -sha256 -cert "$T/l2.pem"
ocspreq sha384 -sha384 -cert "$T/l2.pem" -no_nonce
ocspreq two -cert "$T/l1.pem" -cert "$T/l2.pem"
ocspreq serial -serial 0x1234 -no_nonce
ocspreq signed -cert "$T/l1.pem" -signer "$T/l3.pem" -signkey "$T/l3.key"
ocspreq sixteen $(for i in $(seq 1 16); do printf -- '-cert %s ' "$T/l$i.pem"; done)
ocspreq seventeen $(for i in $(seq 1 17); do printf -- '-cert %s ' "$T/l$i.pem"; done)
printf '\x30\x04\x30\x02\x30\x00' >"$O/empty-list"
printf 'not an OCSP request' >"$O/garbage"

# ---- the event log and the IMA list: written by test/tools/tcglog.py
mkdir -p "$C/fuzz_eventlog"
for s in $(python3 test/tools/tcglog.py names); do
  python3 test/tools/tcglog.py log "$s" "$C/fuzz_eventlog/$s.log"
done
python3 test/tools/tcglog.py ima ima "$C/fuzz_eventlog/ima.bin"
cp test/data/eventlog/crypto_agile_eventlog test/data/eventlog/sb_cert_eventlog "$C/fuzz_eventlog/"

du -sh "$C" "$K"
echo "make-corpus: done; commit test/fuzz/corpus, test/fuzz/keys and test/fuzz/join-request.json"
