#!/bin/bash
# test/systemd-inside.sh: the half of test/systemd-run that runs inside the
# booted container (as root, systemd PID 1), with the packages installed.
# Only installed paths: /usr/bin/bc-join-keygen, bcd, bc-gateway, the
# packaged units.  Prints ok / not ok lines; exit 1 on any failure.
set -uo pipefail
pass=0 fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok - $2"; else fail=$((fail + 1)); echo "not ok - $2"; [ -n "${3:-}" ] && printf '#   %s\n' "$3" | head -20; fi; }
check() { local what=$1; shift; "$@" >/tmp/check.out 2>&1; ok $? "$what" "$(cat /tmp/check.out)"; }
wait_for() { local n=$1; shift; for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done; return 1; }
psql_() { runuser -u postgres -- psql -qAtX "$@"; }
U=u1
as_u() { runuser -u "$U" -- env HOME=/home/$U XDG_RUNTIME_DIR=/run/user/$(id -u $U) "$@"; }

KEYS=/var/lib/bc-join/keys
pgver=$(ls /usr/lib/postgresql | sort -n | tail -1)

echo "# keys with the installed bc-join-keygen"
mkdir -p /var/lib/bc-join
check "bc-join-keygen $KEYS (installed /usr/bin/bc-join-keygen)" bc-join-keygen "$KEYS"
check "the key directory is postgres's, 0700" test "$(stat -c '%U %a' $KEYS)" = "postgres 700"
(cd $KEYS && sha256sum *.key *.crt) >/tmp/keys.sum

echo "# PostgreSQL $pgver with bc_join preloaded"
cat >/etc/postgresql/$pgver/main/conf.d/bc_join.conf <<EOF
shared_preload_libraries = 'bc_join'
bc_join.key_dir = '$KEYS'
bc_join.trust_domain = 'systemd.bc-join.test'
EOF
check "systemctl restart postgresql@$pgver-main" systemctl restart postgresql@$pgver-main
check "the server runs" wait_for 60 runuser -u postgres -- psql -qAtX -c "SELECT 1"
psql_ -c "CREATE DATABASE bc_join" >/dev/null
check "CREATE EXTENSION bc_join (the packaged extension, version $(psql_ -c "SELECT default_version FROM pg_available_extensions WHERE name = 'bc_join'"))" \
  psql_ -d bc_join -c "CREATE EXTENSION bc_join"
psql_ -d bc_join -c 'CREATE ROLE "bc-gateway" LOGIN IN ROLE bc_join_gateway' >/dev/null

echo "# bc-gateway from its packaged system unit"
check "the package made the system user bc-gateway" getent passwd bc-gateway
check "the package installed the alert rules (/usr/share/bc-gateway/prometheus/bc-join.rules.yml, nine alerts)" \
  test "$(grep -c '^ *- alert: ' /usr/share/bc-gateway/prometheus/bc-join.rules.yml)" = 9
cd /etc/bc-gateway
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=test TLS CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
  -keyout /root/tls-ca.key -out /root/tls-ca.crt 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
  -keyout tls.key -out /root/tls.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >/root/tls.ext
openssl x509 -req -in /root/tls.csr -CA /root/tls-ca.crt -CAkey /root/tls-ca.key -CAcreateserial -days 2 \
  -extfile /root/tls.ext -out tls.crt 2>/dev/null
chgrp bc-gateway tls.key tls.crt && chmod 0640 tls.key tls.crt
cd /
check "not started by the install (it had no certificate yet)" test "$(systemctl is-active bc-gateway)" != active
check "systemctl enable --now bc-gateway" systemctl enable --now bc-gateway
check "GET /healthz answers through the unit" wait_for 40 curl -sf --cacert /root/tls-ca.crt https://127.0.0.1:8443/healthz
gwpid=$(systemctl show -P MainPID bc-gateway)
check "it runs as bc-gateway, with no capability" test "$(ps -o user= -p "$gwpid")" = bc-gateway -a \
  "$(awk '/^CapEff/ {print $2}' /proc/$gwpid/status)" = 0000000000000000
check "its RLIMIT_NOFILE is the unit's LimitNOFILE" grep -q "^Max open files *4608 *4608" /proc/$gwpid/limits
check "systemctl restart bc-gateway: stopped cleanly (exit 0 on SIGTERM), serving again" bash -c \
  "systemctl restart bc-gateway && [ \"\$(systemctl show -P ExecMainStatus bc-gateway)\" = 0 ] || true;
   for i in \$(seq 40); do curl -sf --cacert /root/tls-ca.crt https://127.0.0.1:8443/healthz && exit 0; sleep 0.5; done; exit 1"
check "a new process ($(systemctl show -P MainPID bc-gateway) after $gwpid), no failure recorded" bash -c \
  "[ \"\$(systemctl show -P MainPID bc-gateway)\" != $gwpid ] && [ \"\$(systemctl show -P Result bc-gateway)\" = success ]"

echo "# a tenant, a pool and a join token"
tenant=$(psql_ -d bc_join -c "SELECT bc_join.create_tenant('t')")
site=$(psql_ -d bc_join -c "SELECT bc_join.create_site('$tenant', 'lab')")
pool=$(psql_ -d bc_join -c "SELECT bc_join.create_pool('$tenant', '$site', 'workers')")

echo "# user $U with bcd's packaged user units"
useradd -m -s /bin/bash $U
uid=$(id -u $U)
mkdir -p /home/$U/.config/bcd
cp /root/tls-ca.crt /home/$U/.config/bcd/gateway-ca.pem
psql_ -d bc_join -c "SELECT bc_join.service_keys()" >/home/$U/.config/bcd/service-keys.json
psql_ -d bc_join -c "SELECT bc_join.create_join_token('$tenant', '$pool', uses => 1, ttl => '1 hour')" \
  >/home/$U/.config/bcd/join-token
sed "s|/home/USER/|/home/$U/|g; s|https://gw.example:8443|https://127.0.0.1:8443|" \
  /usr/share/doc/bcd/examples/bcd.env.example >/home/$U/.config/bcd/bcd.env
chown -R $U:$U /home/$U/.config
chmod 0700 /home/$U/.config/bcd
as_u bcd setup apply >/tmp/apply.out 2>&1
ok $? "bcd setup apply (as $U)" "$(cat /tmp/apply.out)"
check "apply: the packaged units present, nothing written" bash -c \
  "grep -q 'bcd.socket: present and current: /usr/lib/systemd/user/bcd.socket' /tmp/apply.out &&
   grep -q 'bcd.service: present and current: /usr/lib/systemd/user/bcd.service' /tmp/apply.out &&
   ! grep -q written /tmp/apply.out && grep -q 'enabled now' /tmp/apply.out"

echo "# lingering enabled: the user manager starts with nobody logged in; bcd refuses under it"
loginctl enable-linger $U
check "loginctl enable-linger starts user@$uid.service" wait_for 60 systemctl is-active user@$uid.service
check "bcd.socket listens (enabled by bcd setup apply)" wait_for 40 as_u systemctl --user is-active bcd.socket
mkdir -p /run/user/$uid/h0 && chown $U /run/user/$uid/h0 && chmod 0700 /run/user/$uid/h0
as_u bcd credential --session linger --dir /run/user/$uid/h0 --timeout 5 >/tmp/h0.out 2>&1
ok $((! $?)) "a hook under lingering gets no credential" "$(cat /tmp/h0.out)"
sleep 1
journalctl -q --no-pager _UID=$uid -t bcd >/tmp/j0 2>&1 || journalctl -q --no-pager _UID=$uid >/tmp/j0 2>&1
check "bcd refused to start under lingering (its journal)" grep -q "lingering is enabled for $U (/var/lib/systemd/linger/$U).*refusing to start" /tmp/j0
as_u bcd setup check --timeout 3 >/tmp/chk0.out 2>&1
r=$?
ok $((r == 1 ? 0 : 1)) "bcd setup check: exit 1, lingering named" "$(cat /tmp/chk0.out)"
check "(its line)" grep -q "bcd setup check: lingering: enabled for $U" /tmp/chk0.out
loginctl disable-linger $U
as_u systemctl --user reset-failed bcd.service bcd.socket >/dev/null 2>&1
loginctl terminate-user $U >/dev/null 2>&1
check "lingering off: the user manager stops (nobody logged in)" wait_for 60 bash -c "! systemctl is-active -q user@$uid.service"

echo "# a login session instead (pam_systemd): bcd socket-activated on the first hook"
setsid su -l $U -c 'exec sleep 900' </dev/null >/dev/null 2>&1 &
check "su -l $U opens a logind session" wait_for 60 bash -c "loginctl list-sessions --no-legend | grep -qw $U"
check "which starts user@$uid.service" wait_for 60 systemctl is-active user@$uid.service
check "bcd.socket listens at /run/user/$uid/bcd/bcd.sock (0600, its directory 0700)" wait_for 40 bash -c \
  "[ \"\$(stat -c %a /run/user/$uid/bcd/bcd.sock)\" = 600 ] && [ \"\$(stat -c %a /run/user/$uid/bcd)\" = 700 ]"
check "bcd.service not running before the first hook" bash -c "! runuser -u $U -- env XDG_RUNTIME_DIR=/run/user/$uid systemctl --user is-active -q bcd.service"
mkdir -p /run/user/$uid/h1 && chown $U /run/user/$uid/h1 && chmod 0700 /run/user/$uid/h1
as_u bcd credential --session s1 --dir /run/user/$uid/h1 --timeout 60 >/tmp/h1.out 2>/tmp/h1.err
r=$?
check "the hook's first connection started bcd.service (socket activation)" wait_for 20 as_u systemctl --user is-active bcd.service
# while bcd is still joining it refuses at once (no-node-credential, 77): the hook retries
for _ in $(seq 60); do
  [ "$r" = 0 ] && break
  sleep 1
  as_u bcd credential --session s1 --dir /run/user/$uid/h1 --timeout 60 >/tmp/h1.out 2>/tmp/h1.err
  r=$?
done
ok $r "bcd joined through the gateway and the hook got its session credential" "$(cat /tmp/h1.err)"
key=$(sed -n 1p /tmp/h1.out); crt=$(sed -n 2p /tmp/h1.out)
check "the key and certificate are the user's, 0600" test "$(stat -c '%U %a' "$key" "$crt" | sort -u)" = "$U 600"
state1=$(ls -d /home/$U/.config/bcd/node /home/$U/.local/state/bcd/node 2>/dev/null | head -1)
check "bcd's state directory %S/bcd/node ($state1) is 0700, and the --service-keys file beside bcd.env is still the operator's" bash -c \
  "[ -n '$state1' ] && [ \"\$(stat -c %a '$state1')\" = 700 ] && [ -f '$state1/node-chain.pem' ] &&
   python3 -c 'import json, sys; sys.exit(\"trustDomain\" not in json.load(open(sys.argv[1])))' /home/$U/.config/bcd/service-keys.json"
check "the certificate verifies against the node CA" openssl verify -CAfile $KEYS/node-ca.crt "$crt"
check "bcd.service active under the user manager" as_u systemctl --user is-active bcd.service
bcdpid=$(as_u systemctl --user show -P MainPID bcd.service)
check "bcd runs as $U in user@$uid.service's cgroup" bash -c "[ \"\$(ps -o user= -p $bcdpid)\" = $U ] && grep -q 'user@$uid.service/app.slice/bcd.service' /proc/$bcdpid/cgroup"
check "the node is in the database" test "$(psql_ -d bc_join -c 'SELECT count(*) FROM bc_join.nodes')" = 1
as_u bcd setup check >/tmp/chk1.out 2>&1
ok $? "bcd setup check: exit 0 (units current, enabled, listening, answering, lingering off)" "$(cat /tmp/chk1.out)"

echo "# the session ends: the user manager, the socket and bcd go"
pkill -u $U -x sleep
check "the session is gone" wait_for 60 bash -c "! loginctl list-sessions --no-legend | grep -qw $U"
check "user@$uid.service stops (UserStopDelaySec)" wait_for 60 bash -c "! systemctl is-active -q user@$uid.service"
check "no bcd process left" bash -c "! pgrep -u $U -x bcd"
check "its socket is gone" test ! -e /run/user/$uid/bcd/bcd.sock

echo "# the TPM mode under the packaged unit: swtpm behind tpm2-abrmd on the system bus"
TS=/var/lib/swtpm-test
mkdir -p $TS/state $TS/cfg $TS/certs
XDG_CONFIG_HOME=$TS/cfg swtpm_setup --tpm2 --create-config-files overwrite,root >$TS/setup.log 2>&1
XDG_CONFIG_HOME=$TS/cfg swtpm_setup --tpm2 --tpmstate $TS/state --create-ek-cert --create-platform-cert \
  --lock-nvram --overwrite --pcr-banks sha256 --write-ek-cert-files $TS/certs >>$TS/setup.log 2>&1
ok $? "swtpm_setup: a TPM with EK certificates" "$(tail -5 $TS/setup.log)"
systemd-run -q --unit=swtpm-test swtpm socket --tpm2 --tpmstate dir=$TS/state \
  --server type=tcp,port=2321,bindaddr=127.0.0.1 --ctrl type=tcp,port=2322,bindaddr=127.0.0.1 \
  --flags not-need-init,startup-clear
sleep 1
# Debian's tpm2-abrmd.service requires /dev/tpm0 (and D-Bus activates it): the
# administrator's override in /etc, the same daemon, user and bus name on swtpm
printf '%s\n' '[Unit]' 'Description=TPM2 Access Broker and Resource Management Daemon (swtpm)' \
  'After=swtpm-test.service' '[Service]' 'Type=dbus' 'BusName=com.intel.tss2.Tabrmd' \
  'ExecStart=/usr/sbin/tpm2-abrmd --tcti=swtpm:host=127.0.0.1,port=2321' 'User=tss' \
  >/etc/systemd/system/tpm2-abrmd.service
systemctl daemon-reload
check "tpm2-abrmd.service (on swtpm) started" timeout 60 systemctl restart tpm2-abrmd
check "tpm2-abrmd answers on the system bus" wait_for 20 timeout 10 tpm2_getrandom -T tabrmd:bus_type=system 8
psql_ -d bc_join -v r="$(cat $TS/cfg/var/lib/swtpm-localca/swtpm-localca-rootca-cert.pem)" \
  -v i="$(cat $TS/cfg/var/lib/swtpm-localca/issuercert.pem)" >/tmp/ekroots.out 2>&1 <<'SQL'
SELECT bc_join.add_tpm_ek_root(:'r');
SELECT bc_join.add_tpm_ek_root(:'i');
SQL
check "swtpm's EK CA (root and intermediate) added" test "$(psql_ -d bc_join -c 'SELECT count(*) FROM bc_join.tpm_ek_certificates')" = 2
U=u2
useradd -m -s /bin/bash -G tss $U
uid2=$(id -u $U)
mkdir -p /home/$U/.config/bcd
cp /root/tls-ca.crt /home/$U/.config/bcd/gateway-ca.pem
psql_ -d bc_join -c "SELECT bc_join.service_keys()" >/home/$U/.config/bcd/service-keys.json
psql_ -d bc_join -c "SELECT bc_join.create_join_token('$tenant', '$pool', expect => '{\"attestors\": [\"tpm\"]}')" \
  >/home/$U/.config/bcd/join-token
sed "s|/home/USER/|/home/$U/|g; s|https://gw.example:8443|https://127.0.0.1:8443|; s|^BCD_OPTIONS=.*|& --attestor tpm --tcti tabrmd:bus_type=system|" \
  /usr/share/doc/bcd/examples/bcd.env.example >/home/$U/.config/bcd/bcd.env
chown -R $U:$U /home/$U/.config
check "bcd setup apply (as $U, in group tss)" as_u bcd setup apply
setsid su -l $U -c 'exec sleep 900' </dev/null >/dev/null 2>&1 &
check "su -l $U: user@$uid2.service and bcd.socket" wait_for 60 as_u systemctl --user is-active bcd.socket
mkdir -p /run/user/$uid2/h && chown $U /run/user/$uid2/h && chmod 0700 /run/user/$uid2/h
r=1
for _ in $(seq 60); do
  as_u bcd credential --session tpm-s --dir /run/user/$uid2/h --timeout 60 >/tmp/ht.out 2>/tmp/ht.err && { r=0; break; }
  sleep 1
done
ok $r "the hook's credential from a bcd that joined by TPM under the packaged unit" "$(cat /tmp/ht.err; journalctl -q --no-pager _UID=$uid2 | tail -5)"
check "the node joined by the tpm attestor, its key in the TPM" bash -c \
  "[ \"\$(runuser -u postgres -- psql -qAtX -d bc_join -c \"SELECT count(*) FROM bc_join.nodes WHERE attestor = 'tpm'\")\" = 1 ] &&
   head -1 \$(ls -d /home/$U/.config/bcd/node /home/$U/.local/state/bcd/node 2>/dev/null | head -1)/node.key | grep -q 'TSS2 PRIVATE KEY'"
pkill -u $U -x sleep
check "its session ended: user@$uid2.service and bcd gone" wait_for 60 bash -c "! systemctl is-active -q user@$uid2.service && ! pgrep -u $U -x bcd"
systemctl stop tpm2-abrmd swtpm-test >/dev/null 2>&1
U=u1

echo "# removing the packages leaves the database and the key directory"
nodes=$(psql_ -d bc_join -c 'SELECT count(*) FROM bc_join.nodes')
DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq bcd bc-gateway bc-join-tools postgresql-$pgver-bc-join >/tmp/rm.out 2>&1
ok $? "apt-get remove the four packages" "$(tail -5 /tmp/rm.out)"
check "bc-gateway.service stopped with its package" bash -c "! systemctl is-active -q bc-gateway"
check "the database bc_join and its $nodes nodes are still there (the running server)" test "$(psql_ -d bc_join -c 'SELECT count(*) FROM bc_join.nodes')" = "$nodes"
check "the key directory is unchanged" bash -c "cd $KEYS && sha256sum -c --quiet /tmp/keys.sum"
# what remove left (conffiles: bc-gateway's) is purged; the others are gone already
dpkg --purge bcd bc-gateway bc-join-tools postgresql-$pgver-bc-join >/tmp/purge.out 2>&1
ok $? "dpkg --purge the four packages" "$(tail -5 /tmp/purge.out)"
check "nothing of them is left in dpkg's database" bash -c "! dpkg -l bcd bc-gateway bc-join-tools postgresql-$pgver-bc-join 2>/dev/null | grep -qE '^(ii|rc|i[A-Z]|r[A-Z]) '"
check "purge removed /etc/default/bc-gateway" test ! -e /etc/default/bc-gateway
check "and kept /etc/bc-gateway with the operator's TLS key" test -f /etc/bc-gateway/tls.key
check "the key directory is still unchanged" bash -c "cd $KEYS && sha256sum -c --quiet /tmp/keys.sum"
check "the cluster's data directory is still there" test -f /var/lib/postgresql/$pgver/main/PG_VERSION
check "the users' bcd state is left alone" bash -c "ls /home/u1/.config/bcd/node/node-chain.pem /home/u1/.local/state/bcd/node/node-chain.pem 2>/dev/null | grep -q . && ls /home/u2/.config/bcd/node/node.key /home/u2/.local/state/bcd/node/node.key 2>/dev/null | grep -q ."

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
