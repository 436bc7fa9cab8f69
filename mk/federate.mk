# mk/federate.mk: bc-join-federate, the fetcher of federated trust domains'
# bundles (#46; src/federate/main.c).  Included by the top-level Makefile
# after mk/host.mk and mk/gateway.mk; reuses their pattern rules and the
# src/common archive (it takes the bundle reader, src/common/spiffe_bundle.c,
# and what that needs).
#
#   make federate       build/bc-join-federate
#   build/asan/bc-join-federate   the same with ASan + UBSan (test/tap/federation.t)

FED_SRCS      = $(sort $(wildcard src/federate/*.c))
FED_OBJS      = $(FED_SRCS:%.c=build/obj/%.o)
FED_ASAN_OBJS = $(FED_SRCS:%.c=build/asan/obj/%.o)
FED_PKGS      = libcurl libpq openssl jansson
FED_CFLAGS   := $(shell pkg-config --cflags $(FED_PKGS) 2>/dev/null)
FED_LIBS     := $(shell pkg-config --libs $(FED_PKGS) 2>/dev/null)

.PHONY: federate

federate: build/bc-join-federate

# test/tap/federation.t runs the sanitizer build when there is one: CI's make world makes it.
world: build/asan/bc-join-federate

$(FED_OBJS) $(FED_ASAN_OBJS): HOST_CPPFLAGS += $(FED_CFLAGS)

build/bc-join-federate: $(FED_OBJS) $(GW_COMMON_LIB)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_LDFLAGS) -o $@ $^ $(FED_LIBS)

build/asan/bc-join-federate: $(FED_ASAN_OBJS) $(GW_ASAN_COMMON_LIB)
	@mkdir -p $(dir $@)
	$(HOST_CC) $(HOST_CFLAGS) $(HOST_SAN) -o $@ $^ $(FED_LIBS)
