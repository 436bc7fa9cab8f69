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

# The tests run the sanitizer build of bcd through the real gateway against
# the installed extension (make && make install first).
agent-test: build/asan/bcd build/bc-gateway
	BCJ_BCD=$(CURDIR)/build/asan/bcd BCJ_GATEWAY=$(CURDIR)/build/bc-gateway prove $(AGENT_TESTS)
