#!/usr/bin/env bash
# demo.t: bash tools/demo (the README's first command) exits 0 and prints
# the whole story: the join, a hook's session credential (0600, verified
# against the node CA), 50 hooks for 2 sessions making 2 provisionings on
# both sides, a host without a node credential refused with exit 77, and
# the operator's queries.
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
has() { grep -Eq -- "$1" "$out"; }
cd "$(dirname "$0")/../.."
out=$(mktemp)
timeout 240 bash tools/demo >"$out" 2>&1
rc=$?
ok "$rc" "bash tools/demo exits 0"
has '^SPIFFE ID: +spiffe://demo\.bc-join\.local/tenant/ten_[0-9a-f]{32}/node/node_[0-9a-f]{32}$'; ok $? "it prints the host's SPIFFE ID"
has '^session: +spiffe://demo\.bc-join\.local/tenant/ten_[0-9a-f]{32}/node/node_[0-9a-f]{32}/session/ses_[0-9a-f]{32}$'; ok $? "a hook gets a session credential: its SPIFFE ID"
has '^key: +/.*/run/hook/demo-session\.key \(600\)$'; ok $? "the session key landed in the hook's directory, mode 0600"
has '^certificate: +/.*/run/hook/demo-session\.crt \(600\)'; ok $? "and its certificate, mode 0600"
has '/run/hook/demo-session\.crt: OK$'; ok $? "openssl verify accepts the session certificate against the node CA"
has '^waiting: +50 hooks, 2 provisionings in flight or queued$'; ok $? "50 hooks wait at once on 2 provisionings"
has '^hooks: +50 of 50 exited 0$'; ok $? "all 50 hooks get their credential"
has '^bcd status: +2 provisioning requests for the 50 hooks$'; ok $? "bcd status counts 2 provisioning requests"
has '^server: +2 session certificates for the burst sessions, 2 sessions in bc_join.sessions$'; ok $? "and the server saw exactly 2"
has '^the hook printed: bcd credential: no-node-credential: '; ok $? "a host without a node credential: the hook says why"
has '^its exit status: +77 '; ok $? "and exits 77"
has '^statement: +urn:bc:tpm-ak:sha256:[0-9a-f]{64}$'; ok $? "a second host joins by TPM: the AK statement in its certificate"
has '^node\.key: +-----BEGIN TSS2 PRIVATE KEY-----'; ok $? "and its node key is a TPM key blob"
has 'session\.provisioned'; ok $? "the operator's queries show the events"
has '^demo: done$'; ok $? "the demo runs to its end"
[ "$failed" = 0 ] || { echo "# demo output:"; sed 's/^/#   /' "$out" | tail -60; }
rm -f "$out"
echo "1..$n"
[ "$failed" = 0 ]
