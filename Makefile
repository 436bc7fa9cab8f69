# bc_join: the PostgreSQL extension (PGXS) plus the host programs (bcd,
# bc-gateway, tools).
#
#   make                build the extension (as pgvector's and pg_cron's make does)
#   make install        install the extension into the PostgreSQL found by pg_config
#   make programs       build the host programs: build/bcd, build/bc-gateway,
#                       build/bc-join-federate, build/jose-tool
#                       (gRPC, protobuf-c, curl, systemd, TSS, libevent, libpq)
#   make world          both
#   make installcheck   the pg_regress suites (needs build/bcd: built if missing)
#   make check-all      every test (what .ci/run and the README run); see test/run-all

EXTENSION   = bc_join
# The one place a version is written: bc_join.control's default_version (the
# library, the install script and the Debian packages take it from there).
EXTVERSION := $(shell sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" $(dir $(lastword $(MAKEFILE_LIST)))bc_join.control)
MODULE_big  = bc_join

COMMON_SRCS = $(sort $(wildcard src/common/*.c))
EXT_SRCS    = $(sort $(wildcard src/ext/*.c src/ext/attestors/*.c))
OBJS        = $(EXT_SRCS:.c=.o) $(COMMON_SRCS:.c=.o)

# sql/bc_join.sql is the source of the current version's install script
# (copied, as pgvector does); every version is reached from an older one by
# the upgrade scripts sql/bc_join--A--B.sql; the released versions' install
# scripts are kept as they were released in sql/released/ (the bases of the
# upgrade checks, and of databases created at those versions), 0.1.0's at
# sql/bc_join--0.1.0.sql, the path the contract names, frozen by
# sql/released.sha256 (docs/development.md, "Changing the schema").
DATA        = sql/$(EXTENSION)--0.1.0.sql $(sort $(wildcard sql/released/$(EXTENSION)--*.sql)) $(sort $(wildcard sql/$(EXTENSION)--*--*.sql))
DATA_built  = sql/$(EXTENSION)--$(EXTVERSION).sql
PGFILEDESC  = "bc_join - JoinService inside PostgreSQL"

# make installcheck: the pg_regress suites on a temporary instance of the
# installed PostgreSQL (bc_join preloaded by test/regress.conf; keys made by
# test/installcheck, which as root runs pg_regress as postgres), results and
# regression.diffs under build/installcheck/.  One suite: REGRESS=regress_admin.
# make installcheck BCJ_REGRESS_RUNNING=1: against the running server that the
# PG* environment names instead (what test/run-all does, with its REGRESS_OPTS).
# The suites are test/regress/sql/regress_*.sql with their outputs in
# expected/ at the top (the layout of ARCHITECTURE.md), which
# test/regress/expected links to (pg_regress --inputdir=test/regress).
REGRESS      = $(sort $(basename $(notdir $(wildcard test/regress/sql/regress_*.sql))))
BCJ_REGRESS_DIR = $(CURDIR)/build/installcheck
ifeq ($(BCJ_REGRESS_RUNNING),)
REGRESS_OPTS = --load-extension=bc_join --outputdir=$(BCJ_REGRESS_DIR) \
	--temp-instance=$(BCJ_REGRESS_DIR)/instance \
	--temp-config=$(CURDIR)/test/regress.conf --temp-config=$(BCJ_REGRESS_DIR)/keys.conf
else
REGRESS_OPTS = --load-extension=bc_join
endif

PG_CPPFLAGS = -Isrc/common -Isrc/ext -DBC_EXTVERSION='"$(EXTVERSION)"'
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

# The library names the SQL version it was built for (src/ext/version.c):
# rebuilt when default_version moves.
src/ext/version.o: bc_join.control

# PGXS's pg_regress_installcheck, run through test/installcheck (keys, and the
# postgres OS user as root).
pg_regress_installcheck = $(CURDIR)/test/installcheck $(BCJ_REGRESS_DIR) \
	$(top_builddir)/src/test/regress/pg_regress --inputdir=$(srcdir)/test/regress --bindir='$(bindir)' \
	$(pg_regress_locale_flags) $(EXTRA_REGRESS_OPTS)

sql/$(EXTENSION)--$(EXTVERSION).sql: sql/$(EXTENSION).sql bc_join.control
	cp $< $@

# PGXS tracks no header dependencies: every object of the extension depends
# on the headers the extension's files share (a struct changed in one would
# otherwise leave objects built against the old layout).
$(OBJS): $(wildcard src/ext/*.h src/common/*.h)

# The TAP suites (make gateway-test, make agent-test, test/run-all's tap)
# run this many scripts at once: most of their time is waiting (for a
# certificate to expire, a renewal, a retry), and each script starts its own
# processes on ports of its own.  Three at once: at two, both cores were
# busy about 60% of the tap suite's time and the whole test command stood at
# 845-857 s of its 900 in a fresh tree.  BCJ_PROVE_JOBS=1 runs them one by one.
BCJ_PROVE_JOBS ?= 3

# Host programs (bcd, test tools, unit tests, sanitizer builds).
include mk/host.mk
include mk/gateway.mk
include mk/federate.mk
include mk/agent.mk
include mk/workload.mk
include mk/fuzz.mk

# `make` is PGXS's `all`: the extension alone.  The programs are built once,
# not once per PostgreSQL major (debian/rules); the test targets build what
# they run (mk/*.mk).
.PHONY: programs world
programs: host gateway federate
world: all programs

# regress_input makes its requests with bcd: build/bcd, unless the caller
# names one in BCJ_BCD (test/installcheck takes BCJ_BCD, else build/asan/bcd,
# else build/bcd).
ifeq ($(filter environment command%,$(origin BCJ_BCD)),)
installcheck: build/bcd
endif

.PHONY: check-all
check-all:
	bash test/run-all
