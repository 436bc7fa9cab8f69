#!/usr/bin/env bash
# demo.t: bash tools/demo (the README's first command) exits 0 and prints
# the whole story: the join, a hook's session credential (0600, verified
# against the node CA), 50 hooks for 2 sessions making 2 provisionings on
# both sides, a host without a node credential refused with exit 77, and
# the operator's queries.
set -u
. "$(dirname "$0")/../lib/tap.sh"
has() { grep -Eq -- "$1" "$out"; }
cd "$(dirname "$0")/../.."
out=$(mktemp)
timeout 240 bash tools/demo >"$out" 2>&1
rc=$?
ok_rc "$rc" "bash tools/demo exits 0"
has '^SPIFFE ID: +spiffe://demo\.bc-join\.local/tenant/ten_[0-9a-f]{32}/node/node_[0-9a-f]{32}$'; ok_rc $? "it prints the host's SPIFFE ID"
has '^session: +spiffe://demo\.bc-join\.local/tenant/ten_[0-9a-f]{32}/node/node_[0-9a-f]{32}/session/ses_[0-9a-f]{32}$'; ok_rc $? "a hook gets a session credential: its SPIFFE ID"
has '^key: +/.*/run/hook/demo-session\.key \(600\)$'; ok_rc $? "the session key landed in the hook's directory, mode 0600"
has '^certificate: +/.*/run/hook/demo-session\.crt \(600\)'; ok_rc $? "and its certificate, mode 0600"
has '/run/hook/demo-session\.crt: OK$'; ok_rc $? "openssl verify accepts the session certificate against the node CA"
has '^waiting: +50 hooks, 2 provisionings in flight or queued$'; ok_rc $? "50 hooks wait at once on 2 provisionings"
has '^hooks: +50 of 50 exited 0$'; ok_rc $? "all 50 hooks get their credential"
has '^bcd status: +2 provisioning requests for the 50 hooks$'; ok_rc $? "bcd status counts 2 provisioning requests"
has '^server: +2 session certificates for the burst sessions, 2 sessions in bc_join.sessions$'; ok_rc $? "and the server saw exactly 2"
has '^the hook printed: bcd credential: no-node-credential: '; ok_rc $? "a host without a node credential: the hook says why"
has '^its exit status: +77 '; ok_rc $? "and exits 77"
has '^statement: +urn:bc:tpm-ak:sha256:[0-9a-f]{64}$'; ok_rc $? "a second host joins by TPM: the AK statement in its certificate"
has '^node\.key: +-----BEGIN TSS2 PRIVATE KEY-----'; ok_rc $? "and its node key is a TPM key blob"
has 'session\.provisioned'; ok_rc $? "the operator's queries show the events"
has '^demo: done$'; ok_rc $? "the demo runs to its end"
[ "$failed" = 0 ] || { echo "# demo output:"; sed 's/^/#   /' "$out" | tail -60; }
rm -f "$out"
echo "1..$n"
[ "$failed" = 0 ]
