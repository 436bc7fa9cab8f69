# mk/fuzz.mk: the libFuzzer targets of test/fuzz/ (docs/security.md,
# "Fuzzing").  Included by the top-level Makefile after mk/host.mk,
# mk/gateway.mk and mk/agent.mk, whose source lists it reuses.
#
#   make fuzz          build/fuzz/fuzz_<name> for every test/fuzz/fuzz_<name>.c
#   make fuzz-smoke    each target over its seed corpus once (no fuzzing)
#
# Built with Debian's clang and libFuzzer (clang-14 and libfuzzer-14-dev on
# Debian 12, clang-19 on Debian 13: tools/debian-release names the major):
# -fsanitize=fuzzer,address,undefined, objects under build/fuzz/obj/.  The
# programs' main() is renamed in this build (libFuzzer has its own), so a
# target can link every object of the program it exercises.  Runs:
# test/fuzz/run (the fuzz suite of test/run-all), test/fuzz-long.

FUZZ_LLVM     ?= $(or $(shell tools/debian-release 2>/dev/null | sed -n "s/.*llvm=\([0-9]*\).*/\1/p"),14)
FUZZ_CC       ?= clang-$(FUZZ_LLVM)
FUZZ_CFLAGS   ?= -std=c11 -O1 -g -Wall -Wextra -Werror -D_GNU_SOURCE
FUZZ_SAN       = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# BC_TEST_BUILD: the fuzz entry points of the programs (bcd_sessions_fuzz_line)
# and src/common's test-only functions are in this build only.
FUZZ_CPPFLAGS  = -Isrc/common -Itest/fuzz -MMD -MP $(shell pkg-config --cflags tss2-mu) \
	-DBC_FUZZ_DIR='"$(CURDIR)/test/fuzz"' -DBC_TEST_BUILD

FUZZ_SRCS     = $(sort $(wildcard test/fuzz/fuzz_*.c))
FUZZ_NAMES    = $(filter-out fuzz_common,$(basename $(notdir $(FUZZ_SRCS))))
FUZZ_BINS     = $(FUZZ_NAMES:%=build/fuzz/%)

# Which program's objects each target links besides src/common.
FUZZ_GW_NAMES    = fuzz_gw_addr fuzz_gw_http fuzz_gw_ocsp_get
FUZZ_AGENT_NAMES = fuzz_sock_line fuzz_verify fuzz_discovery_req fuzz_rollover fuzz_peer fuzz_producer_output

FUZZ_COMMON_OBJS = $(HOST_COMMON_SRCS:%.c=build/fuzz/obj/%.o) build/fuzz/obj/test/fuzz/fuzz_common.o
FUZZ_GW_OBJS     = $(GW_SRCS:%.c=build/fuzz/obj/%.o)
FUZZ_AGENT_OBJS  = $(HOST_AGENT_SRCS:%.c=build/fuzz/obj/%.o) build/fuzz/obj/build/gen/bcd_units.o $(WL_GEN_SRCS:%.c=build/fuzz/obj/%.o)

build/fuzz/obj/src/gateway/%.o build/fuzz/obj/test/fuzz/fuzz_gw_%.o: FUZZ_CPPFLAGS += -Isrc/gateway $(GW_CFLAGS)
build/fuzz/obj/src/agent/%.o build/fuzz/obj/test/fuzz/fuzz_sock_line.o build/fuzz/obj/test/fuzz/fuzz_verify.o build/fuzz/obj/test/fuzz/fuzz_discovery_req.o build/fuzz/obj/test/fuzz/fuzz_rollover.o build/fuzz/obj/test/fuzz/fuzz_peer.o build/fuzz/obj/test/fuzz/fuzz_producer_output.o: FUZZ_CPPFLAGS += -Isrc/agent
build/fuzz/obj/src/gateway/main.o build/fuzz/obj/src/agent/cmd/main.o: FUZZ_CPPFLAGS += -Dmain=bc_fuzz_program_main

.PHONY: fuzz fuzz-smoke

fuzz: $(FUZZ_BINS)

build/fuzz/obj/test/fuzz/fuzz_%.o: test/fuzz/fuzz_%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN) $(FUZZ_CPPFLAGS) -c $< -o $@

build/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN) $(FUZZ_CPPFLAGS) -c $< -o $@

# Static pattern rules: with a plain pattern rule make may fall back to the
# generic one below when a gateway object is not there yet (it was, once).
$(FUZZ_GW_NAMES:%=build/fuzz/%): build/fuzz/%: build/fuzz/obj/test/fuzz/%.o $(FUZZ_GW_OBJS) $(FUZZ_COMMON_OBJS)
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(GW_LIBS) $(HOST_LIBS)

$(FUZZ_AGENT_NAMES:%=build/fuzz/%): build/fuzz/fuzz_%: build/fuzz/obj/test/fuzz/fuzz_%.o $(FUZZ_AGENT_OBJS) $(FUZZ_COMMON_OBJS)
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(HOST_LIBS) -lcurl -lm $(shell pkg-config --libs libsystemd) -pthread $(shell pkg-config --libs tss2-esys tss2-tctildr tss2-rc) $(WL_LIBS)

build/fuzz/fuzz_%: build/fuzz/obj/test/fuzz/fuzz_%.o $(FUZZ_COMMON_OBJS)
	$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(HOST_LIBS)

# make-corpus.sh's helper: seeds sealed to the targets' fixed keys.
build/fuzz/seed-tool: build/fuzz/obj/test/fuzz/seed-tool.o $(FUZZ_COMMON_OBJS)
	$(FUZZ_CC) $(FUZZ_SAN) -o $@ $^ $(HOST_LIBS)

build/fuzz/obj/test/fuzz/seed-tool.o: test/fuzz/seed-tool.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN) $(FUZZ_CPPFLAGS) -c $< -o $@

fuzz-smoke: $(FUZZ_BINS)
	@rc=0; for t in $(FUZZ_NAMES); do echo "== $$t"; \
		build/fuzz/$$t -runs=0 test/fuzz/corpus/$$t >/dev/null 2>build/fuzz/$$t.smoke.log \
		|| { tail -30 build/fuzz/$$t.smoke.log; rc=1; }; done; exit $$rc

.PRECIOUS: build/fuzz/obj/%.o

-include $(wildcard build/fuzz/obj/*/*.d build/fuzz/obj/*/*/*.d build/fuzz/obj/*/*/*/*.d)
