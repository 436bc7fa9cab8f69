# bc_join: the PostgreSQL extension (PGXS) plus the host programs (bcd, tools).
#
#   make                build the extension and the host programs
#   make install        install the extension into the PostgreSQL found by pg_config
#   make check-all      every test (what .ci/run and the README run); see test/run-all

EXTENSION   = bc_join
EXTVERSION  = 0.1.0
MODULE_big  = bc_join

COMMON_SRCS = $(sort $(wildcard src/common/*.c))
EXT_SRCS    = $(sort $(wildcard src/ext/*.c src/ext/attestors/*.c))
OBJS        = $(EXT_SRCS:.c=.o) $(COMMON_SRCS:.c=.o)

DATA        = sql/$(EXTENSION)--$(EXTVERSION).sql
PGFILEDESC  = "bc_join - JoinService inside PostgreSQL"

REGRESS      = $(sort $(basename $(notdir $(wildcard sql/regress_*.sql))))
REGRESS_OPTS = --inputdir=. --load-extension=bc_join

PG_CPPFLAGS = -Isrc/common -Isrc/ext
# TPM structures (src/common/tpm.c) are unmarshalled with tpm2-tss's libtss2-mu.
TSS2_MU_CFLAGS := $(shell pkg-config --cflags tss2-mu)
TSS2_MU_LIBS   := $(shell pkg-config --libs tss2-mu)
PG_CPPFLAGS += $(TSS2_MU_CFLAGS)
SHLIB_LINK  = -lssl -lcrypto -ljansson $(TSS2_MU_LIBS)
# The extension follows PostgreSQL's warning set; CI adds -Werror.
PG_CFLAGS   = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare $(BC_WERROR)

EXTRA_CLEAN = build

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Host programs (bcd, test tools, unit tests, sanitizer builds).
include mk/host.mk
include mk/gateway.mk
include mk/agent.mk

all: host
all: gateway

.PHONY: check-all
check-all:
	bash test/run-all
