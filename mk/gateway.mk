# mk/gateway.mk: bc-gateway, the HTTPS relay in front of the database.
# Included by the top-level Makefile after mk/host.mk; reuses its pattern
# rules (build/obj/%.o, build/asan/obj/%.o) and HOST_* variables.
#
#   make gateway        build/bc-gateway
#   make gateway-test   build/asan/bc-gateway (ASan + UBSan), then the TAP
#                       scripts test/gateway/*.t through prove
#
# src/common is linked as an archive (build/obj/libbc_common.a and its ASan and
# test variants), so the gateway takes only the members it calls into: the OCSP
# request parser (src/common/ocsp.c, issue 45) and what that file needs.
#
# The gateway's cmocka unit tests (test/unit/test_gw_*.c: the route table,
# the document cache's freshness decision, the status mapping, the rate
# limiter, the client address and the large-body budget) are part of make unit and make unit-asan
# (mk/host.mk); they link every gateway object but main.o.

GW_SRCS      = $(sort $(wildcard src/gateway/*.c))
GW_OBJS      = $(GW_SRCS:%.c=build/obj/%.o)
GW_ASAN_OBJS = $(GW_SRCS:%.c=build/asan/obj/%.o)
# src/common as an archive: the gateway takes only the members it calls into
# (the OCSP request parser, src/common/ocsp.c, since issue 45, and what that needs)
GW_COMMON_LIB      = build/obj/libbc_common.a
GW_ASAN_COMMON_LIB = build/asan/obj/libbc_common.a
GW_PKGS      = libevent libevent_openssl libpq openssl jansson
GW_CFLAGS   := $(shell pkg-config --cflags $(GW_PKGS) 2>/dev/null)
GW_LIBS     := $(shell pkg-config --libs $(GW_PKGS) 2>/dev/null) -lm
GW_SLOW      = test/gateway/crl.t test/gateway/ocsp.t test/gateway/anchor.t test/gateway/limits.t
GW_TESTS     = $(GW_SLOW) $(filter-out $(GW_SLOW),$(sort $(wildcard test/gateway/*.t)))

.PHONY: gateway gateway-test

gateway: build/bc-gateway

$(GW_OBJS) $(GW_ASAN_OBJS): HOST_CPPFLAGS += $(GW_CFLAGS)

GW_UNIT_NAMES      = $(basename $(notdir $(wildcard test/unit/test_gw_*.c)))
GW_TEST_OBJS       = $(filter-out %/main.o,$(GW_SRCS:%.c=build/testobj/%.o)) build/testobj/libbc_common.a
GW_ASAN_TEST_OBJS  = $(filter-out %/main.o,$(GW_SRCS:%.c=build/asan/testobj/%.o)) build/asan/testobj/libbc_common.a

$(filter %.o,$(GW_TEST_OBJS) $(GW_ASAN_TEST_OBJS)): HOST_CPPFLAGS += $(GW_CFLAGS)

build/obj/libbc_common.a: $(HOST_COMMON_OBJS)
build/asan/obj/libbc_common.a: $(HOST_ASAN_COMMON_OBJS)
build/testobj/libbc_common.a: $(HOST_TEST_COMMON_OBJS)
build/asan/testobj/libbc_common.a: $(HOST_ASAN_TEST_COMMON_OBJS)
build/obj/libbc_common.a build/asan/obj/libbc_common.a build/testobj/libbc_common.a build/asan/testobj/libbc_common.a:
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^
$(GW_UNIT_NAMES:%=build/testobj/test/unit/%.o) $(GW_UNIT_NAMES:%=build/asan/testobj/test/unit/%.o): \
	HOST_CPPFLAGS += -Isrc/gateway $(GW_CFLAGS)

# Static pattern rules: they take these binaries from mk/host.mk's build/unit/%.
$(GW_UNIT_NAMES:%=build/unit/%): build/unit/%: build/testobj/test/unit/%.o $(GW_TEST_OBJS)
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) -o $@ $^ $(HOST_TEST_LIBS) $(GW_LIBS)

$(GW_UNIT_NAMES:%=build/asan/unit/%): build/asan/unit/%: build/asan/testobj/test/unit/%.o $(GW_ASAN_TEST_OBJS)
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) -o $@ $^ $(HOST_TEST_LIBS) $(GW_LIBS)

build/bc-gateway: $(GW_OBJS) $(GW_COMMON_LIB)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_LDFLAGS) -o $@ $^ $(GW_LIBS)

build/asan/bc-gateway: $(GW_ASAN_OBJS) $(GW_ASAN_COMMON_LIB)
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) -o $@ $^ $(GW_LIBS)

# The tests join through the real agent (bcd) against the installed extension
# (make install).  The agent is not rebuilt here: build it with `make programs`
# (or point BCJ_BCD at one), so work in progress on the agent cannot break or
# delete what the gateway's tests use.
BCJ_BCD ?= $(firstword $(wildcard $(CURDIR)/build/bcd $(CURDIR)/build/asan/bcd))

# oidc.t's relying party (test/gateway/oidc-verify): Go with Debian's go-oidc
# and go-jose only, no module proxy (GO111MODULE=off, GOPATH of the -dev packages).
build/oidc-verify: test/gateway/oidc-verify/main.go
	@mkdir -p $(dir $@)
	GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$(CURDIR)/build/gocache GOFLAGS= \
		go build -o $@ $<

gateway-test: build/asan/bc-gateway build/oidc-verify
	@test -n "$(BCJ_BCD)" && test -x "$(BCJ_BCD)" || \
		{ echo "gateway-test: no bcd; run make programs first (or set BCJ_BCD)"; exit 1; }
	BCJ_GATEWAY=$(CURDIR)/build/asan/bc-gateway BCJ_BCD=$(BCJ_BCD) prove --timer -j$(BCJ_PROVE_JOBS) $(GW_TESTS)
