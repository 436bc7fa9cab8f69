#!/usr/bin/env bash
# tpm-evidence.sh DIR: after test/unit/tpm-fixture.sh setup DIR, the extra
# keys and structures test/tap/tpm.t joins with, made by swtpm through
# tpm2-tools 5.4 and openssl's tpm2 provider:
#   nodeN.csr (N = 1..6)   a CSR signed in the TPM by the persistent P-256
#                          key 0x8100001N; nodeN.pub its TPM2B_PUBLIC,
#                          certN.attest/.sig tpm2_certify of it by ak
#   certN-akr.attest/.sig  the same by akr (the RSA AK), for nodes 1, 2 and 6
#   aknr.pub               an unrestricted signing key (no AK)
#   akdec.pub              a sign|decrypt key (no AK)
#   aksha1.pub             a restricted signing key with ecdsa-sha1
#   nofix.pub              a P-256 signing key without fixedTPM/fixedParent,
#                          nofix.attest/.sig its certification by ak
set -euo pipefail
dir="$1"
here=$(cd "$(dirname "$0")" && pwd)
cd "$dir"
export TPM2TOOLS_TCTI="swtpm:host=127.0.0.1,port=$(cat port)"
export TPM2OPENSSL_TCTI="$TPM2TOOLS_TCTI"
flush() { tpm2_flushcontext -t >/dev/null 2>&1 || true; tpm2_flushcontext -s >/dev/null 2>&1 || true; }
t() {
  if ! "$@" >/dev/null 2>"$dir/last.err"; then
    echo "tpm-evidence: $*" >&2; cat "$dir/last.err" >&2; return 1
  fi
  flush
}
attrs='fixedtpm|fixedparent|sensitivedataorigin|userwithauth|sign'
t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256 -a "$attrs" -u node3.pub -r node3.priv
t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256 -a "$attrs" -u node4.pub -r node4.priv
t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256 -a "$attrs" -u node5.pub -r node5.priv
t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256 -a "$attrs" -u node6.pub -r node6.priv
cp node.pub node1.pub
cp node.priv node1.priv
for i in 1 2 3 4 5 6; do
  t tpm2_load -C primary.ctx -u node$i.pub -r node$i.priv -c n$i.ctx
  t tpm2_evictcontrol -C o -c n$i.ctx 0x8100001$i
  openssl req -new -provider tpm2 -provider default -key handle:0x8100001$i \
    -subj "/CN=tpm-node-$i" -outform DER -out node$i.csr 2>"$dir/last.err" \
    || { cat "$dir/last.err" >&2; exit 1; }
  # tpm2-openssl 1.1.1 writes ecdsa-with-SHA256 with NULL parameters; JoinService takes it as is
  openssl req -inform DER -in node$i.csr -verify -noout 2>/dev/null
  flush
  t tpm2_certify -c 0x8100001$i -C ak.ctx -g sha256 -o cert$i.attest -s cert$i.sig
done
t tpm2_certify -c 0x81000011 -C akr.ctx -g sha256 -o cert1-akr.attest -s cert1-akr.sig
t tpm2_certify -c 0x81000012 -C akr.ctx -g sha256 -o cert2-akr.attest -s cert2-akr.sig
t tpm2_certify -c 0x81000016 -C akr.ctx -g sha256 -o cert6-akr.attest -s cert6-akr.sig

t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256 -a "$attrs" -u aknr.pub -r aknr.priv
t tpm2_create -C primary.ctx -G ecc256:null -a "$attrs|decrypt" -u akdec.pub -r akdec.priv
t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha1:null -a "$attrs|restricted" -u aksha1.pub -r aksha1.priv
t tpm2_create -C primary.ctx -G ecc256:ecdsa-sha256 -a 'sensitivedataorigin|userwithauth|sign' \
  -u nofix.pub -r nofix.priv
t tpm2_load -C primary.ctx -u nofix.pub -r nofix.priv -c nofix.ctx
t tpm2_certify -c nofix.ctx -C ak.ctx -g sha256 -o nofix.attest -s nofix.sig
