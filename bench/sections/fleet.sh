# bench/sections/fleet.sh: section 11, the fleet one primary carries (issue
# 49, done-when 2).  bench/fleet.c simulates N nodes against the real
# bc-gateway and this cluster: each joins once through the custom attestor
# sim-restricted (registered here with the documented SQL, docs/attestors.md:
# a restricted certificate, allowedKinds ["inventory.refresh"], certTtlSeconds
# = BENCH_FLEET_TTL), then renews at half-life, asks session certificates and
# JWT-SVIDs at the configured rates per node; open-loop, latency from each
# request's scheduled time.  A search doubles N from BENCH_FLEET_START until a
# point fails (p99 of a kind >= 50 ms, or anything refused for load: 503 or
# 429, or any error), then bisects to within 10%.  One more run at the largest
# passing N measures where its time goes: CPU by process, WAL per request,
# the service's time per kind (attestor_statistics) and what the backends
# wait on (pg_stat_activity sampled every 100 ms).  Then the same on the HA
# pair (tools/ha-throwaway).  Sourced by bench/run.
#
# Settings (environment):
#   BENCH_FLEET=0              skip the section
#   BENCH_FLEET_START          first N of the search (1000; quick 200)
#   BENCH_FLEET_MAX            largest N tried (200000; quick 2000)
#   BENCH_FLEET_SECS           measured seconds per point (20; quick 5)
#   BENCH_FLEET_WARM           warm-up seconds per point (5; quick 2)
#   BENCH_FLEET_TTL            node certificate lifetime, s (600: a renewal per
#                              node every 300 s; bc_join.cert_ttl of the database)
#   BENCH_FLEET_SESSION_EVERY  mean seconds between session certificates per node (60)
#   BENCH_FLEET_JWT_EVERY      mean seconds between JWT-SVIDs per node (30)
#   BENCH_FLEET_CONNS          TLS connections of the generator (64)
#   BENCH_FLEET_POOL           the gateway's --db-pool (8)
#   BENCH_FLEET_TPM_SHARE      the share of the nodes that are TPM machines (0.5):
#                              they join through the tpm attestor instead (their
#                              EKs enrolled first with bc_join.enroll_tpm_ek), renew
#                              with the TPM's certify of the new key, and attest
#                              (POST /v1/attest, both rounds) every
#   BENCH_FLEET_ATTEST_EVERY   seconds (60, the documented default interval; the
#                              pool's interval_seconds is set to it), in enforce
#                              mode against a boot policy of the event log they send
#                              (test/data/eventlog/ubuntu_2104_shielded_vm_no_secure_boot_eventlog:
#                              a GCP Shielded VM, 106 events, 38 KB); 0: no quotes
#   BENCH_FLEET_HA=0           skip the HA pair (tools/ha-throwaway: pg_auto_failover,
#                              a synchronous standby; its monitor on BENCH_FLEET_HA_PORT,
#                              default BENCH_PORT + 10, and the two nodes on the next two)

if [ "$QUICK" = 1 ]; then
  FLEET_START=${BENCH_FLEET_START:-200}; FLEET_MAX=${BENCH_FLEET_MAX:-2000}
  FLEET_SECS=${BENCH_FLEET_SECS:-5}; FLEET_WARM=${BENCH_FLEET_WARM:-2}
else
  FLEET_START=${BENCH_FLEET_START:-1000}; FLEET_MAX=${BENCH_FLEET_MAX:-200000}
  FLEET_SECS=${BENCH_FLEET_SECS:-20}; FLEET_WARM=${BENCH_FLEET_WARM:-5}
fi
FLEET_TTL=${BENCH_FLEET_TTL:-600}
FLEET_SESS=${BENCH_FLEET_SESSION_EVERY:-60}
FLEET_JWT=${BENCH_FLEET_JWT_EVERY:-30}
FLEET_CONNS=${BENCH_FLEET_CONNS:-64}
FLEET_POOL=${BENCH_FLEET_POOL:-8}
FLEET_TPM=${BENCH_FLEET_TPM_SHARE:-0.5}
FLEET_ATTEST=${BENCH_FLEET_ATTEST_EVERY:-60}
FLEET_EVLOG=$ROOT/test/data/eventlog/ubuntu_2104_shielded_vm_no_secure_boot_eventlog
FLEET_HA=${BENCH_FLEET_HA:-1}
FLEET_HAPORT=${BENCH_FLEET_HA_PORT:-$((PORT + 10))}

# The custom attestor of the simulated nodes, through the documented SQL: it
# admits any well-formed name "<tag>:<n>" into the bench pool with a
# restricted, short-lived certificate and binds the node to the name.  A
# simulator: it trusts its evidence, so it lives in the bench database only.
fleet_attestor_sql() {
  cat <<'SQL'
CREATE TABLE public.sim_restricted_config (tenant_id text NOT NULL, pool_id text NOT NULL, cert_ttl int NOT NULL);
CREATE FUNCTION public.sim_restricted_verify(evidence jsonb, context jsonb) RETURNS jsonb
LANGUAGE plpgsql SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
	name text;
	c public.sim_restricted_config;
BEGIN
	BEGIN
		name := convert_from(bc_join.b64url_decode(evidence->>'payload'), 'UTF8');
	EXCEPTION WHEN others THEN
		name := NULL;
	END;
	IF name IS NULL OR name !~ '^[a-z0-9-]{1,32}:[0-9]{1,9}$' THEN
		PERFORM bc_join.refuse('sim-restricted:malformed');
	END IF;
	SELECT * INTO c FROM public.sim_restricted_config;
	RETURN jsonb_build_object('tenantId', c.tenant_id, 'role', 'node', 'poolId', c.pool_id,
							  'certTtlSeconds', c.cert_ttl,
							  'allowedKinds', jsonb_build_array('inventory.refresh'),
							  'bind', bc_join.b64url_encode(sha256(convert_to(name, 'UTF8'))));
END
$$;
SELECT bc_join.register_command_kind('inventory.refresh', 'the one kind a simulated node may run');
SELECT bc_join.register_attestor('sim-restricted', '1.0.0', ARRAY['node'], 'public.sim_restricted_verify(jsonb,jsonb)');
SQL
}

# fleet_proc_cpu PID...: CPU seconds (user + system) of these processes so far.
fleet_proc_cpu() {
  local p tck
  tck=$(getconf CLK_TCK)
  for p in "$@"; do cat "/proc/$p/stat" 2>/dev/null || true; done |
    awk -v tck="$tck" '{ sub(/^.*\) /, ""); s += $12 + $13 } END { printf "%.2f\n", s / tck }'
}
# fleet_pg_cpu PIDFILE...: CPU seconds of every process of these clusters (postmasters and children).
fleet_pg_cpu() {
  local f pm pids=()
  for f in "$@"; do
    pm=$(head -1 "$f" 2>/dev/null) || continue
    pids+=("$pm" $(pgrep -P "$pm" || true))
  done
  fleet_proc_cpu "${pids[@]}"
}

# fsql: psql on the fleet database of the current target ($FCONN).
fsql() { psql -qAtX -v ON_ERROR_STOP=1 -d "$FCONN" "$@"; }

# fleet_target LABEL GWUSER PIDFILES...: the search and the run at the
# largest passing N against the database $FCONN (set up already) through a
# gateway of its own; results in FL_*[LABEL].  PIDFILES: the postmaster.pid
# of every cluster whose CPU counts (the standby's too).
declare -gA FL_TCERT FL_TBOUND FL_TPASS FL_TQUAR FL_NCERT FL_NRESTR FL_NRENEW FL_BK FL_LARGEST FL_FIRST FL_CONFIRM FL_SECS FL_PG FL_GW FL_WAL FL_SVC FL_WAITS FL_ACTIVE FL_SYNC
fleet_target() {
  local label=$1 gwuser=$2; shift 2
  local pidfiles=("$@") F=$W/fleet/$label gwpid gwdb
  mkdir -p "$F"
  gwdb="$FCONN user=$gwuser"
  {
    echo "ALTER DATABASE $(fsql -c "SELECT current_database()") SET bc_join.cert_ttl = $FLEET_TTL;"
    fleet_attestor_sql
    echo "INSERT INTO public.sim_restricted_config SELECT t.id, p.id, $FLEET_TTL FROM bc_join.tenants t JOIN bc_join.pools p ON p.tenant_id = t.id WHERE t.name = 'bench';"
  } | fsql >/dev/null 2>"$F/setup.err" || { cat "$F/setup.err" >&2; die "fleet $label: the attestor setup"; }
  # The TPM machines' pool: enforce mode at their interval, the boot policy of
  # their event log (its events on PCRs 0-7, as bc_join.replay_event_log()
  # shows them: what promote_observations() would add), the PCRs it replays to.
  if awk -v s="$FLEET_TPM" 'BEGIN { exit !(s > 0) }'; then
    fsql -v log="$(od -An -v -tx1 "$FLEET_EVLOG" | tr -d ' \n')" -v every="$FLEET_ATTEST" >/dev/null 2>"$F/setup-tpm.err" <<'SQL' || { cat "$F/setup-tpm.err" >&2; die "fleet $label: the TPM machines' pool"; }
SELECT t.id AS tid, p.id AS pid FROM bc_join.tenants t JOIN bc_join.pools p ON p.tenant_id = t.id
 WHERE t.name = 'bench' ORDER BY p.id LIMIT 1 \gset
SELECT bc_join.replay_event_log(decode(:'log', 'hex')) AS rep \gset
SELECT bc_join.set_attestation_settings(:'pid', mode => 'enforce',
         interval_seconds => greatest(5, least(3600, :'every'::int)));
INSERT INTO bc_join.boot_policy (tenant_id, pool_id, pcr, event_type, digest, note)
SELECT DISTINCT :'tid', :'pid', (e->>'pcr')::int, e->>'typeName', decode(e->'digests'->>'sha256', 'hex'), 'fleet: the simulated machines'' boot'
  FROM jsonb_array_elements((:'rep')::jsonb->'events') e
 WHERE (e->>'pcr')::int < 8 AND e->>'typeName' <> 'EV_NO_ACTION' AND e->'digests' ? 'sha256';
SQL
    fsql -v log="$(od -An -v -tx1 "$FLEET_EVLOG" | tr -d ' \n')" >"$F/pcrs.txt" 2>"$F/setup-tpm.err" <<'SQL' || { cat "$F/setup-tpm.err" >&2; die "fleet $label: the event log's PCRs"; }
SELECT key || ' ' || value FROM jsonb_each_text(bc_join.replay_event_log(decode(:'log', 'hex'))->'pcrs'->'sha256') WHERE key <> '10';
SQL
  fi
  FL_SYNC[$label]=$(fsql -c "SELECT 'synchronous_commit ' || current_setting('synchronous_commit') || ', synchronous_standby_names: ' || coalesce(nullif(current_setting('synchronous_standby_names'), ''), 'none')")
  fsql -c "SELECT bc_join.service_keys()" >"$F/keys.json"
  # Every simulated node is its own client address (X-Forwarded-For from the
  # trusted local generator) with the per-address limit an operator would set.
  "$ROOT/build/bc-gateway" --tls-cert "$W/fleet/tls.crt" --tls-key "$W/fleet/tls.key" --listen "127.0.0.1:$FLEET_GWPORT" \
    --db "$gwdb" --db-pool "$FLEET_POOL" \
    --trusted-proxy 127.0.0.1/32 --rate-limit 5/s --rate-burst 10 --rate-table 1048576 \
    --log-level warn >>"$W/gateway-fleet-$label.log" 2>&1 &
  gwpid=$!; PIDS+=("$gwpid")
  for _ in $(seq 100); do curl -sf --cacert "$W/fleet/tls.crt" "https://127.0.0.1:$FLEET_GWPORT/healthz" >/dev/null && break; sleep 0.1; done
  local common=(--url "https://127.0.0.1:$FLEET_GWPORT" --cacert "$W/fleet/tls.crt" --service-keys "$F/keys.json"
                --secs "$FLEET_SECS" --warm "$FLEET_WARM" --cert-ttl "$FLEET_TTL"
                --session-every "$FLEET_SESS" --jwt-every "$FLEET_JWT" --conns "$FLEET_CONNS" --xff
                --tpm-share "$FLEET_TPM" --attest-every "$FLEET_ATTEST" --admin-db "$FCONN"
                --eventlog "$FLEET_EVLOG" --pcr-values "$F/pcrs.txt")
  log "fleet $label: search from $FLEET_START nodes (at most $FLEET_MAX), $FLEET_SECS s a point"
  "$W/fleet-gen" "${common[@]}" --tag s1 --search --nodes "$FLEET_START" --max-nodes "$FLEET_MAX" \
    >"$F/search.jsonl" 2>"$F/search.err" || { tail -20 "$F/search.err" >&2; die "fleet $label: the search failed"; }
  FL_LARGEST[$label]=$(sed -n 's/.*"phase":"result","largest":\([0-9]*\).*/\1/p' "$F/search.jsonl")
  FL_FIRST[$label]=$(sed -n 's/.*"firstFailing":\([0-9]*\).*/\1/p' "$F/search.jsonl")
  log "fleet $label: largest passing fleet ${FL_LARGEST[$label]} nodes (first failing ${FL_FIRST[$label]:-none})"
  # every certificate the search issued (joins and renewals) is the attestor's restricted one
  read -r FL_NCERT[$label] FL_NRESTR[$label] FL_NRENEW[$label] < <(fsql -F' ' -c "SELECT count(*),
      count(*) FILTER (WHERE allowed_kinds = ARRAY['inventory.refresh']), count(*) FILTER (WHERE join_csr_sha256 IS NULL)
      FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id WHERE n.attestor = 'sim-restricted'")
  # the TPM machines: their certificates bound to their AKs, their attestations, none quarantined
  read -r FL_TCERT[$label] FL_TBOUND[$label] FL_TPASS[$label] FL_TQUAR[$label] < <(fsql -F' ' -c "SELECT
      (SELECT count(*) FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id WHERE n.attestor = 'tpm'),
      (SELECT count(*) FROM bc_join.node_certs c JOIN bc_join.nodes n ON n.id = c.node_id WHERE n.attestor = 'tpm' AND c.node_key_uri LIKE 'urn:bc:tpm-ak:sha256:%'),
      (SELECT count(*) FROM bc_join.node_attestation WHERE last_passed_at IS NOT NULL),
      (SELECT count(*) FROM bc_join.node_attestation WHERE state = 'quarantined')")
  if [ "${FL_TQUAR[$label]:-0}" != 0 ] || [ "${FL_TCERT[$label]:-0}" != "${FL_TBOUND[$label]:-0}" ]; then
    INVALID+=("fleet $label: ${FL_TQUAR[$label]} TPM machines quarantined, ${FL_TBOUND[$label]} of ${FL_TCERT[$label]} TPM certificates bound to an AK")
  fi
  if [ "${FL_NCERT[$label]}" != "${FL_NRESTR[$label]}" ] || [ "${FL_NCERT[$label]}" = 0 ]; then
    INVALID+=("fleet $label: ${FL_NCERT[$label]} certificates of simulated nodes, ${FL_NRESTR[$label]} restricted to inventory.refresh")
  fi

  # Where the time goes at the largest passing N: a fresh generator (its own
  # nodes, joined first), then one measured point with the cluster's counters.
  FL_CONFIRM[$label]=""
  local n=${FL_LARGEST[$label]:-0}
  if [ "$n" -gt 0 ]; then
    local pg0 pg1 bk0 bk1 gw0 gw1 lsn0 t0 t1 waits=$F/waits sampler fpid ticks active
    : >"$waits"
    rm -f "$F/measure.go" "$F/measure.stop"
    fsql -c "CHECKPOINT" >/dev/null
    # the samples are taken from the end of the joins to the generator's exit
    (
      while [ ! -f "$F/measure.go" ]; do sleep 0.05; done
      while [ ! -f "$F/measure.stop" ]; do
        echo tick >>"$waits"
        fsql -c "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
                 WHERE usename = '$gwuser' AND state = 'active' AND backend_type = 'client backend'" >>"$waits" 2>/dev/null
        sleep 0.1
      done
    ) & sampler=$!
    PIDS+=("$sampler")
    "$W/fleet-gen" "${common[@]}" --tag c1 --nodes "$n" >"$F/confirm.jsonl" 2>"$F/confirm.err" &
    fpid=$!
    while ! grep -q '"phase":"join"' "$F/confirm.jsonl" 2>/dev/null && kill -0 "$fpid" 2>/dev/null; do sleep 0.05; done
    lsn0=$(fsql -c "SELECT pg_current_wal_insert_lsn()")
    pg0=$(fleet_pg_cpu "${pidfiles[@]}"); bk0=$(fleet_backend_cpu "$gwuser" "${pidfiles[@]}")
    gw0=$(fleet_proc_cpu "$gwpid"); t0=$(date +%s.%N)
    fsql -c "SELECT bc_join.attestor_stats_reset()" >/dev/null
    touch "$F/measure.go"
    wait "$fpid" || { tail -20 "$F/confirm.err" >&2; die "fleet $label: the run at $n nodes failed"; }
    t1=$(date +%s.%N); pg1=$(fleet_pg_cpu "${pidfiles[@]}"); bk1=$(fleet_backend_cpu "$gwuser" "${pidfiles[@]}")
    gw1=$(fleet_proc_cpu "$gwpid")
    touch "$F/measure.stop"; wait "$sampler" 2>/dev/null || true
    FL_WAL[$label]=$(fsql -c "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn0')")
    FL_CONFIRM[$label]=$(grep '"phase":"point"' "$F/confirm.jsonl")
    FL_SECS[$label]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    FL_PG[$label]=$(awk -v a="$pg0" -v b="$pg1" 'BEGIN { printf "%.2f", b - a }')
    FL_GW[$label]=$(awk -v a="$gw0" -v b="$gw1" 'BEGIN { printf "%.2f", b - a }')
    FL_BK[$label]=$(awk -v a="$bk0" -v b="$bk1" 'BEGIN { printf "%.2f", b - a }')
    FL_SVC[$label]=$(fsql -F' ' -c "SELECT attestor, sum(calls), round(sum(mean_ms * calls)::numeric / nullif(sum(calls), 0), 2)
                                   FROM bc_join.attestor_statistics WHERE outcome = 'admitted' GROUP BY attestor ORDER BY attestor")
    # per tick: how many backends were active, and on what (CPU: no wait event)
    ticks=$(grep -c '^tick$' "$waits" || true)
    active=$(grep -vc '^tick$' "$waits" || true)
    FL_WAITS[$label]=$({ grep -v '^tick$' "$waits" || true; } | sort | uniq -c | sort -rn | head -6 |
      awk -v n="$active" '{ printf "%s%s %.0f%%", sep, $2, 100 * $1 / n; sep = ", " }')
    FL_ACTIVE[$label]=$(awk -v t="$ticks" -v a="$active" 'BEGIN { if (t > 0) printf "%.1f", a / t; else print "n/a" }')
    log "fleet $label: at $n nodes: ${FL_CONFIRM[$label]}"
    log "fleet $label: postgres ${FL_PG[$label]} s (its backends ${FL_BK[$label]} s), gateway ${FL_GW[$label]} s CPU over ${FL_SECS[$label]} s; WAL ${FL_WAL[$label]} B; backends active ${FL_ACTIVE[$label]}: ${FL_WAITS[$label]}"
  fi
  kill "$gwpid" 2>/dev/null; wait "$gwpid" 2>/dev/null || true
}

# fleet_backend_cpu USER PIDFILE...: CPU seconds of the backends of USER (the gateway's connections).
fleet_backend_cpu() {
  local user=$1 f pm p pids=()
  shift
  for f in "$@"; do
    pm=$(head -1 "$f" 2>/dev/null) || continue
    for p in $(pgrep -P "$pm" || true); do
      case "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" in "postgres: $user "*) pids+=("$p") ;; esac
    done
  done
  fleet_proc_cpu "${pids[@]}"
}

fleet_run() {
  FLEET_OK=0
  FLEET_TARGETS=()
  [ "${BENCH_FLEET:-1}" = 1 ] || return 0
  if [ ! -x build/bc-gateway ]; then
    log "fleet: no build/bc-gateway; skipped"
    return 0
  fi
  mkdir -p "$W/fleet"
  FLEET_GWPORT=$((PORT + 5))
  log "fleet: building bench/fleet.c"
  cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Isrc/common -Ibench -I"$(pg_config --includedir)" \
    bench/fleet.c bench/soft_tpm.c src/common/*.c \
    $(pkg-config --cflags --libs tss2-mu) -L"$(pg_config --libdir)" -lpq -lcurl -lssl -lcrypto -ljansson -lm -o "$W/fleet-gen" \
    || die "fleet: bench/fleet.c does not build (libcurl4-openssl-dev?)"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$W/fleet/tls.key" \
    -out "$W/fleet/tls.crt" -days 2 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null

  # One primary: the bench cluster.  JWT-SVIDs need jwt-svid.key in the key directory.
  [ -f "$W/keys/jwt-svid.key" ] || bash tools/bc-join-keygen --add-jwt-key "$W/keys" >/dev/null
  setup_db fleet "$W/fleet/tokens"
  DB=fleet sqlb -c "CREATE ROLE bench_fleet LOGIN IN ROLE bc_join_gateway" >/dev/null
  FCONN="host=$PGHOST port=$PGPORT dbname=fleet"
  fleet_target single bench_fleet "$DATA/postmaster.pid"
  FLEET_TARGETS+=(single)

  # The HA pair (tools/ha-throwaway: pg_auto_failover, a synchronous standby).
  if [ "$FLEET_HA" = 1 ]; then
    if ! command -v pg_autoctl >/dev/null; then
      log "fleet: no pg_autoctl (postgresql-15-auto-failover); the HA pair skipped"
    else
      local H=$W/ha conninfo
      log "fleet: the HA pair (tools/ha-throwaway) on ports $FLEET_HAPORT-$((FLEET_HAPORT + 2))"
      mkdir -p "$H"
      bash tools/bc-join-keygen "$H/keys" >/dev/null
      [ -f "$H/keys/jwt-svid.key" ] || bash tools/bc-join-keygen --add-jwt-key "$H/keys" >/dev/null
      FLEET_HA_DIR=$H
      conninfo=$(bash tools/ha-throwaway start "$H" "$FLEET_HAPORT" bench.example 2>"$W/fleet/ha-start.err" | tail -1) \
        || { tail -20 "$W/fleet/ha-start.err" >&2; die "fleet: tools/ha-throwaway start"; }
      FCONN="$conninfo user=postgres"
      fsql >/dev/null <<'SQL'
SELECT bc_join.create_tenant('bench') AS t \gset
SELECT bc_join.create_site(:'t', 'dc1') AS s \gset
SELECT bc_join.create_pool(:'t', :'s', 'workers');
SQL
      fleet_target ha gw_login "$H/node1/data/postmaster.pid" "$H/node2/data/postmaster.pid"
      FLEET_TARGETS+=(ha)
      bash tools/ha-throwaway stop "$H" >/dev/null 2>&1 || true
      FLEET_HA_DIR=""
    fi
  fi
  FLEET_OK=1
}

# fleet_ms X: a latency from fleet's JSON (negative: no sample) for the table.
fleet_ms() { case $1 in -*) echo n/a ;; *) fmt "$1" ;; esac; }
# fleet_j JSONLINE PATH: one value of a point's JSON line (jq-free: python3's json).
fleet_j() { printf '%s' "$1" | /usr/bin/python3 -c 'import json,sys
d = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    d = d[k]
print(d)' "$2"; }

fleet_report() {
  echo "### 11. The fleet one primary carries"
  echo
  if [ "$FLEET_OK" != 1 ]; then
    echo "Not measured: build/bc-gateway is missing or BENCH_FLEET=0."
    echo
    return
  fi
  local per_node label
  per_node=$(awk -v t="$FLEET_TTL" -v s="$FLEET_SESS" -v j="$FLEET_JWT" -v q="$FLEET_TPM" -v a="$FLEET_ATTEST" 'BEGIN { printf "%.4f", 2 / t + 1 / s + 1 / j + (a > 0 ? 2 * q / a : 0) }')
  local tpm_text="No node is a TPM machine in this run (BENCH_FLEET_TPM_SHARE=0)."
  if awk -v s="$FLEET_TPM" 'BEGIN { exit !(s > 0) }'; then
    tpm_text="A share of $FLEET_TPM of the nodes are TPM machines: each its own simulated TPM (\`bench/soft_tpm.c\`: an EK from the TCG template L-2, an AK as \`tpm2_createak\` makes it, its structures marshalled by libtss2-mu and signed by OpenSSL, TPM2_ActivateCredential by \`bc_tpm_activate_credential\`; thousands of swtpm processes do not fit on 2 cores, and the service's checks are the ones real TPMs pass in test/tap/tpm.t and attest.t), its EK enrolled with \`bc_join.enroll_tpm_ek\` before it joins through the built-in \`tpm\` attestor (two rounds: credential activation and a quote), every renewal carrying the TPM's certify of the new key, and $( [ "$FLEET_ATTEST" != 0 ] && echo "attesting every $FLEET_ATTEST s (its phase uniform; \`POST /v1/attest\`, both rounds: a nonce, then a quote of PCRs 0-7 and 10 with the whole UEFI event log of a real machine, 106 events, 38 KB) in enforce mode against the boot policy of that log; a cycle's two rounds are the kinds *attest-challenge* and *attest-quote*, the quote's latency from its own sending" || echo "not attesting (BENCH_FLEET_ATTEST_EVERY=0)"). Their certificates are the tpm attestor's, not restricted."
  fi
  echo "\`bench/fleet.c\` (C, libcurl + OpenSSL, one thread, open-loop) simulates N nodes through the real \`bc-gateway\` (pool of $FLEET_POOL connections; a per-address limit of 5/s, burst 10, each node its own address by \`X-Forwarded-For\` from the trusted generator). Each node joins once through the custom attestor \`sim-restricted\` (registered with the documented SQL: a restricted certificate, \`allowedKinds\` [\"inventory.refresh\"], ${FLEET_TTL} s), then renews at half-life (every $((FLEET_TTL / 2)) s, its phase uniform), asks a session certificate every $FLEET_SESS s and a JWT-SVID every $FLEET_JWT s on average (Poisson), over $FLEET_CONNS keep-alive TLS connections; every answer's signature is verified as bcd does. $tpm_text The lifetime is short so that thousands of nodes make the rates of a large fleet: ${per_node} requests/s per node. Latency runs from each request's scheduled time to its answer; a point is ${FLEET_WARM} s of warm-up and ${FLEET_SECS} s measured. It passes when every kind's p99 < 50 ms and nothing is refused (503, 429, 403) or fails. N doubles until a point fails, then bisects to within 10%."
  echo
  for label in "${FLEET_TARGETS[@]}"; do
    fleet_report_target "$label"
  done
  [ "$FLEET_HA" = 1 ] || echo "The HA pair was not measured in this run (BENCH_FLEET_HA=0)."
  echo
}

# fleet_report_target LABEL: one target's search and where its time goes.
fleet_report_target() {
  local label=$1 line n sent bad503 bad429 badother k rate real tot conf
  if [ "$label" = ha ]; then
    echo "#### The HA pair (tools/ha-throwaway: pg_auto_failover, both nodes on this machine; ${FL_SYNC[$label]})"
  else
    echo "#### One primary (the bench cluster; ${FL_SYNC[$label]})"
  fi
  echo
  echo "| nodes | offered req/s | answered/s | renew p50 / p99 ms | session p50 / p99 ms | JWT-SVID p50 / p99 ms | attest challenge p50 / p99 ms | attest quote p50 / p99 ms | 503 / 429 / other | generator µs/req | machine µs/req | |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  while read -r line; do
    n=$(fleet_j "$line" nodes)
    sent=0; bad503=0; bad429=0; badother=0
    for k in renew session jwt-svid attest-challenge attest-quote; do
      sent=$((sent + $(fleet_j "$line" "$k.sent")))
      bad503=$((bad503 + $(fleet_j "$line" "$k.s503")))
      bad429=$((bad429 + $(fleet_j "$line" "$k.s429")))
      badother=$((badother + $(fleet_j "$line" "$k.s403") + $(fleet_j "$line" "$k.other") + $(fleet_j "$line" "$k.neterr")))
    done
    echo "| $n | $(awk -v s="$sent" -v t="$FLEET_SECS" 'BEGIN { printf "%.0f", s / t }') | $(fmt "$(fleet_j "$line" okPerSec)") | $(fleet_ms "$(fleet_j "$line" renew.p50)") / $(fleet_ms "$(fleet_j "$line" renew.p99)") | $(fleet_ms "$(fleet_j "$line" session.p50)") / $(fleet_ms "$(fleet_j "$line" session.p99)") | $(fleet_ms "$(fleet_j "$line" jwt-svid.p50)") / $(fleet_ms "$(fleet_j "$line" jwt-svid.p99)") | $(fleet_ms "$(fleet_j "$line" attest-challenge.p50)") / $(fleet_ms "$(fleet_j "$line" attest-challenge.p99)") | $(fleet_ms "$(fleet_j "$line" attest-quote.p50)") / $(fleet_ms "$(fleet_j "$line" attest-quote.p99)") | $bad503 / $bad429 / $badother | $(fleet_j "$line" genUsPerReq) | $(fleet_j "$line" machineUsPerReq) | $( [ "$(fleet_j "$line" pass)" = True ] && echo pass || echo '**fail**') |"
  done < <(grep '"phase":"point"' "$W/fleet/$label/search.jsonl")
  echo
  if [ "${FL_LARGEST[$label]:-0}" -gt 0 ]; then
    echo "**Largest fleet: ${FL_LARGEST[$label]} nodes** at these rates (first failing: ${FL_FIRST[$label]:-none up to $FLEET_MAX})."
  else
    echo "**No fleet passed**, down to ${FL_FIRST[$label]:-?} nodes (the search stops at a sixteenth of its first N): p99 stays above 50 ms however few the requests."
  fi
  echo "The search's certificates: ${FL_NCERT[$label]} issued to the \`sim-restricted\` nodes (${FL_NRENEW[$label]} of them by renewals), ${FL_NRESTR[$label]} restricted to \`allowedKinds\` [\"inventory.refresh\"]; ${FL_TCERT[$label]:-0} to the TPM machines, ${FL_TBOUND[$label]:-0} of them bound to the machine's AK (\`urn:bc:tpm-ak:\`); ${FL_TPASS[$label]:-0} machines with a passing quote, ${FL_TQUAR[$label]:-0} quarantined."
  conf=${FL_CONFIRM[$label]:-}
  if [ -n "$conf" ]; then
    rate=$(fleet_j "$conf" okPerSec)
    real=$(awk -v r="$rate" -v q="$FLEET_TPM" -v a="$FLEET_ATTEST" 'BEGIN { printf "%.0f", r / (1 / 43200 + 1 / 900 + 1 / 300 + (a > 0 ? 2 * q / a : 0)) }')
    echo "That is $(fmt "$rate") answered requests/s. A fleet on 24 h certificates (renewed at 12 h), a session certificate every 15 minutes and a JWT-SVID every 5 minutes per node$( [ "$FLEET_ATTEST" != 0 ] && awk -v s="$FLEET_TPM" 'BEGIN { exit !(s > 0) }' && echo ", the same share of TPM machines attesting every $FLEET_ATTEST s,") asks $(awk -v q="$FLEET_TPM" -v a="$FLEET_ATTEST" 'BEGIN { printf "%.4f", 1 / 43200 + 1 / 900 + 1 / 300 + (a > 0 ? 2 * q / a : 0) }') requests/s per node: the same rate is **≈ $real nodes** (the mix differs: fewer renewals, the heaviest credential, and the attestation rounds in the same proportion only when the fleet's interval is the run's)."
    echo
    echo "Where the time goes: one more point at ${FL_LARGEST[$label]} nodes (a new generator, its own nodes joined first; the counters run from the end of its joins to its exit: warm-up, measured window, drain):"
    echo
    echo "| at ${FL_LARGEST[$label]} nodes | |"
    echo "| --- | ---: |"
    echo "| answered requests/s | $(fmt "$rate") |"
    echo "| renew / session / JWT-SVID / attest challenge / attest quote p99 ms | $(fleet_ms "$(fleet_j "$conf" renew.p99)") / $(fleet_ms "$(fleet_j "$conf" session.p99)") / $(fleet_ms "$(fleet_j "$conf" jwt-svid.p99)") / $(fleet_ms "$(fleet_j "$conf" attest-challenge.p99)") / $(fleet_ms "$(fleet_j "$conf" attest-quote.p99)") |"
    tot=$(awk -v r="$rate" -v s="${FL_SECS[$label]}" 'BEGIN { print r * s }')
    echo "| postgres$( [ "$label" = ha ] && echo ' (both nodes)'), µs of CPU per request | $(awk -v c="${FL_PG[$label]}" -v n="$tot" 'BEGIN { printf "%.0f", c * 1e6 / n }') |"
    echo "| of which the gateway's backends (the requests themselves), µs per request | $(awk -v c="${FL_BK[$label]}" -v n="$tot" 'BEGIN { printf "%.0f", c * 1e6 / n }') |"
    echo "| bc-gateway, µs of CPU per request | $(awk -v c="${FL_GW[$label]}" -v n="$tot" 'BEGIN { printf "%.0f", c * 1e6 / n }') |"
    echo "| the generator, µs of CPU per request | $(fleet_j "$conf" genUsPerReq) |"
    echo "| the machine (2 cores, other load included), µs per request; busy | $(fleet_j "$conf" machineUsPerReq); $(awk -v m="$(fleet_j "$conf" machineBusyS)" -v w="$(fleet_j "$conf" wallS)" -v c="$NPROC" 'BEGIN { printf "%.0f%%", 100 * m / (w * c) }') |"
    echo "| WAL bytes per request; MB/s | $(awk -v b="${FL_WAL[$label]}" -v n="$tot" 'BEGIN { printf "%.0f", b / n }'); $(awk -v b="${FL_WAL[$label]}" -v s="${FL_SECS[$label]}" 'BEGIN { printf "%.2f", b / s / 1e6 }') |"
    echo "| ms inside the service per admitted round (attestor_statistics; calls) | $(printf '%s\n' "${FL_SVC[$label]}" | awk 'NF == 3 { printf "%s%s %s (%s)", sep, $1, $3, $2; sep = ", " }') |"
    echo "| backends active (of $FLEET_POOL) at a 100 ms sample; on what (CPU: no wait event) | ${FL_ACTIVE[$label]}; ${FL_WAITS[$label]:-n/a} |"
  fi
  echo
}
