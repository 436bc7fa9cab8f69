#!/usr/bin/env bash
# tpm.t: the tpm attestor end to end against a real swtpm (EK certificates
# from swtpm_setup, every structure made by tpm2-tools 5.4, the CSR signed
# in the TPM through openssl's tpm2 provider, the challenge answered by
# tpm2_activatecredential and tpm2_quote): two-round joins admitted, every
# refusal, a re-join after a wipe, approval enrollment and its bounds
# (software-made EKs flooding one token), renewal with the
# tpm member.  Needs the environment test/run-all sets (PGHOST, PGPORT, BCJ_*).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/../lib/tap.sh"
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d bcj_tpm "$@"; }
py() { /usr/bin/python3 "$top/test/tools/tpm_request.py" "$@"; }

S="$BCJ_SCRATCH/tpm"
F="$S/fx"
rm -rf "$S"; mkdir -p "$S"
bash "$top/test/unit/tpm-fixture.sh" setup "$F" $$ >/dev/null \
  && bash "$top/test/tap/tpm-evidence.sh" "$F" \
  || { echo "1..0 # SKIP could not make a swtpm and its evidence"; exit 1; }
trap 'bash "$top/test/unit/tpm-fixture.sh" stop "$F"' EXIT
export TPM2TOOLS_TCTI="swtpm:host=127.0.0.1,port=$(cat "$F/port")"
export TPM2OPENSSL_TCTI="$TPM2TOOLS_TCTI"

psql -qAtX -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bcj_tpm" -c "CREATE DATABASE bcj_tpm" >/dev/null
sql -c "CREATE EXTENSION bc_join"
A=$(sql -c "SELECT bc_join.create_tenant('tpm-a')")
siteA=$(sql -c "SELECT bc_join.create_site('$A', 'dc')")
poolA=$(sql -c "SELECT bc_join.create_pool('$A', '$siteA', 'p')")
B=$(sql -c "SELECT bc_join.create_tenant('tpm-b')")
siteB=$(sql -c "SELECT bc_join.create_site('$B', 'dc')")
poolB=$(sql -c "SELECT bc_join.create_pool('$B', '$siteB', 'p')")
sql -c "SELECT bc_join.add_tpm_ek_root(pg_read_file('$F/root.pem')), bc_join.add_tpm_ek_root(pem => pg_read_file('$F/issuer.pem'))" >/dev/null
token() { sql -c "SELECT bc_join.create_join_token('$1', '$2', uses => ${3:-5}, allow_reclaim => ${4:-false})"; }
tokA=$(token "$A" "$poolA")
ekc_sha=$(sha256sum "$F/ekc.der" | cut -c1-64)

# Send a request (a file); print the outer status.
send() { sql -v req="$(cat "$1")" <<<"SELECT bc_join(:'req')" >"$1.resp"; jq_status "$1.resp"; }
jq_status() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$1"; }
payload() { /usr/bin/python3 -c 'import json,sys,base64; r=json.load(open(sys.argv[1]))["response"].split(".")[1]; print(json.loads(base64.urlsafe_b64decode(r+"="*(-len(r)%4)))[sys.argv[2]])' "$1" "$2"; }
last_refusal() { sql -c "SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1"; }

# Round-1 members of node N (1..4) under the RSA EK with its certificate.
r1() { local i="$1"; shift; echo "ekPub=$F/ekr.pub ekCert=$F/ekr.crt akPub=$F/ak.pub nodeKeyPub=$F/node$i.pub certifyInfo=$F/cert$i.attest certifySignature=$F/cert$i.sig"; }

# Answer a challenge response: activate under EK (rsa|ecc384|ecc256), quote over PCRS.
answer() {
  local resp="$1" ek="$2" csr="$3" pcrs="${4:-sha256:0,1,2,3,4,5,6,7}" out="$5"
  py challenge "$resp" "$out.cred" "$out.state"
  bash "$top/test/unit/tpm-fixture.sh" activate "$F" "$ek" "$out.cred" "$out.secret"
  tpm2_quote -c "$F/ak.ctx" -l "$pcrs" -q "$(py nonce "$out.secret" "$csr")" \
    -m "$out.quote" -s "$out.qsig" >/dev/null 2>&1
  tpm2_flushcontext -t >/dev/null 2>&1
}
r2() { local out="$1"; echo "state=@$(cat "$out.state") secret=$out.secret quote=$out.quote quoteSignature=$out.qsig"; }

# One refusal: the request built from ARGS is refused tpm:REASON.
refused() {
  local reason="$1" what="$2"; shift 2
  py join "$@" >"$S/x.req"
  local st; st=$(send "$S/x.req")
  ok "$st $(last_refusal)" "refused $reason" "$what"
}

echo "1..86"

# ------------------------------------------------------------ a full join
csr1="$F/node1.csr"
py join "$csr1" $(r1 1) --token "$tokA" --service-keys "$BCJ_SERVICE_KEYS" >"$S/j1.req"
ok "$(send "$S/j1.req")" challenge "round 1 (EK chained to the swtpm root, tenant from a sealed token) answers a challenge"
ok "$(sql -c "SELECT count(*) FROM bc_join.nodes") $(sql -c "SELECT count(*) FROM bc_join.attestation_uses")" "0 0" "round 1 wrote no row"
answer "$S/j1.req.resp" rsa "$csr1" sha256:0,1,2,3,4,5,6,7 "$S/j1"
ok "$(wc -c <"$S/j1.secret")" 32 "tpm2_activatecredential recovers the 32-byte secret"
py join "$csr1" $(r1 1) $(r2 "$S/j1") --token "$tokA" --service-keys "$BCJ_SERVICE_KEYS" >"$S/j1b.req"
ok "$(send "$S/j1b.req")" issued "round 2 (secret, quote) is issued"
node1=$(payload "$S/j1b.req.resp" nodeId)
serial1=$(payload "$S/j1b.req.resp" serial)
akhex=$(tail -c 32 "$F/ak.name" | od -An -tx1 | tr -d ' \n')
ok "$(sql -c "SELECT node_key_uri FROM bc_join.node_certs WHERE serial = '$serial1'")" "urn:bc:tpm-ak:sha256:$akhex" "the certificate carries the AK statement"
ok "$(sql -c "SELECT node_key || ' ' || tenant_id FROM bc_join.nodes WHERE id = '$node1'")" "tpm $A" "the node is TPM-keyed, in the token's tenant"
ok "$(sql -c "SELECT encode(subject, 'hex') FROM bc_join.node_bindings WHERE node_id = '$node1' AND attestor = 'tpm'")" \
   "$(sha256sum "$F/ekr.der" | cut -c1-64)" "bound to SHA-256 of the EK SPKI"
ok "$(sql -c "SELECT uses_left FROM bc_join.join_tokens WHERE id = split_part('$tokA', '.', 1)")" 4 "the token was spent once, in round 2"
printf '%s' "$(payload "$S/j1b.req.resp" certificateChain)" >/dev/null
ok "$(send "$S/j1b.req") $(payload "$S/j1b.req.resp" serial)" "issued $serial1" "round 2 replayed: the same certificate again, nothing spent twice"
ok "$(sql -c "SELECT uses_left FROM bc_join.join_tokens WHERE id = split_part('$tokA', '.', 1)")" 4 "the replay spent nothing"
# A repeat needs the evidence again: the same EK, AK, state, secret and token.
tokA2=$(token "$A" "$poolA")
log0=$(sql -c "SELECT count(*) FROM bc_join.audit_log")
ok "$(send "$S/j1b.req") $(payload "$S/j1b.req.resp" serial) $(sql -c "SELECT count(*) FROM bc_join.audit_log")" "issued $serial1 $log0" \
   "repeated again: answered, and the issuance log does not grow"
/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); del r["attestation"]; print(json.dumps(r))' "$S/j1b.req" >"$S/bare.req"
ok "$(send "$S/bare.req") $(last_refusal)" "refused join:key-reused" "the CSR and token without the TPM evidence: refused join:key-reused"
py join "$csr1" $(r1 1) $(r2 "$S/j1") --token "$tokA2" --service-keys "$BCJ_SERVICE_KEYS" >"$S/tok2.req"
ok "$(send "$S/tok2.req") $(last_refusal)" "refused join:key-reused" "the same evidence with another token of the tenant: refused join:key-reused"
py join "$csr1" $(r1 1 | sed "s|ekPub=[^ ]*|ekPub=$F/ekc.pub|; s|ekCert=[^ ]*|ekCert=$F/ekc.crt|") $(r2 "$S/j1") --token "$tokA" --service-keys "$BCJ_SERVICE_KEYS" >"$S/ek2.req"
ok "$(send "$S/ek2.req") $(last_refusal)" "refused join:key-reused" "the same CSR and AK under another trusted EK: refused join:key-reused"
ok "$(sql -c "SELECT uses_left FROM bc_join.join_tokens WHERE id = split_part('$tokA2', '.', 1)") $(sql -c "SELECT count(*) FROM bc_join.audit_log")" "5 $log0" \
   "nothing spent, nothing logged by the refused repeats"

# ----------------------------------------------------- round 1 refusals
csr3="$F/node3.csr"
tk=(--token "$tokA" --service-keys "$BCJ_SERVICE_KEYS")
tokR=$(token "$A" "$poolA" 10 true)
tkr=(--token "$tokR" --service-keys "$BCJ_SERVICE_KEYS")
m3() { echo "akPub=$F/ak.pub nodeKeyPub=$F/node3.pub certifyInfo=$F/cert3.attest certifySignature=$F/cert3.sig"; }
refused tpm:ek-unknown "an EK neither enrolled nor certified" "$csr3" ekPub="$F/ekp.pub" $(m3) "${tk[@]}"
refused tpm:ek-cert-mismatch "an EK certificate that is not ekPub's" "$csr3" ekPub="$F/ekc.pub" ekCert="$F/ekr.crt" $(m3) "${tk[@]}"
refused tpm:ek-cert-malformed "an EK certificate that is no certificate" "$csr3" ekPub="$F/ekr.pub" ekCert="$F/ekr.pub" $(m3) "${tk[@]}"
py join "$csr3" ekPub="$F/ekr.pub" ekCert="$F/ekr.crt" $(m3) "${tk[@]}" >"$S/nochain.req"
issuer_sha=$(openssl x509 -in "$F/issuer.pem" -outform DER | sha256sum | cut -c1-64)
ok "$(sql -v req="$(cat "$S/nochain.req")" <<SQL | tr '\n' ' '
BEGIN;
SELECT bc_join.remove_tpm_ek_root('$issuer_sha') \gset
SELECT bc_join(:'req')->>'status';
SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1;
ROLLBACK;
SQL
)" "refused tpm:ek-chain " "an EK certificate that chains to no root (intermediate removed)"
# The EK held to the TCG template: its key and certificate unchanged, one bit of
# objectAttributes (userWithAuth on the low-range RSA EK) or of authPolicy flipped.
/usr/bin/python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[9]^=0x40; open(sys.argv[2],"wb").write(b)' "$F/ekr.pub" "$S/ekr-uwa.pub"
/usr/bin/python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[20]^=0x01; open(sys.argv[2],"wb").write(b)' "$F/ekr.pub" "$S/ekr-pol.pub"
refused tpm:ek-attributes "the RSA EK with userWithAuth set (not template L-1), its certificate still matching" "$csr3" $(r1 3 | sed "s|ekPub=[^ ]*|ekPub=$S/ekr-uwa.pub|")
refused tpm:ek-policy "the RSA EK with one bit of its authPolicy flipped (not PolicyA)" "$csr3" $(r1 3 | sed "s|ekPub=[^ ]*|ekPub=$S/ekr-pol.pub|")
refused tpm:ak-attributes "an AK without restricted" "$csr3" $(r1 3 | sed "s|akPub=[^ ]*|akPub=$F/aknr.pub|")
refused tpm:ak-attributes "an AK with decrypt" "$csr3" $(r1 3 | sed "s|akPub=[^ ]*|akPub=$F/akdec.pub|")
refused tpm:ak-scheme "an AK signing with SHA-1" "$csr3" $(r1 3 | sed "s|akPub=[^ ]*|akPub=$F/aksha1.pub|")
refused tpm:ak-scheme "an RSAPSS AK" "$csr3" $(r1 3 | sed "s|akPub=[^ ]*|akPub=$F/akpss.pub|")
/usr/bin/python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[2:4]=b"\x00\x04"; open(sys.argv[2],"wb").write(b)' "$F/cert3.sig" "$S/sha1.sig"
refused tpm:signature-scheme "a certify signature claiming SHA-1" "$csr3" $(r1 3 | sed "s|certifySignature=[^ ]*|certifySignature=$S/sha1.sig|")
refused tpm:certify-name "a certification of another key" "$csr3" $(r1 3 | sed "s|certifyInfo=[^ ]*|certifyInfo=$F/cert4.attest|; s|certifySignature=[^ ]*|certifySignature=$F/cert4.sig|")
refused tpm:node-key-mismatch "a certified node key that is not the CSR's" "$csr3" $(r1 4)
refused tpm:node-key-attributes "a node key without fixedTPM" "$csr3" $(r1 3 | sed "s|nodeKeyPub=[^ ]*|nodeKeyPub=$F/nofix.pub|; s|certifyInfo=[^ ]*|certifyInfo=$F/nofix.attest|; s|certifySignature=[^ ]*|certifySignature=$F/nofix.sig|")
refused tpm:no-tenant "a chained EK without enrollment or token" "$csr3" $(r1 3)
tokB=$(token "$B" "$poolB")
refused tpm:bound-elsewhere "an EK bound to a node of tenant A, with a token of tenant B" "$csr3" $(r1 3) --token "$tokB" --service-keys "$BCJ_SERVICE_KEYS"
refused tpm:bound-elsewhere "an EK bound in tenant A, reclaimed through a token without allow_reclaim" "$csr3" $(r1 3) "${tk[@]}"
refused tpm:malformed "evidence that is not JSON" "$csr3" --raw 'not json'
refused tpm:malformed "a duplicate member" "$csr3" --raw "{\"ekPub\":\"AA\",\"ekPub\":\"AA\"}"
refused tpm:malformed "an unknown member" "$csr3" $(r1 3) extra="$F/ak.pub"
refused tpm:malformed "a member of the wrong type" "$csr3" --raw "{\"ekPub\":1,\"akPub\":\"AA\",\"nodeKeyPub\":\"AA\",\"certifyInfo\":\"AA\",\"certifySignature\":\"AA\"}"
head -c 1100 /dev/zero >"$S/big"
refused tpm:malformed "a member over its cap" "$csr3" $(r1 3 | sed "s|akPub=[^ ]*|akPub=$S/big|")
# A bit flipped in each structure is refused, whatever check catches it
# (through a token that allows the reclaim: unflipped, this gets a challenge).
py join "$csr3" $(r1 3) "${tkr[@]}" >"$S/flip.req"
ok "$(send "$S/flip.req")" challenge "unflipped, the same evidence gets a challenge (a reclaim the token allows)"
flips=""
for m in ekPub:100 ekPub:200 ekCert:200 ekCert:600 akPub:40 akPub:70 nodeKeyPub:40 nodeKeyPub:80 \
         certifyInfo:10 certifyInfo:60 certifyInfo:100 certifySignature:30 certifySignature:60; do
  py join "$csr3" $(r1 3) --flip "$m" "${tkr[@]}" >"$S/flip.req"
  flips+="$(send "$S/flip.req") "
done
ok "$flips" "$(printf 'refused %.0s' $(seq 13))" "a flipped bit anywhere in each round-1 structure is refused"
# (kept for check_evidence() below: the join's own reason for a flipped certify signature)
py join "$csr3" $(r1 3) --flip certifySignature:30 "${tkr[@]}" >"$S/chkflip.req"
joined=$(send "$S/chkflip.req") reason=$(last_refusal)

# ------------------------------------------------------- round 2 refusals
csr2="$F/node2.csr"
tk=("${tkr[@]}")
py join "$csr2" $(r1 2) "${tk[@]}" >"$S/j2.req"
send "$S/j2.req" >/dev/null
answer "$S/j2.req.resp" rsa "$csr2" sha256:0,1,2,3,4,5,6,7 "$S/j2"
state2=$(cat "$S/j2.state")
tampered=$(/usr/bin/python3 -c 'import sys; s=sys.argv[1]; i=len(s)//2; print(s[:i]+("A" if s[i]!="A" else "B")+s[i+1:])' "$state2")
refused tpm:state-mismatch "a tampered state" "$csr2" $(r1 2) state=@"$tampered" secret="$S/j2.secret" quote="$S/j2.quote" quoteSignature="$S/j2.qsig" "${tk[@]}"
refused tpm:state-mismatch "a state for another CSR" "$csr2" $(r1 2) state=@"$(cat "$S/j1.state")" secret="$S/j1.secret" quote="$S/j2.quote" quoteSignature="$S/j2.qsig" "${tk[@]}"
refused tpm:state-mismatch "a state for another AK" "$csr2" ekPub="$F/ekr.pub" ekCert="$F/ekr.crt" akPub="$F/akr.pub" nodeKeyPub="$F/node2.pub" \
  certifyInfo="$F/cert2-akr.attest" certifySignature="$F/cert2-akr.sig" $(r2 "$S/j2") "${tk[@]}"
head -c 32 /dev/urandom >"$S/wrong.secret"
refused tpm:secret-mismatch "a wrong secret" "$csr2" $(r1 2) state=@"$state2" secret="$S/wrong.secret" quote="$S/j2.quote" quoteSignature="$S/j2.qsig" "${tk[@]}"
refused tpm:quote-nonce "a quote with the wrong extraData" "$csr2" $(r1 2) state=@"$state2" secret="$S/j2.secret" quote="$F/quote8.attest" quoteSignature="$F/quote8.sig" "${tk[@]}"
refused tpm:bad-signature "a quote signature flipped" "$csr2" $(r1 2) $(r2 "$S/j2") --flip quoteSignature:40 "${tk[@]}"
refused tpm:malformed "round 2 without the quote" "$csr2" $(r1 2) state=@"$state2" secret="$S/j2.secret" "${tk[@]}"
flips=""
for m in quote:50 quote:90 quoteSignature:20 quoteSignature:50 secret:3; do
  py join "$csr2" $(r1 2) $(r2 "$S/j2") --flip "$m" "${tk[@]}" >"$S/flip.req"
  flips+="$(send "$S/flip.req") "
done
ok "$flips" "$(printf 'refused %.0s' $(seq 5))" "a flipped bit in the quote, its signature or the secret is refused"
cat >"$S/expired.sql" <<SQL
SET bc_join.clock_offset = 400;
SELECT bc_join(:'req')->>'status';
SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' ORDER BY id DESC LIMIT 1;
SQL
py join "$csr2" $(r1 2) $(r2 "$S/j2") "${tk[@]}" >"$S/j2b.req"
ok "$(sql -v req="$(cat "$S/j2b.req")" -f "$S/expired.sql" | tr '\n' ' ')" "refused tpm:challenge-expired " "an answer after the challenge's notAfter"
# PCR policies (in transactions that roll back): selection and digest.
zeros=$(printf '%064d' 0 | sed 's/0/00/g' | cut -c1-64)
policy_try() {
  local values="$1" req="$2"
  sql -v req="$(cat "$req")" <<SQL | tr '\n' ' '
BEGIN;
SELECT max(id) AS before FROM bc_join.events \\gset
SELECT bc_join.set_tpm_pcr_policy('$A', '$poolA', 'sha256:0-7', decode(repeat('$values', 8), 'hex')) \\gset
SELECT bc_join(:'req')->>'status';
SELECT coalesce((SELECT payload->>'refusal' FROM bc_join.events WHERE type = 'security.join.refused' AND id > :before ORDER BY id DESC LIMIT 1), '-');
ROLLBACK;
SQL
}
answer "$S/j2.req.resp" rsa "$csr2" sha256:0,1,2,3,4,5,6,7,8,9 "$S/j2q10"
py join "$csr2" $(r1 2) $(r2 "$S/j2q10") state=@"$state2" secret="$S/j2.secret" "${tk[@]}" >"$S/q10.req"
ok "$(policy_try "$zeros" "$S/q10.req")" "refused tpm:pcr-selection " "a quote over another PCR selection than the policy's"
ok "$(policy_try "$(printf '%064d' 1)" "$S/j2b.req")" "refused tpm:pcr-digest " "a quote whose PCR digest is not the policy's"
ok "$(policy_try "$zeros" "$S/j2b.req")" "issued - " "the quote meets the policy (swtpm's PCRs 0-7 are zero)"
ok "$(send "$S/j2b.req") $(payload "$S/j2b.req.resp" nodeId) $(payload "$S/j2b.req.resp" identityGeneration)" "issued $node1 2" \
   "round 2 issued (no policy): the bound EK reclaims its node through a token that allows it"
sql -c "SELECT bc_join.delete_node('$node1')" >/dev/null
ok "$(send "$S/j2b.req") $(last_refusal)" "refused tpm:challenge-reused" "the challenge is used once: round 2 again after the node is gone"

# ------------------------------------------- enrolled EK, tenant mismatch
sql -c "SELECT bc_join.enroll_tpm_ek('$ekc_sha', '$A', '$poolA')" >/dev/null
ok "$(sql -c "SELECT count(*) FROM bc_join.tpm_ek_enrollments")" 1 "enroll_tpm_ek enrolls the P-384 EK"
m3c() { echo "ekPub=$F/ekc.pub akPub=$F/ak.pub nodeKeyPub=$F/node3.pub certifyInfo=$F/cert3.attest certifySignature=$F/cert3.sig"; }
refused tpm:tenant-mismatch "an enrolled EK with a token of another tenant" "$csr3" $(m3c) --token "$tokB" --service-keys "$BCJ_SERVICE_KEYS"
py join "$csr3" $(m3c) >"$S/j3.req"
ok "$(send "$S/j3.req")" challenge "an enrolled EK (no certificate, no token) gets a challenge"
answer "$S/j3.req.resp" ecc384 "$csr3" sha256:0,1,2,3,4,5,6,7 "$S/j3"
py join "$csr3" $(m3c) $(r2 "$S/j3") >"$S/j3b.req"
ok "$(send "$S/j3b.req")" issued "the P-384 EK's challenge (MakeCredential under SHA-384) answered: issued"
node3=$(payload "$S/j3b.req.resp" nodeId)
ok "$(payload "$S/j3b.req.resp" tenantId) $(payload "$S/j3b.req.resp" identityGeneration)" "$A 1" "in the enrollment's tenant, generation 1"

# --------------------------------------- a wipe: new node key, same EK
csr4="$F/node4.csr"
m4c() { echo "ekPub=$F/ekc.pub akPub=$F/ak.pub nodeKeyPub=$F/node4.pub certifyInfo=$F/cert4.attest certifySignature=$F/cert4.sig"; }
py join "$csr4" $(m4c) >"$S/j4.req"
send "$S/j4.req" >/dev/null
answer "$S/j4.req.resp" ecc384 "$csr4" sha256:0,1,2,3,4,5,6,7 "$S/j4"
py join "$csr4" $(m4c) $(r2 "$S/j4") >"$S/j4b.req"
ok "$(send "$S/j4b.req") $(payload "$S/j4b.req.resp" nodeId) $(payload "$S/j4b.req.resp" identityGeneration)" "issued $node3 2" \
   "a re-join with a new node key and the same EK reclaims the node: generation + 1"
serial4=$(payload "$S/j4b.req.resp" serial)

# --------------------------------------------------------------- renewal
csr6="$F/node6.csr"
py renew "$csr6" "$serial4" 0x81000014 >"$S/rn0.req"
rn() { sql -v req="$(cat "$1")" <<<"SELECT bc_join.renew(:'req')" >"$1.resp"; jq_status "$1.resp"; }
ok "$(rn "$S/rn0.req") $(last_refusal)" "refused renew:tpm-missing" "a renewal of a TPM-bound certificate without the tpm member"
py renew "$csr6" "$serial4" 0x81000014 akPub="$F/ak.pub" nodeKeyPub="$F/node4.pub" certifyInfo="$F/cert4.attest" certifySignature="$F/cert4.sig" >"$S/rn1.req"
ok "$(rn "$S/rn1.req") $(last_refusal)" "refused renew:tpm-node-key-mismatch" "a tpm member certifying the old key, not the new CSR's"
py renew "$csr6" "$serial4" 0x81000014 akPub="$F/akr.pub" nodeKeyPub="$F/node6.pub" certifyInfo="$F/cert6-akr.attest" certifySignature="$F/cert6-akr.sig" >"$S/rn2.req"
ok "$(rn "$S/rn2.req") $(last_refusal)" "refused renew:tpm-ak-mismatch" "a tpm member by another AK than the statement's"
py renew "$csr6" "$serial4" 0x81000014 akPub="$F/ak.pub" nodeKeyPub="$F/node6.pub" certifyInfo="$F/cert6.attest" certifySignature="$F/cert6.sig" >"$S/rn3.req"
ok "$(rn "$S/rn3.req")" issued "a renewal proving the new key with the same AK is issued"
ok "$(sql -c "SELECT node_key_uri FROM bc_join.node_certs WHERE serial = '$(payload "$S/rn3.req.resp" serial)'")" "urn:bc:tpm-ak:sha256:$akhex" "the statement carries forward"

# ------------------------------------------ approval mode cannot be flooded
# Software-made EKs (ekp.pub's public area with a fresh OpenSSL P-256 point,
# no certificate), each with another CSR of node 5's TPM key: one single-use
# token makes at most bc_join.pending_requests_per_token waiting requests,
# a tenant at most bc_join.pending_requests_per_tenant.
C=$(sql -c "SELECT bc_join.create_tenant('tpm-c')")
siteC=$(sql -c "SELECT bc_join.create_site('$C', 'dc')")
poolC=$(sql -c "SELECT bc_join.create_pool('$C', '$siteC', 'p')")
sql -c "SELECT bc_join.set_tpm_enrollment_mode('$C', 'approval')" >/dev/null
tokC=$(token "$C" "$poolC" 1)
tokC2=$(token "$C" "$poolC" 1)
ok "$(sql -c "SHOW bc_join.pending_requests_per_token") $(sql -c "SHOW bc_join.pending_requests_per_tenant")" "10 1000" \
   "the bounds default to 10 a token and 1000 a tenant"
swek() {  # a software EK: ekp.pub with the point of a new OpenSSL key
  /usr/bin/python3 - "$F/ekp.pub" "$1" <<'PY'
import sys
from cryptography.hazmat.primitives.asymmetric import ec
b = bytearray(open(sys.argv[1], "rb").read())
n = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
b[-68:] = b"\x00\x20" + n.x.to_bytes(32, "big") + b"\x00\x20" + n.y.to_bytes(32, "big")
open(sys.argv[2], "wb").write(bytes(b))
PY
}
flood() {  # flood I TOKEN: a request from software EK I with CSR I of node 5's key
  openssl req -new -provider tpm2 -provider default -key handle:0x81000015 -subj "/CN=flood-$1" \
    -outform DER -out "$S/flood$1.csr" 2>/dev/null
  tpm2_flushcontext -t >/dev/null 2>&1
  swek "$S/swek$1.pub"
  py join "$S/flood$1.csr" ekPub="$S/swek$1.pub" akPub="$F/ak.pub" nodeKeyPub="$F/node5.pub" \
    certifyInfo="$F/cert5.attest" certifySignature="$F/cert5.sig" --token "$2" --service-keys "$BCJ_SERVICE_KEYS" >"$S/flood$1.req"
}
bounded() { PGOPTIONS="-c bc_join.pending_requests_per_token=3 -c bc_join.pending_requests_per_tenant=5" send "$1"; }
for i in 1 2 3 4; do flood "$i" "$tokC"; done
ok "$(bounded "$S/flood1.req") $(bounded "$S/flood2.req") $(bounded "$S/flood3.req")" "pending pending pending" \
   "three software EKs wait with one single-use token (per token: 3)"
ok "$(bounded "$S/flood4.req") $(last_refusal)" "refused tpm:pending-token-limit" "a fourth is refused tpm:pending-token-limit"
ok "$(sql -c "SELECT count(*) FROM bc_join.events WHERE tenant_id = '$C' AND type = 'security.join.refused' AND payload->>'refusal' = 'tpm:pending-token-limit'")" 1 \
   "the refusal is an event in the tenant's stream"
ok "$(bounded "$S/flood1.req") $(payload "$S/flood1.req.resp" requestId)" \
   "pending $(sql -c "SELECT id FROM bc_join.join_requests WHERE csr_sha256 = sha256(pg_read_binary_file('$S/flood1.csr'))")" \
   "the first asks again: it still waits on its request (a retry makes none)"
ok "$(sql -c "SELECT count(*) || ' ' || count(*) FILTER (WHERE token_id = split_part('$tokC', '.', 1) AND ek_chain = 'none') FROM bc_join.pending_join_requests WHERE tenant_id = '$C'")" "3 3" \
   "pending_join_requests shows the three, their token, and that no EK came with a certificate"
for i in 5 6 7; do flood "$i" "$tokC2"; done
ok "$(bounded "$S/flood5.req") $(bounded "$S/flood6.req")" "pending pending" "another token of the tenant: two more wait (5 in the tenant)"
ok "$(bounded "$S/flood7.req") $(last_refusal)" "refused tpm:pending-tenant-limit" "the sixth of the tenant is refused tpm:pending-tenant-limit (per tenant: 5)"
ok "$(send "$S/flood4.req")" pending "under the default bounds the fourth of the token waits"
# An EK certificate that chains to no configured root (the intermediate removed): ek_chain unchained.
flood 8 "$tokC2"
py join "$S/flood8.csr" ekPub="$F/ekr.pub" ekCert="$F/ekr.crt" akPub="$F/ak.pub" nodeKeyPub="$F/node5.pub" \
  certifyInfo="$F/cert5.attest" certifySignature="$F/cert5.sig" --token "$tokC2" --service-keys "$BCJ_SERVICE_KEYS" >"$S/unchained.req"
ok "$(sql -v req="$(cat "$S/unchained.req")" <<SQL | tr '\n' ' '
BEGIN;
SELECT bc_join.remove_tpm_ek_root('$issuer_sha') \gset
SELECT bc_join(:'req')->>'status';
SELECT ek_chain FROM bc_join.pending_join_requests WHERE id = (SELECT id FROM bc_join.join_requests WHERE csr_sha256 = sha256(pg_read_binary_file('$S/flood8.csr')));
ROLLBACK;
SQL
)" "pending unchained " "an EK certificate that chains to no root waits as ek_chain unchained"
sql -c "SELECT count(bc_join.reject_join_request(id, 'flood')) FROM bc_join.pending_join_requests WHERE tenant_id = '$C'" >/dev/null
ok "$(sql -c "SELECT count(*) FROM bc_join.pending_join_requests")" 0 "rejected, they leave the view"

# ------------------------------------------------------ approval enrollment
sql -c "SELECT bc_join.set_tpm_enrollment_mode('$B', 'approval')" >/dev/null
csr5="$F/node5.csr"
m5p() { echo "ekPub=$F/ekp.pub akPub=$F/ak.pub nodeKeyPub=$F/node5.pub certifyInfo=$F/cert5.attest certifySignature=$F/cert5.sig"; }
py join "$csr5" $(m5p) --token "$tokB" --service-keys "$BCJ_SERVICE_KEYS" >"$S/ja.req"
ok "$(send "$S/ja.req")" pending "an unknown EK with a token of a tenant in approval mode waits for an operator"
rid=$(sql -c "SELECT id FROM bc_join.pending_join_requests WHERE attestor = 'tpm'")
ok "$(send "$S/ja.req") $(payload "$S/ja.req.resp" requestId)" "pending $rid" "asking again waits on the same request"
sql -c "SELECT bc_join.approve_join_request('$rid')" >/dev/null
ok "$(sql -c "SELECT tenant_id = '$B' AND pool_id = '$poolB' FROM bc_join.tpm_ek_enrollments WHERE request_id = '$rid'")" t "approving it enrolls the EK in the token's tenant and pool"
ok "$(send "$S/ja.req")" challenge "the enrolled EK now gets its challenge"
answer "$S/ja.req.resp" ecc256 "$csr5" sha256:0,1,2,3,4,5,6,7 "$S/ja"
py join "$csr5" $(m5p) $(r2 "$S/ja") --token "$tokB" --service-keys "$BCJ_SERVICE_KEYS" >"$S/jab.req"
ok "$(send "$S/jab.req") $(payload "$S/jab.req.resp" tenantId)" "issued $B" "and is admitted in tenant B"
ok "$(sql -c "SELECT count(*) FROM bc_join.events WHERE type = 'node.joined' AND payload->>'attestor' = 'tpm'")" 5 "five tpm joins in all (two of them reclaims)"

# ------------------------------------------------------- check_evidence()
# Round-1 evidence a machine made (node 1's: the RSA EK with its certificate), checked as a
# join checks it, at a given time, nothing written; without the token the tenant is unchecked.
member() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
written() { sql -c "SELECT (SELECT count(*) FROM bc_join.attestation_uses) || ' ' || (SELECT count(*) FROM bc_join.events) || ' ' || (SELECT count(*) FROM bc_join.join_requests) || ' ' || (SELECT count(*) FROM bc_join.nodes)"; }
check() {  # REQUEST_FILE AT|'' CSR?(yes|no) FIELD...: check_evidence's answer, the fields asked for
  local req="$1" at="$2" withcsr="$3"; shift 3
  sql -v att="$(member "$req" attestation)" -v csr="$(member "$req" csr)" -v at="$at" -v w="$withcsr" <<'SQL' | /usr/bin/python3 -c '
import json, sys
a = json.load(sys.stdin)
print(" ".join(json.dumps(a.get(k) if "." not in k else a.get(k.split(".")[0], {}).get(k.split(".")[1]))
               for k in sys.argv[1:]))' "$@"
SELECT bc_join.check_evidence('tpm', bc_join.b64url_decode(:'att'), nullif(:'at', '')::timestamptz,
                              CASE WHEN :'w' = 'yes' THEN bc_join.b64url_decode(:'csr') END);
SQL
}
w0=$(written)
akurn="urn:bc:tpm-ak:sha256:$akhex"
ekhash=$(sha256sum "$F/ekr.der" | cut -c1-64)
ok "$(check "$S/j1.req" '' yes ok outcome read.ekTrust read.ekSha256 read.akStatement unchecked)" \
   "true \"challenge\" \"certificate\" \"$ekhash\" \"$akurn\" [\"the tenant, from a token (the EK is not enrolled) (no sealed join token given)\"]" \
   "check_evidence: round-1 evidence with its CSR verifies (the EK chained by its certificate, the AK's statement read), the tenant named unchecked without the token"
ok "$(check "$S/j1.req" '' no ok unchecked)" \
   "true [\"nodeKeyPub is the CSR's key (no CSR given)\", \"the tenant, from a token (the EK is not enrolled) (no sealed join token given)\"]" \
   "without the CSR, the node key's equality with the CSR's key is named unchecked too"
ok "$(check "$S/j1.req" '2000-01-01T00:00:00Z' yes ok refusal)" 'false "tpm:ek-chain"' \
   "at a time before the EK certificate was valid: refused tpm:ek-chain"
ok "$(check "$S/chkflip.req" '' yes refusal)" "\"$reason\"" \
   "a flipped certify signature: the refusal the join gave it ($joined $reason)"
ok "$(written)" "$w0" "check_evidence wrote nothing (uses of evidence, events, join requests, nodes as they were)"

[ "$failed" -eq 0 ]
