# mk/host.mk: the host programs (bcd, jose-tool), the cmocka unit tests and
# their sanitizer build.  Included at the end of the top-level Makefile, after
# PGXS, so every variable here is prefixed HOST_ and never touches PGXS's.
#
#   make host        build/bcd, build/jose-tool, build/ssh-tool
#   make unit        build and run the cmocka unit tests
#   make unit-asan   the same, plus bcd and jose-tool, with ASan + UBSan under build/asan/
#   make interop     jwcrypto interop against build/jose-tool and build/asan/bcd
#
# Objects go under build/obj/ (build/asan/obj/ for the sanitizer build), never
# next to the sources: PGXS compiles src/common/*.o there with -fPIC.

HOST_CC       ?= cc
HOST_CFLAGS   ?= -std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE
# HOST_LDFLAGS: linker flags of bcd and bc-gateway (debian/rules passes dpkg-buildflags's)
HOST_LDFLAGS  ?=
HOST_TSS2_MU  := $(shell pkg-config --libs tss2-mu)
HOST_CPPFLAGS  = -Isrc/common -MMD -MP $(shell pkg-config --cflags tss2-mu)
HOST_LIBS      = -lssl -lcrypto -ljansson $(HOST_TSS2_MU)
HOST_TEST_LIBS = -lcmocka
HOST_SAN       = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
HOST_PYTHON   ?= /usr/bin/python3

HOST_COMMON_SRCS = $(sort $(wildcard src/common/*.c))
# bcd: its subcommands (cmd/), the concerns they run on (core/) and the
# attestors' producers (producers/); docs/design.md maps the files.
HOST_AGENT_DIRS  = src/agent/cmd src/agent/core src/agent/producers src/agent/workload
HOST_AGENT_SRCS  = $(sort $(foreach d,$(HOST_AGENT_DIRS),$(wildcard $(d)/*.c)))
HOST_JOSE_SRCS   = test/tools/jose-tool.c
HOST_SSH_SRCS    = test/tools/ssh-tool.c
HOST_UNIT_SRCS   = $(sort $(wildcard test/unit/test_*.c))
HOST_UNIT_NAMES  = $(basename $(notdir $(HOST_UNIT_SRCS)))

HOST_COMMON_OBJS = $(HOST_COMMON_SRCS:%.c=build/obj/%.o)
HOST_AGENT_OBJS  = $(HOST_AGENT_SRCS:%.c=build/obj/%.o)
HOST_JOSE_OBJS   = $(HOST_JOSE_SRCS:%.c=build/obj/%.o)
HOST_SSH_OBJS    = $(HOST_SSH_SRCS:%.c=build/obj/%.o)
HOST_UNIT_BINS   = $(HOST_UNIT_NAMES:%=build/unit/%)

# The unit tests' own build of src/common and of themselves, with BC_TEST_BUILD:
# what only tests use (bc_cert_issue, the reference issuer; bc_cert_verify_chain;
# bc_cloud_pkcs7_check; bc_ossl_cache_release) is in no program's objects.
HOST_TEST_CPPFLAGS     = -DBC_TEST_BUILD
HOST_TEST_COMMON_OBJS  = $(HOST_COMMON_SRCS:%.c=build/testobj/%.o)
HOST_ASAN_TEST_COMMON_OBJS = $(HOST_COMMON_SRCS:%.c=build/asan/testobj/%.o)

HOST_ASAN_COMMON_OBJS = $(HOST_COMMON_SRCS:%.c=build/asan/obj/%.o)
HOST_ASAN_AGENT_OBJS  = $(HOST_AGENT_SRCS:%.c=build/asan/obj/%.o)
HOST_ASAN_JOSE_OBJS   = $(HOST_JOSE_SRCS:%.c=build/asan/obj/%.o)
HOST_ASAN_UNIT_BINS   = $(HOST_UNIT_NAMES:%=build/asan/unit/%)

# bcd's files include each other as "core/store.h", "producers/producer.h".
$(HOST_AGENT_OBJS) $(HOST_ASAN_AGENT_OBJS): HOST_CPPFLAGS += -Isrc/agent

.PHONY: host unit unit-asan interop

host: build/bcd build/jose-tool build/ssh-tool

build/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_CPPFLAGS) -c $< -o $@

build/asan/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) $(HOST_CPPFLAGS) -c $< -o $@

build/testobj/%.o: %.c
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_CPPFLAGS) $(HOST_TEST_CPPFLAGS) -c $< -o $@

build/asan/testobj/%.o: %.c
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) $(HOST_CPPFLAGS) $(HOST_TEST_CPPFLAGS) -c $< -o $@

build/bcd: $(HOST_AGENT_OBJS) $(HOST_COMMON_OBJS)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_LDFLAGS) -o $@ $^ $(HOST_LIBS)

build/jose-tool: $(HOST_JOSE_OBJS) $(HOST_COMMON_OBJS)
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^ $(HOST_LIBS)

# ssh-tool: OpenSSH certificates and KRLs of src/common/ssh.c (test/tap/ssh_codec.t).
build/ssh-tool: $(HOST_SSH_OBJS) $(HOST_COMMON_OBJS)
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^ $(HOST_LIBS)

build/unit/%: build/testobj/test/unit/%.o $(HOST_TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^ $(HOST_TEST_LIBS) $(HOST_LIBS)

build/asan/bcd: $(HOST_ASAN_AGENT_OBJS) $(HOST_ASAN_COMMON_OBJS)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) -o $@ $^ $(HOST_LIBS)

build/asan/jose-tool: $(HOST_ASAN_JOSE_OBJS) $(HOST_ASAN_COMMON_OBJS)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) -o $@ $^ $(HOST_LIBS)

build/asan/unit/%: build/asan/testobj/test/unit/%.o $(HOST_ASAN_TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) -o $@ $^ $(HOST_TEST_LIBS) $(HOST_LIBS)

# Run every unit test binary; report failure after all of them ran.  First,
# the extension's ownership rule (src/ext/ossl.c): nothing a memory context
# owns is freed by hand.
unit: $(HOST_UNIT_BINS)
	@rc=0; $(HOST_PYTHON) test/tools/ownership-check src/ext || rc=1; \
		for t in $(HOST_UNIT_BINS); do echo "== $$t"; ./$$t || rc=1; done; exit $$rc

unit-asan: $(HOST_ASAN_UNIT_BINS) build/asan/bcd build/asan/jose-tool
	@rc=0; $(HOST_PYTHON) test/tools/ownership-check src/ext || rc=1; \
		for t in $(HOST_ASAN_UNIT_BINS); do echo "== $$t"; \
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
		./$$t || rc=1; done; exit $$rc

interop: build/jose-tool build/asan/bcd
	$(HOST_PYTHON) test/interop/jose_interop.py build/jose-tool
	ASAN_OPTIONS=detect_leaks=1 $(HOST_PYTHON) test/interop/bcd_interop.py build/asan/bcd

.PRECIOUS: build/obj/%.o build/asan/obj/%.o build/testobj/%.o build/asan/testobj/%.o

-include $(wildcard build/obj/*/*.d build/obj/*/*/*.d build/obj/*/*/*/*.d)
-include $(wildcard build/asan/obj/*/*.d build/asan/obj/*/*/*.d build/asan/obj/*/*/*/*.d)
-include $(wildcard build/testobj/*/*.d build/testobj/*/*/*.d build/testobj/*/*/*/*.d)
-include $(wildcard build/asan/testobj/*/*.d build/asan/testobj/*/*/*.d build/asan/testobj/*/*/*/*.d)
