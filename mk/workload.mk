# mk/workload.mk: bcd's SPIFFE Workload API (src/agent/workload/): the
# messages of workload.proto and of sds.proto (Envoy's SDS v3: ours too,
# written from upstream's numbers) made by protoc-c at build time into
# build/gen/workload/, with google/protobuf/struct.proto
# (ValidateJWTSVIDResponse.claims, Node.metadata) and any.proto (SDS's
# resources) from python3-grpc-tools;
# linked against gRPC's C core and protobuf-c.  Included by the top-level
# Makefile after mk/host.mk (which builds src/agent/workload/*.c into bcd)
# and before mk/fuzz.mk.

WL_PROTO     = src/agent/workload/workload.proto src/agent/workload/sds.proto
WL_WKT      ?= /usr/lib/python3/dist-packages/grpc_tools/_proto
WL_GEN_DIR   = build/gen/workload
WL_GEN_SRCS  = $(WL_GEN_DIR)/workload.pb-c.c $(WL_GEN_DIR)/sds.pb-c.c \
	$(WL_GEN_DIR)/google/protobuf/struct.pb-c.c $(WL_GEN_DIR)/google/protobuf/any.pb-c.c
WL_GEN_HDRS  = $(WL_GEN_SRCS:%.c=%.h)
# not pkg-config --libs grpc: its Requires: drag in absl, re2 and cares, which
# come in anyway as libgrpc's own DT_NEEDED
WL_LIBS      = -lgrpc -lgpr -lprotobuf-c

$(WL_GEN_SRCS) $(WL_GEN_HDRS) &: $(WL_PROTO) mk/workload.mk
	@mkdir -p $(WL_GEN_DIR)
	protoc-c -Isrc/agent/workload -I$(WL_WKT) --c_out=$(WL_GEN_DIR) workload.proto sds.proto \
		google/protobuf/struct.proto google/protobuf/any.proto

# every object of src/agent/workload/ (internal.h includes the messages)
WL_SRCS      = $(filter src/agent/workload/%,$(HOST_AGENT_SRCS))
WL_OBJS      = $(WL_SRCS:%.c=build/obj/%.o) $(WL_SRCS:%.c=build/asan/obj/%.o) \
	$(WL_SRCS:%.c=build/fuzz/obj/%.o) $(WL_SRCS:%.c=build/testobj/%.o) \
	$(WL_SRCS:%.c=build/asan/testobj/%.o)
# generated code: its own flags (not -Werror), unless HOST_CFLAGS comes from the
# command line (debian/rules); protoc-c 1.4.1's output is clean under -Wall -Wextra -Werror
WL_GEN_OBJS  = $(WL_GEN_SRCS:%.c=build/obj/%.o)
WL_ASAN_GEN_OBJS = $(WL_GEN_SRCS:%.c=build/asan/obj/%.o)

$(WL_OBJS): $(WL_GEN_HDRS)
$(WL_OBJS): HOST_CPPFLAGS += -I$(WL_GEN_DIR)
$(WL_OBJS): FUZZ_CPPFLAGS += -I$(WL_GEN_DIR)
$(WL_GEN_OBJS) $(WL_ASAN_GEN_OBJS): HOST_CFLAGS = -std=gnu11 -O2 -g -D_GNU_SOURCE
$(WL_GEN_OBJS) $(WL_ASAN_GEN_OBJS): HOST_CPPFLAGS += -I$(WL_GEN_DIR)
$(WL_GEN_SRCS:%.c=build/fuzz/obj/%.o): FUZZ_CFLAGS = -std=gnu11 -O1 -g -D_GNU_SOURCE
$(WL_GEN_SRCS:%.c=build/fuzz/obj/%.o): FUZZ_CPPFLAGS += -I$(WL_GEN_DIR)

build/bcd: $(WL_GEN_OBJS)
build/asan/bcd: $(WL_ASAN_GEN_OBJS)
build/bcd build/asan/bcd: HOST_LIBS += $(WL_LIBS)
