# mk/agent.mk: what the agent daemon (bcd run) adds to the host build, and
# its end-to-end tests.  Included by the top-level Makefile after
# mk/host.mk, whose rules build bcd from every .c in src/agent/cmd, core and
# producers.
#
#   make agent-test   build/asan/bcd (ASan + UBSan), the gateway, then the
#                     TAP scripts test/agent/*.t through prove

AGENT_TESTS = $(sort $(wildcard test/agent/*.t))

.PHONY: agent-test

# bcd speaks HTTPS to the gateway through libcurl (OpenSSL flavour), takes its
# socket from systemd (libsystemd sd_listen_fds) and serves it from threads.
build/bcd build/asan/bcd: HOST_LIBS += -lcurl -lm $(shell pkg-config --libs libsystemd) -pthread
# The tpm attestor's producer talks ESAPI over a TCTI (core/tpm_esys.c); its
# node key lives in the TPM through Debian's tpm2-openssl provider (loaded at
# run time, nothing to link).
build/bcd build/asan/bcd: HOST_LIBS += $(shell pkg-config --libs tss2-esys tss2-tctildr tss2-rc)

# tpm-check (test/tools/tpm-check.c): what bcd's tpm producer makes, checked
# with the common library's TPM checks, for test/agent/tpm.t.
build/tpm-check: build/obj/test/tools/tpm-check.o $(HOST_COMMON_OBJS)
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^ $(HOST_LIBS)

# The tests run the sanitizer build of bcd through the real gateway against
# the installed extension (make && make install first).
agent-test: build/asan/bcd build/bc-gateway build/tpm-check
	BCJ_BCD=$(CURDIR)/build/asan/bcd BCJ_GATEWAY=$(CURDIR)/build/bc-gateway \
	BCJ_TPM_CHECK=$(CURDIR)/build/tpm-check prove --timer $(AGENT_TESTS)
