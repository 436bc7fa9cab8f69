#!/usr/bin/env bash
# ssh_codec.t: src/common/ssh.c (#47.1) against the real OpenSSH ssh-keygen,
# through build/ssh-tool.  Certificates of an OpenSSL P-256 CA over
# ssh-keygen-made Ed25519 and ECDSA-384 keys and an openssl PKCS#8 P-256 key:
# `ssh-keygen -L` (which verifies the CA signature) shows exactly the type,
# serial, key ID, principals, critical options and extensions asked for; one
# flipped signature byte is refused; `ssh-keygen -l` fingerprints equal
# bc_ssh_fingerprint's; a certificate from `ssh-keygen -s` parses to its
# fields; a KRL is read by `ssh-keygen -Q [-l]`.  No cluster; needs only
# build/ssh-tool (make build/ssh-tool) and ssh-keygen.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$(dirname "$0")/../lib/tap.sh"
tool="${BCJ_SSH_TOOL:-$top/build/ssh-tool}"
S="${BCJ_SCRATCH:-${TMPDIR:-/tmp}}/ssh_codec.$$"
rm -rf "$S"; mkdir -p "$S"
trap 'rm -rf "$S"' EXIT
cd "$S" || exit 1

# keys: the CA (openssl, PKCS#8 P-256), the certified keys (ssh-keygen, openssl)
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.pem 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out p256.pem 2>/dev/null
ssh-keygen -q -t ed25519 -N '' -C ed -f ed
ssh-keygen -q -t ecdsa -b 384 -N '' -C e384 -f e384
ssh-keygen -q -t ecdsa -b 256 -N '' -C other -f other
"$tool" pubkey ca.pem >ca.pub
ok "$(ssh-keygen -y -f p256.pem | cut -d' ' -f1,2)" "$("$tool" pubkey p256.pem | cut -d' ' -f1,2)" \
  "the blob of a PKCS#8 P-256 key equals ssh-keygen -y's"
for k in ca ed e384; do
  ok "$("$tool" fingerprint $k.pub)" "$(ssh-keygen -l -f $k.pub | cut -d' ' -f2)" "fingerprint of $k equals ssh-keygen -l's"
done

now=$(date +%s)
va=$((now - 60)); vb=$((now + 3600))
# lshow FILE: ssh-keygen -L without the file name, the key and CA fingerprints and the validity
lshow() { ssh-keygen -L -f "$1" | sed -n '/Type:/p;/Key ID:/,$p' | grep -v 'Valid:' | sed 's/^ *//; s/ *$//'; }

# 1. user certificate over Ed25519: options and one extension
"$tool" cert --ca ca.pem --pub ed.pub --type user --serial 4242 --id 'spiffe://td/s/1' \
  --principal root --principal alice --force-command 'echo forced' --source-address 127.0.0.1/32,10.0.0.0/8 \
  --ext permit-pty --valid-after $va --valid-before $vb >ed-cert.pub
ok "$(lshow ed-cert.pub | tr '\n' '|')" \
  "Type: ssh-ed25519-cert-v01@openssh.com user certificate|Key ID: \"spiffe://td/s/1\"|Serial: 4242|Principals:|root|alice|Critical Options:|force-command echo forced|source-address 127.0.0.1/32,10.0.0.0/8|Extensions:|permit-pty|" \
  "ssh-keygen -L: the user certificate's fields, exactly (no permit-agent-forwarding)"
ok "$(ssh-keygen -L -f ed-cert.pub | sed -n 's/.*Signing CA: [A-Z]* \(SHA256:[^ ]*\).*/\1/p')" "$("$tool" fingerprint ca.pub)" \
  "ssh-keygen -L: signed by our CA"
ok "$(ssh-keygen -L -f ed-cert.pub | sed -n 's/.*Valid: from //p')" \
  "$(date -d @$va +%Y-%m-%dT%H:%M:%S) to $(date -d @$vb +%Y-%m-%dT%H:%M:%S)" "ssh-keygen -L: the validity"

# all five extensions, in the order OpenSSH requires (memcmp of the names)
"$tool" cert --ca ca.pem --pub ed.pub --type user --serial 5 --id u --principal bob \
  --ext permit-user-rc --ext permit-pty --ext permit-port-forwarding --ext permit-agent-forwarding \
  --ext permit-X11-forwarding --valid-after $va --valid-before $vb >all-cert.pub
ok "$(lshow all-cert.pub | sed -n '/Extensions:/,$p' | tr '\n' '|')" \
  "Extensions:|permit-X11-forwarding|permit-agent-forwarding|permit-port-forwarding|permit-pty|permit-user-rc|" \
  "ssh-keygen -L: five extensions, sorted"

# 2. host certificate over ECDSA-384 and over the openssl P-256 key
"$tool" cert --ca ca.pem --pub e384.pub --type host --serial 9 --id host-1 --principal h1.example \
  --principal h1 --valid-after $va --valid-before $vb >e384-cert.pub
ok "$(lshow e384-cert.pub | tr '\n' '|')" \
  "Type: ecdsa-sha2-nistp384-cert-v01@openssh.com host certificate|Key ID: \"host-1\"|Serial: 9|Principals:|h1.example|h1|Critical Options: (none)|Extensions: (none)|" \
  "ssh-keygen -L: the ECDSA-384 host certificate's fields, exactly"
"$tool" pubkey p256.pem >p256.pub
"$tool" cert --ca ca.pem --pub p256.pub --type user --serial 18446744073709551615 --id s --principal root \
  --valid-after $va --valid-before $vb >p256-cert.pub
ok "$(lshow p256-cert.pub | sed -n '1p;3p' | tr '\n' '|')" \
  "Type: ecdsa-sha2-nistp256-cert-v01@openssh.com user certificate|Serial: 18446744073709551615|" \
  "ssh-keygen -L: a certificate of the openssl P-256 key, serial 2^64-1"

# 3. one flipped byte in the signature: ssh-keygen refuses the certificate
python3 - ed-cert.pub bad-cert.pub <<'PY'
import base64, sys
t, b, *rest = open(sys.argv[1]).read().split()
raw = bytearray(base64.b64decode(b))
raw[-5] ^= 0x01
open(sys.argv[2], "w").write(f"{t} {base64.b64encode(bytes(raw)).decode()}\n")
PY
ssh-keygen -L -f bad-cert.pub >/dev/null 2>&1
ok "$?" 1 "ssh-keygen -L refuses a flipped signature byte"

# 4. refusals of the codec: serial 0, empty principals, '*' in a principal, host with options
"$tool" cert --ca ca.pem --pub ed.pub --type user --serial 0 --id x --principal a --valid-after 1 --valid-before 2 >/dev/null 2>&1
ok "$?" 1 "serial 0 refused"
"$tool" cert --ca ca.pem --pub ed.pub --type user --serial 1 --id x --valid-after 1 --valid-before 2 >/dev/null 2>&1
ok "$?" 1 "no principals refused"
"$tool" cert --ca ca.pem --pub ed.pub --type host --serial 1 --id x --principal '*.example' --valid-after 1 --valid-before 2 >/dev/null 2>&1
ok "$?" 1 "a wildcard principal refused"
"$tool" cert --ca ca.pem --pub ed.pub --type host --serial 1 --id x --principal h --ext permit-pty --valid-after 1 --valid-before 2 >/dev/null 2>&1
ok "$?" 1 "a host certificate with an extension refused"
ssh-keygen -q -t rsa -b 2048 -N '' -f rsa
"$tool" cert --ca ca.pem --pub rsa.pub --type user --serial 1 --id x --principal a --valid-after 1 --valid-before 2 >/dev/null 2>&1
ok "$?" 1 "an RSA key refused"

# 5. a certificate ssh-keygen -s made, parsed by ours
ssh-keygen -q -s other -I 'made-by-ssh-keygen' -n web1,web2 -h -z 777 -V 20300101000000:20300201000000 e384.pub
ok "$("$tool" parse e384-cert.pub)" \
  "{\"ca\":\"$("$tool" fingerprint other.pub)\",\"key\":\"$("$tool" fingerprint e384.pub)\",\"keyId\":\"made-by-ssh-keygen\",\"principals\":[\"web1\",\"web2\"],\"serial\":\"777\",\"type\":\"host\",\"validAfter\":\"$(date -d '2030-01-01 00:00:00' +%s)\",\"validBefore\":\"$(date -d '2030-02-01 00:00:00' +%s)\"}" \
  "ssh-tool parse: the fields of an ssh-keygen -s certificate"
ssh-keygen -q -s other -I u -n alice -z 778 ed.pub
ok "$("$tool" parse ed-cert.pub | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["type"], d["serial"], d["principals"])')" \
  "user 778 ['alice']" "ssh-tool parse: an ssh-keygen user certificate with its default extensions"

# 6. KRL: ours read by ssh-keygen -Q
"$tool" cert --ca ca.pem --pub ed.pub --type user --serial 4242 --id a --principal root --valid-after $va --valid-before $vb >rev-cert.pub
"$tool" cert --ca ca.pem --pub ed.pub --type user --serial 4243 --id a --principal root --valid-after $va --valid-before $vb >live-cert.pub
"$tool" krl --version 17 --generated $now --ca ca.pub:7,4242,9000 --ca other.pub:778 >krl
ok "$(ssh-keygen -Q -l -f krl | grep -v '^#\|^$' | tr '\n' '|')" "serial: 7|serial: 4242|serial: 9000|serial: 778|" \
  "ssh-keygen -Q -l: each serial"
ok "$(ssh-keygen -Q -l -f krl | grep -c "^# CA key ecdsa-sha2-nistp256 $("$tool" fingerprint ca.pub)\$")" 1 "ssh-keygen -Q -l: our CA's section"
ok "$(ssh-keygen -Q -l -f krl | head -1)" "# KRL version 17" "ssh-keygen -Q -l: the KRL version"
ssh-keygen -Q -f krl rev-cert.pub >/dev/null 2>&1
ok "$?" 1 "ssh-keygen -Q: a listed certificate is revoked"
ssh-keygen -Q -f krl live-cert.pub >/dev/null 2>&1
ok "$?" 0 "ssh-keygen -Q: another serial is not"
ssh-keygen -q -s other -I u -n alice -z 4242 ed.pub
ssh-keygen -Q -f krl ed-cert.pub >/dev/null 2>&1
ok "$?" 0 "ssh-keygen -Q: the same serial from another CA is not"
"$tool" krl --version 1 --ca ca.pub:5,5 >/dev/null 2>&1
ok "$?" 1 "a repeated serial refused"
"$tool" krl --version 1 --ca ca.pub:0 >/dev/null 2>&1
ok "$?" 1 "serial 0 refused in a KRL"

echo "1..$n"
[ "$failed" -eq 0 ]
