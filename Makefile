# SPDX-License-Identifier: GPL-2.0-or-later
# kvmstats: `make` builds build/kvmstats, `make check` runs the tests that
# need nothing (no KVM, no root, no network), `make test` runs every test.
# Only `make deps` and the test targets install Debian packages (apt-get,
# as root); nothing else touches the system. Build options, install
# layout and targets are described in docs/packaging.md.

VERSION := 0.1.0
SOVER := 0
O ?= build
SAN ?=
PKG_CONFIG ?= pkg-config

# The install layout, with the GNU names; every directory can be given on
# the command line (PREFIX and prefix are the same). LIBDIR is the
# multiarch directory when the compiler knows one (Debian and derivatives).
PREFIX ?= /usr/local
prefix ?= $(PREFIX)
exec_prefix ?= $(prefix)
DESTDIR ?=
MULTIARCH ?= $(shell $(CC) -print-multiarch 2>/dev/null)
BINDIR ?= $(exec_prefix)/bin
LIBDIR ?= $(exec_prefix)/lib$(if $(MULTIARCH),/$(MULTIARCH))
LIBEXECDIR ?= $(exec_prefix)/libexec
INCLUDEDIR ?= $(prefix)/include
DATADIR ?= $(prefix)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/kvmstats
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SYSCONFDIR ?= $(if $(filter /usr,$(prefix)),/etc,$(prefix)/etc)
# systemd's own directories for /usr; under another prefix, beside it.
SYSTEMDDIR ?= $(if $(filter /usr,$(prefix)),/usr/lib,$(prefix)/lib)
UNITDIR ?= $(SYSTEMDDIR)/systemd/system
SYSUSERSDIR ?= $(SYSTEMDDIR)/sysusers.d
TMPFILESDIR ?= $(SYSTEMDDIR)/tmpfiles.d

# The architecture built for: attach and the test VMs are x86_64 only.
ARCH ?= $(firstword $(subst -, ,$(shell $(CC) -dumpmachine 2>/dev/null)))

# libvirt, the one optional dependency: WITH_LIBVIRT=auto (link it when
# pkg-config finds it), yes (required: fail without it) or no.
WITH_LIBVIRT ?= auto
HAVE_PC_LIBVIRT := $(shell $(PKG_CONFIG) --exists libvirt 2>/dev/null && echo 1)
ifeq ($(WITH_LIBVIRT),yes)
ifneq ($(HAVE_PC_LIBVIRT),1)
$(error WITH_LIBVIRT=yes, but pkg-config finds no libvirt (libvirt-dev))
endif
USE_LIBVIRT := 1
else ifeq ($(WITH_LIBVIRT),auto)
USE_LIBVIRT := $(HAVE_PC_LIBVIRT)
else ifneq ($(WITH_LIBVIRT),no)
$(error WITH_LIBVIRT must be auto, yes or no, not '$(WITH_LIBVIRT)')
endif

# The library needs json-c (QMP), zlib (log CRCs; the planner's zlib
# sample), libzstd (the planner's zstd sample) and, when chosen, libvirt;
# the CLI adds what its sinks use.
LIB_PKGS := json-c zlib libzstd $(if $(USE_LIBVIRT),libvirt)
PKGS := $(LIB_PKGS) ncursesw libmicrohttpd libcap-ng zlib yaml-0.1 libcrypt

# Flags: the project's own (language, warnings, defines) first, then the
# caller's CPPFLAGS and CFLAGS, so that a distribution's -O, hardening and
# debug flags win over OPTFLAGS (the default optimisation, used when the
# caller gives none: DEB_BUILD_OPTIONS=noopt's -O0 comes after it).
OPTFLAGS ?= -O2 -g
KS_CFLAGS := $(OPTFLAGS) -std=gnu11 -Wall -Wextra -Wshadow \
	-Wno-missing-field-initializers \
	-D_GNU_SOURCE -DKVMSTATS_VERSION='"$(VERSION)"' -Iinclude \
	$(if $(USE_LIBVIRT),-DHAVE_LIBVIRT=1) $(CPPFLAGS) $(CFLAGS)
KS_LDFLAGS := $(LDFLAGS)
ifneq ($(SAN),)
KS_CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
KS_LDFLAGS += -fsanitize=$(SAN)
endif
LIB_CFLAGS = $(KS_CFLAGS) -fPIC -fvisibility=hidden \
	     $(shell $(PKG_CONFIG) --cflags $(LIB_PKGS) 2>/dev/null)
LIB_LIBS = $(shell $(PKG_CONFIG) --libs $(LIB_PKGS) 2>/dev/null) -lpthread -lm
CLI_CFLAGS = $(KS_CFLAGS) $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
CLI_LIBS = $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null) -lpthread -lm

LIB_SRC := $(wildcard lib/*.c)
CLI_SRC := $(wildcard cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(O)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(O)/%.o)
PUB_HDRS := $(wildcard include/*.h)
HDRS := $(PUB_HDRS) $(wildcard lib/*.h cli/*.h)

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(O)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(O)/bench/%)

# Nothing here installs packages: `make deps` does, on request.
all: build

# attach's injection and the test VMs (a 32-bit guest and its VMM) are
# x86_64 only; elsewhere the library and CLI are built without them.
ifeq ($(ARCH),x86_64)
TEST_VMS := $(O)/tinyvmm $(O)/mbguest.elf
endif
# What `install` installs (tinyvmm is `kvmstats demo`'s VMM); `build` adds
# the test guest.
PROGRAMS := $(O)/kvmstats $(O)/libkvmstats.so $(O)/libkvmstats.a \
	$(O)/libkvmstats.pc $(filter %/tinyvmm,$(TEST_VMS))
build: $(PROGRAMS) $(TEST_VMS)
programs: $(PROGRAMS)

deps:
	@scripts/deps.sh build

test-deps:
	@scripts/deps.sh test

$(O)/lib/%.o: lib/%.c $(HDRS) | $(O)/lib
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(O)/cli/%.o: cli/%.c $(HDRS) | $(O)/cli
	$(CC) $(CLI_CFLAGS) -Icli -c $< -o $@

# The git commit in kvmstats_build_info and `version --json`: the header
# is rewritten only when the commit changes (none outside a git tree).
$(O)/cli/build_commit.h: FORCE | $(O)/cli
	@c=$$(git -C $(CURDIR) describe --always --dirty 2>/dev/null); \
	echo "#define KVMSTATS_GIT_COMMIT \"$$c\"" | cmp -s - $@ || \
	echo "#define KVMSTATS_GIT_COMMIT \"$$c\"" > $@
$(O)/cli/prom_process.o: $(O)/cli/build_commit.h
$(O)/cli/prom_process.o: CLI_CFLAGS += -I$(O)/cli -DHAVE_BUILD_COMMIT

$(O)/libkvmstats.a: $(LIB_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

$(O)/libkvmstats.map: $(wildcard include/*.h) scripts/mkmap.sh
	@mkdir -p $(@D)
	scripts/mkmap.sh $(wildcard include/*.h) > $@

$(O)/libkvmstats.so: $(LIB_OBJ) $(O)/libkvmstats.map
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) -shared \
		-Wl,-soname,libkvmstats.so.$(SOVER) \
		-Wl,--version-script=$(O)/libkvmstats.map -o $@.$(VERSION) \
		$(LIB_OBJ) $(LIB_LIBS)
	ln -sf libkvmstats.so.$(VERSION) $@.$(SOVER)
	ln -sf libkvmstats.so.$(VERSION) $@

# The .pc names libdir and includedir relative to ${prefix} when they are
# under it, so that pkg-config's sysroot and prefix overrides work.
pc_dir = $(patsubst $(prefix)/%,$${prefix}/%,$(1))
define gen_pc
	sed -e 's|@PREFIX@|$(prefix)|' -e 's|@LIBDIR@|$(call pc_dir,$(LIBDIR))|' \
	    -e 's|@INCLUDEDIR@|$(call pc_dir,$(INCLUDEDIR))|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@REQUIRES@|$(LIB_PKGS)|' \
	    lib/libkvmstats.pc.in > $(1)
endef

$(O)/libkvmstats.pc: lib/libkvmstats.pc.in
	@mkdir -p $(@D)
	$(call gen_pc,$@)

$(O)/kvmstats: $(CLI_OBJ) $(O)/libkvmstats.a
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) -o $@ $(CLI_OBJ) $(O)/libkvmstats.a $(CLI_LIBS)

-include tests/vmm/Makefile.inc

$(O)/tests/%: tests/unit/%.c $(O)/libkvmstats.a tests/unit/unit.h | $(O)/tests
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) -Itests/unit $< -o $@ \
		$(O)/libkvmstats.a -lcmocka $(LIB_LIBS)
# (it includes the CLI's plan output)
$(O)/tests/test_plan_out: cli/plan_out.c cli/plan.h cli/cli.h cli/sanitize.c
# (it includes the CLI's top --once text and its model)
$(O)/tests/test_top_out: cli/top_text.c cli/top_model.c cli/top.h cli/render.c cli/cli.h cli/sanitize.c
# (it includes record --log's text)
$(O)/tests/test_record_text: cli/record_text.c cli/record_text.h cli/render.c cli/cli.h cli/sanitize.c
# (it includes top's screen views, which need curses)
$(O)/tests/test_top_screen: tests/unit/test_top_screen.c cli/top_views.c cli/top_model.c \
		cli/top_ui.h cli/top.h cli/render.c cli/cli.h cli/sanitize.c \
		$(O)/libkvmstats.a tests/unit/unit.h | $(O)/tests
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) -Itests/unit $< -o $@ \
		$(O)/libkvmstats.a -lcmocka $(CLI_LIBS)

# The driver of tests/integration/lifecycle.sh: the sampling loop under a
# changing host, and a minimal VMM that hot-adds vCPUs.
$(O)/tests/lifecycle_driver: tests/lifecycle_driver.c $(O)/libkvmstats.a | $(O)/tests
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/bench/%: bench/%.c bench/bench.h $(O)/libkvmstats.a | $(O)/bench
	$(CC) $(KS_CFLAGS) -O2 $(KS_LDFLAGS) $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/mkbad: tests/tools/mkbad.c $(O)/libkvmstats.a
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/mkselftest: tests/tools/mkselftest.c $(O)/libkvmstats.a
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/mklog: tests/tools/mklog.c lib/log_format.h $(O)/libkvmstats.a
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/slowloris: tests/tools/slowloris.c
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) $< -o $@

$(O)/linkrelay: tests/tools/linkrelay.c
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) $< -o $@

# The memory workload of plan_linux.sh's Linux guest: static, since its
# initramfs holds nothing but busybox and it.
$(O)/memload: tests/guest/memload.c
	$(CC) $(KS_CFLAGS) -static $< -o $@

# The fuzzers share one build of the library, instrumented for coverage.
FUZZ_CFLAGS = -g -O1 -std=gnu11 -D_GNU_SOURCE -Iinclude -Ilib \
	$(shell $(PKG_CONFIG) --cflags $(LIB_PKGS))
FUZZ_LIB_OBJ := $(LIB_SRC:lib/%.c=$(O)/fuzz/lib/%.o)

$(O)/fuzz/lib/%.o: lib/%.c $(HDRS) | $(O)/fuzz/lib
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@

$(O)/fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_LIB_OBJ) $(HDRS) | $(O)/fuzz
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined $< \
		$(FUZZ_LIB_OBJ) -o $@ $(LIB_LIBS)

# A fuzz harness without libFuzzer (any compiler): runs each file given
# once, for `make check`'s replay of the seeds.
$(O)/fuzz/replay_%: fuzz/fuzz_%.c tests/tools/fuzz_replay.c $(O)/libkvmstats.a | $(O)/fuzz
	$(CC) $(KS_CFLAGS) $(KS_LDFLAGS) -Ilib $< tests/tools/fuzz_replay.c -o $@ \
		$(O)/libkvmstats.a $(LIB_LIBS)

# (not $(O) itself: with O=build it would be the `build` target)
$(O)/lib $(O)/cli $(O)/tests $(O)/bench $(O)/fuzz $(O)/fuzz/lib:
	mkdir -p $@

unit: $(UNIT_BIN)

# What needs nothing but a compiler: no /dev/kvm (unit tests tagged
# `kvmstats-test: needs=kvm` are left out), no daemon, no root, no network.
# The unit tests, the image files through the CLI, the fuzz seeds replayed.
FUZZ_SRC := $(wildcard fuzz/fuzz_*.c)
REPLAY_BIN := $(FUZZ_SRC:fuzz/fuzz_%.c=$(O)/fuzz/replay_%)
FUZZ_BIN := $(FUZZ_SRC:fuzz/%.c=$(O)/fuzz/%)
check: $(O)/kvmstats $(O)/libkvmstats.so $(UNIT_BIN) $(O)/mkbad $(REPLAY_BIN)
	O=$(O) scripts/check.sh

# Benchmarks measure and print ratios against baselines taken in the same
# run; they are not tests. bench/*.c are built, bench/*.sh are scripts.
bench: all
	@$(MAKE) --no-print-directory run-bench

run-bench: $(BENCH_BIN)
	@for b in $(BENCH_BIN) $(wildcard bench/*.sh); do echo "== $$b"; \
		$$b || exit 1; done

# What the tests run: the release build, the ASan+UBSan build (in
# build-san/), the fuzzers and the test tools.
test-build: test-deps
	@$(MAKE) --no-print-directory build unit $(O)/mkbad $(O)/mkselftest $(O)/mklog \
		$(O)/slowloris $(O)/linkrelay $(O)/memload $(FUZZ_BIN) $(O)/tests/lifecycle_driver
	@$(MAKE) --no-print-directory O=build-san SAN=address,undefined \
		OPTFLAGS='-O1 -g' build-san/kvmstats unit

# The whole suite: unit, CLI, fuzz, KVM and QEMU integration (on this
# machine's /dev/kvm, or in the lab where there is none), a stock-KVM pass
# in the lab, the tests again under ASan+UBSan, and the stacks of Debian
# 13 and unstable in the lab (see tests/run.sh).
test: test-build
	tests/run.sh

# Every KVM test in the lab: Debian's stock kernel with kvm_amd under
# QEMU's emulation, on shadow paging (NPT=0, default) or nested paging
# (NPT=1); see docs/testing.md.
NPT ?= 0
test-lab: test-build
	tests/run.sh --lab --npt $(NPT)

# The stock pass of another Debian suite's stack in the lab (its kernel,
# QEMU, libvirt and libraries; the project built in its root, made once
# with debootstrap and cached; as root): STACK=trixie or sid. make test
# runs the stacks of KVMSTATS_TEST_STACKS (default trixie and sid, two lab
# passes at a time); see docs/testing.md.
STACK ?= trixie
test-stack: test-deps
	tests/run.sh --lab --stock --stack $(STACK)

# The first thing a newcomer types: like the test targets, it installs
# the packages the build needs first (scripts/deps.sh; as root).
demo: deps
	@$(MAKE) --no-print-directory build
	$(O)/kvmstats demo

# Installs what `build` built; the units get BINDIR filled in.
INSTALLED = $(BINDIR)/kvmstats $(addprefix $(INCLUDEDIR)/,$(notdir $(PUB_HDRS))) \
	$(LIBDIR)/libkvmstats.a $(LIBDIR)/libkvmstats.so \
	$(LIBDIR)/libkvmstats.so.$(SOVER) $(LIBDIR)/libkvmstats.so.$(VERSION) \
	$(PKGCONFIGDIR)/libkvmstats.pc $(addprefix $(MANDIR)/man1/,$(notdir $(wildcard docs/*.1))) \
	$(UNITDIR)/kvmstats-record.service $(UNITDIR)/kvmstats-serve.service \
	$(SYSUSERSDIR)/kvmstats.conf $(TMPFILESDIR)/kvmstats.conf \
	$(SYSCONFDIR)/default/kvmstats $(BASHCOMPDIR)/kvmstats \
	$(DOCDIR)/web-config.example.yml $(DATADIR)/kvmstats/demo/recording.kvmlog \
	$(DATADIR)/kvmstats/prometheus/kvmstats.rules.yml \
	$(DATADIR)/kvmstats/grafana/kvmstats.json \
	$(if $(TEST_VMS),$(LIBEXECDIR)/kvmstats/tinyvmm)
define unit_sed
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' $(1) > $(2)
endef
install: $(PROGRAMS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) \
		$(DESTDIR)$(SYSCONFDIR)/default $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(DOCDIR)
	install -m 755 $(O)/kvmstats $(DESTDIR)$(BINDIR)/
	$(if $(TEST_VMS),install -D -m 755 $(O)/tinyvmm $(DESTDIR)$(LIBEXECDIR)/kvmstats/tinyvmm)
	install -m 644 $(PUB_HDRS) $(DESTDIR)$(INCLUDEDIR)/
	install -m 644 $(O)/libkvmstats.a $(DESTDIR)$(LIBDIR)/
	install -m 644 $(O)/libkvmstats.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libkvmstats.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libkvmstats.so.$(SOVER)
	ln -sf libkvmstats.so.$(SOVER) $(DESTDIR)$(LIBDIR)/libkvmstats.so
	$(call gen_pc,$(DESTDIR)$(PKGCONFIGDIR)/libkvmstats.pc)
	install -m 644 docs/*.1 $(DESTDIR)$(MANDIR)/man1/
	$(call unit_sed,dist/kvmstats-record.service,$(DESTDIR)$(UNITDIR)/kvmstats-record.service)
	$(call unit_sed,dist/kvmstats-serve.service,$(DESTDIR)$(UNITDIR)/kvmstats-serve.service)
	install -m 644 dist/kvmstats.sysusers $(DESTDIR)$(SYSUSERSDIR)/kvmstats.conf
	install -m 644 dist/kvmstats.tmpfiles $(DESTDIR)$(TMPFILESDIR)/kvmstats.conf
	install -m 644 dist/kvmstats.default $(DESTDIR)$(SYSCONFDIR)/default/kvmstats
	install -m 644 dist/kvmstats.bash-completion $(DESTDIR)$(BASHCOMPDIR)/kvmstats
	install -m 644 dist/web-config.example.yml $(DESTDIR)$(DOCDIR)/
	install -D -m 644 dist/demo/recording.kvmlog \
		$(DESTDIR)$(DATADIR)/kvmstats/demo/recording.kvmlog
	install -D -m 644 dist/prometheus/kvmstats.rules.yml \
		$(DESTDIR)$(DATADIR)/kvmstats/prometheus/kvmstats.rules.yml
	install -D -m 644 dist/grafana/kvmstats.json \
		$(DESTDIR)$(DATADIR)/kvmstats/grafana/kvmstats.json

# Removes exactly what install put there (and the directories of ours
# that are left empty), with the same variables.
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	-rmdir $(DESTDIR)$(LIBEXECDIR)/kvmstats $(DESTDIR)$(DOCDIR) \
		$(addprefix $(DESTDIR)$(DATADIR)/kvmstats/,demo prometheus grafana) \
		$(DESTDIR)$(DATADIR)/kvmstats 2>/dev/null

# A release tarball of the committed tree (HEAD, or TAG=v0.1.0): what
# git archive gives, nothing of the work tree's state.
TAG ?= HEAD
dist:
	@mkdir -p $(O)
	git archive --format=tar.gz --prefix=kvmstats-$(VERSION)/ \
		-o $(O)/kvmstats-$(VERSION).tar.gz $(TAG)
	@echo $(O)/kvmstats-$(VERSION).tar.gz

format:
	clang-format -i $(LIB_SRC) $(CLI_SRC) include/*.h lib/*.h cli/*.h \
		tests/unit/*.c tests/vmm/*.c bench/*.c fuzz/*.c

lint:
	clang-tidy --quiet $(LIB_SRC) $(CLI_SRC) -- $(CLI_CFLAGS) -Icli
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr -Iinclude -Ilib -Icli --std=c11 lib cli

clean:
	rm -rf build build-san build-arm64

.PHONY: test-stack FORCE all build programs deps test-deps test-build unit check bench run-bench \
	test test-lab demo install uninstall dist format lint clean
