#!/bin/bash
# discovery-request.sh: a ramdisk's discovery JoinRequest for tests, the
# site assertion signed with SIGNKEY (a site agent's node key).
#
#   discovery-request.sh BCD JOSETOOL SERVICEKEYS DIR TOKEN SIGNKEY SERIAL SITE MAC EPOCH IAT EXP [BINDDIR]
#
# DIR gets the ramdisk's key and CSR (kept across calls); the assertion binds
# BINDDIR's CSR (default DIR's).  TOKEN may be empty (no sealedToken).
# Prints the JoinRequest.
set -euo pipefail
bcd=$1 jose=$2 keys=$3 dir=$4 token=$5 signkey=$6 serial=$7 site=$8 mac=$9
epoch=${10} iat=${11} exp=${12} bind=${13:-$4}
"$bcd" join-request --service-keys "$keys" --out-dir "$dir" --role ramdisk --attestor discovery >/dev/null
if [ "$bind" != "$dir" ]; then
  "$bcd" join-request --service-keys "$keys" --out-dir "$bind" --role ramdisk --attestor discovery >/dev/null
fi
sha=$(openssl dgst -sha256 -binary "$bind/node.csr.der" | basenc --base64url -w0 | tr -d =)
payload=$(printf '{"purpose":"discovery","serial":"%s","siteId":"%s","mac":"%s","epoch":%s,"csrSha256":"%s","iat":%s,"exp":%s}' \
  "$serial" "$site" "$mac" "$epoch" "$sha" "$iat" "$exp")
jws=$(printf %s "$payload" | "$jose" sign "$signkey")
printf '{"assertion":"%s"}' "$jws" > "$dir/evidence.json"
"$bcd" join-request --service-keys "$keys" ${token:+--token "$token"} --out-dir "$dir" --role ramdisk \
  --attestor discovery --attestation-file "$dir/evidence.json"
