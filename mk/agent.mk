# mk/agent.mk: what the agent daemon (bcd run) adds to the host build, and
# its end-to-end tests.  Included by the top-level Makefile after
# mk/host.mk, whose rules build bcd from every .c in src/agent/cmd, core and
# producers.
#
#   make agent-test   build/asan/bcd (ASan + UBSan), the gateway, then the
#                     TAP scripts test/agent/*.t through prove
#
# bcd's cmocka unit tests (test/unit/test_bcd_*.c: the Workload API's rule
# matcher, the exit statuses, the back-off, the refusals' summary, the
# attestation loop's decisions) are part
# of make unit and make unit-asan (mk/host.mk); they link the agent's
# objects they test (BCD_UNIT_SRCS), built with BC_TEST_BUILD.

# The three that mostly wait for a 60 s certificate (bc_join.cert_ttl's least)
# to expire or renew: ~75, 50 and 75 s, and 7, 14 and 21 s of CPU with their
# cluster and gateway.  They run beside the others in a prove of their own, so
# that they do not hold three of the others' slots, and both cores idle, for
# their first minute.
AGENT_WAIT = test/agent/x509pop.t test/agent/rotation.t test/agent/discovery.t
# The slowest first, so that prove -j (BCJ_AGENT_PROVE_JOBS) does not
# end on one long script alone.
AGENT_SLOW = test/agent/attest.t test/agent/kill.t test/agent/sessions.t \
	test/agent/workload_sds.t test/agent/workload_federation.t test/agent/workload_jwt_keys.t
# Alone, after the others: setup.t creates /var/lib/systemd/linger/<its user>
# for a moment (bcd run must refuse to start under lingering), which would make
# any bcd run of a script beside it refuse too; workload_attest.t floods the
# socket with connections from another uid (both cores busy) and asserts that
# every call of the legitimate callers is still answered in time, which
# another script's load beside it would make flaky.
AGENT_ALONE = test/agent/workload_attest.t test/agent/setup.t
# test/agent/ssh.t (its own sshd on a loopback port: openssh-server, test/lib/tools.txt;
# ~15 s, mostly a renewal's wait) is one of these others.
# The others mostly wait (renewals, expiries, watches): three at a time
# (BCJ_AGENT_PROVE_JOBS; 2 cores), beside AGENT_WAIT.
BCJ_AGENT_PROVE_JOBS ?= 3
AGENT_TESTS = $(AGENT_SLOW) $(filter-out $(AGENT_WAIT) $(AGENT_SLOW) $(AGENT_ALONE),$(sort $(wildcard test/agent/*.t)))

.PHONY: agent-test

# bcd speaks HTTPS to the gateway through libcurl (OpenSSL flavour), takes its
# socket from systemd (libsystemd sd_listen_fds) and serves it from threads.
build/bcd build/asan/bcd: HOST_LIBS += -lcurl -lm $(shell pkg-config --libs libsystemd) -pthread
# The tpm attestor's producer talks ESAPI over a TCTI (core/tpm_esys.c); its
# node key lives in the TPM through Debian's tpm2-openssl provider (loaded at
# run time, nothing to link).
build/bcd build/asan/bcd: HOST_LIBS += $(shell pkg-config --libs tss2-esys tss2-tctildr tss2-rc)

# The agent's files the unit tests reach, and what they link.
BCD_UNIT_NAMES     = $(basename $(notdir $(wildcard test/unit/test_bcd_*.c)))
BCD_UNIT_SRCS      = src/agent/core/attest_rules.c src/agent/core/backoff.c src/agent/core/clock.c \
	src/agent/core/fileio.c src/agent/core/job.c \
	src/agent/core/log.c src/agent/core/outcome.c src/agent/core/peer.c \
	src/agent/core/service_keys.c src/agent/core/signals.c src/agent/core/transport.c \
	src/agent/core/trust_bundles.c \
	src/agent/workload/attest.c src/agent/workload/refusals.c src/agent/workload/rules.c
# SSH, the host side: the signed document, the KRL, the host certificate's checks (test_bcd_ssh.c)
BCD_UNIT_SRCS     += src/agent/core/ssh_docs.c
BCD_UNIT_LIBS      = $(shell pkg-config --libs libsystemd) -lcurl -lm -pthread
# The session's SSH user certificate (test_bcd_ssh_user.c): its answer check and its delivery
# (delivery.c's checked directory open reaches producers/exec.c, which reaches the rest).
BCD_UNIT_SRCS     += src/agent/core/ssh_user.c src/agent/core/delivery.c src/agent/core/local_socket.c \
	src/agent/producers/exec.c src/agent/core/child.c src/agent/producers/join_token.c \
	src/agent/producers/evidence.c
BCD_TEST_OBJS      = $(BCD_UNIT_SRCS:%.c=build/testobj/%.o)
BCD_ASAN_TEST_OBJS = $(BCD_UNIT_SRCS:%.c=build/asan/testobj/%.o)

$(BCD_TEST_OBJS) $(BCD_ASAN_TEST_OBJS) $(BCD_UNIT_NAMES:%=build/testobj/test/unit/%.o) \
	$(BCD_UNIT_NAMES:%=build/asan/testobj/test/unit/%.o): HOST_CPPFLAGS += -Isrc/agent

# Static pattern rules: they take these binaries from mk/host.mk's build/unit/%.
$(BCD_UNIT_NAMES:%=build/unit/%): build/unit/%: build/testobj/test/unit/%.o $(BCD_TEST_OBJS) \
	$(HOST_TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^ $(HOST_TEST_LIBS) $(HOST_LIBS) $(BCD_UNIT_LIBS)

$(BCD_UNIT_NAMES:%=build/asan/unit/%): build/asan/unit/%: build/asan/testobj/test/unit/%.o \
	$(BCD_ASAN_TEST_OBJS) $(HOST_ASAN_TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) -o $@ $^ $(HOST_TEST_LIBS) $(HOST_LIBS) $(BCD_UNIT_LIBS)

# tpm-check (test/tools/tpm-check.c): what bcd's tpm producer makes, checked
# with the common library's TPM checks, for test/agent/tpm.t.
build/tpm-check: build/obj/test/tools/tpm-check.o $(HOST_COMMON_OBJS)
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^ $(HOST_LIBS)

# ocsp-verify (test/tools/ocsp-verify.c): bcd's OCSP and CRL checks
# (core/revcheck.c) on files, for test/agent/ocsp_verify.t; make agent-test
# runs the ASan + UBSan build, as it runs bcd's.
build/obj/test/tools/ocsp-verify.o build/asan/obj/test/tools/ocsp-verify.o: HOST_CPPFLAGS += -Isrc/agent
build/ocsp-verify: build/obj/test/tools/ocsp-verify.o build/obj/src/agent/core/revcheck.o
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^ -lssl -lcrypto
build/asan/ocsp-verify: build/asan/obj/test/tools/ocsp-verify.o build/asan/obj/src/agent/core/revcheck.o
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) -o $@ $^ -lssl -lcrypto

# wl-attack (test/tools/wl-attack.c): what test/agent/workload_attest.t does
# to the Workload API that Python cannot (an exe masquerade by prctl, a
# thread holding a connection unseen, descriptor and connection floods).
# No sanitizer: it remaps its own executable.
build/wl-attack: build/obj/test/tools/wl-attack.o
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^

# The tests run the sanitizer build of bcd through the real gateway against
# the installed extension (make && make install first).  workload_sds.t runs Envoy's
# stand-in, test/agent/sds_client.js, under node with test/node's npm packages
# (test/node/package-lock.json, installed by tools/install-deps: npm ci).
agent-test: build/asan/bcd build/bc-gateway build/tpm-check build/wl-attack build/asan/ocsp-verify \
	build/asan/bc-join-federate
	BCJ_BCD=$(CURDIR)/build/asan/bcd BCJ_GATEWAY=$(CURDIR)/build/bc-gateway \
	BCJ_TPM_CHECK=$(CURDIR)/build/tpm-check BCJ_WL_ATTACK=$(CURDIR)/build/wl-attack \
	BCJ_OCSP_VERIFY=$(CURDIR)/build/asan/ocsp-verify BCJ_FEDERATE=$(CURDIR)/build/asan/bc-join-federate \
	sh -c 'rc=0; mkdir -p build; prove --timer -j3 $(AGENT_WAIT) >build/agent-wait.log 2>&1 & w=$$!; \
		prove --timer -j$(BCJ_AGENT_PROVE_JOBS) $(AGENT_TESTS) || rc=1; \
		wait $$w || rc=1; cat build/agent-wait.log; \
		prove --timer $(AGENT_ALONE) || rc=1; exit $$rc'

# bcd setup (src/agent/cmd/setup.c) writes and compares bcd's user units: the
# files in src/agent/systemd, compiled in as C strings (one source for the
# units a source install writes and the ones the Debian package ships).
BCD_UNITS = src/agent/systemd/bcd.socket src/agent/systemd/bcd.service
BCD_UNIT_STR = sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/'

build/gen/bcd_units.c: $(BCD_UNITS) mk/agent.mk
	@mkdir -p $(dir $@)
	{ echo '/* generated by mk/agent.mk from $(BCD_UNITS); do not edit */'; \
	  echo 'const char bcd_unit_socket[] ='; $(BCD_UNIT_STR) src/agent/systemd/bcd.socket; echo ';'; \
	  echo 'const char bcd_unit_service[] ='; $(BCD_UNIT_STR) src/agent/systemd/bcd.service; echo ';'; \
	} >$@.tmp && mv $@.tmp $@

build/bcd: build/obj/build/gen/bcd_units.o
build/asan/bcd: build/asan/obj/build/gen/bcd_units.o
