# kvmstats: `make` builds build/kvmstats, `make test` runs every test.
# Missing Debian packages are installed first (as root) or named (otherwise).

VERSION := 0.1.0
SOVER := 0
CC ?= cc
O ?= build
PREFIX ?= /usr/local
DESTDIR ?=
SAN ?=

# The library needs json-c (QMP), zlib (log CRCs) and, when present, libvirt; the CLI adds
# what its sinks use.
LIB_PKGS := json-c zlib
HAVE_LIBVIRT := $(shell pkg-config --exists libvirt 2>/dev/null && echo 1)
ifeq ($(HAVE_LIBVIRT),1)
LIB_PKGS += libvirt
endif
PKGS := $(LIB_PKGS) ncursesw libmicrohttpd libcap-ng zlib yaml-0.1 libcrypt

OPTFLAGS ?= -O2 -g
override CFLAGS += $(OPTFLAGS) -std=gnu11 -Wall -Wextra -Wshadow -Wno-missing-field-initializers \
	  -D_GNU_SOURCE -DKVMSTATS_VERSION='"$(VERSION)"' -Iinclude
ifneq ($(SAN),)
override CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=$(SAN)
endif
ifeq ($(HAVE_LIBVIRT),1)
override CFLAGS += -DHAVE_LIBVIRT=1
endif
LIB_CFLAGS = $(CFLAGS) -fPIC -fvisibility=hidden \
	     $(shell pkg-config --cflags $(LIB_PKGS) 2>/dev/null)
LIB_LIBS = $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null) -lpthread -lm
CLI_CFLAGS = $(CFLAGS) $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
CLI_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread -lm

LIB_SRC := $(wildcard lib/*.c)
CLI_SRC := $(wildcard cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(O)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(O)/%.o)
HDRS := $(wildcard include/*.h lib/*.h cli/*.h)

UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(O)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(O)/bench/%)

# Dependencies are installed first, then a sub-make builds, so that what
# pkg-config finds is read after the install.
all: deps
	@$(MAKE) --no-print-directory build

build: $(O)/kvmstats $(O)/libkvmstats.so $(O)/libkvmstats.pc $(O)/tinyvmm \
	$(O)/mbguest.elf

deps:
	@scripts/deps.sh build

test-deps:
	@scripts/deps.sh test

$(O)/lib/%.o: lib/%.c $(HDRS) | $(O)/lib
	$(CC) $(LIB_CFLAGS) -c $< -o $@

$(O)/cli/%.o: cli/%.c $(HDRS) | $(O)/cli
	$(CC) $(CLI_CFLAGS) -Icli -c $< -o $@

$(O)/libkvmstats.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(O)/libkvmstats.map: $(wildcard include/*.h) scripts/mkmap.sh
	@mkdir -p $(@D)
	scripts/mkmap.sh $(wildcard include/*.h) > $@

$(O)/libkvmstats.so: $(LIB_OBJ) $(O)/libkvmstats.map
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libkvmstats.so.$(SOVER) \
		-Wl,--version-script=$(O)/libkvmstats.map -o $@.$(VERSION) \
		$(LIB_OBJ) $(LIB_LIBS)
	ln -sf libkvmstats.so.$(VERSION) $@.$(SOVER)
	ln -sf libkvmstats.so.$(VERSION) $@

$(O)/libkvmstats.pc: lib/libkvmstats.pc.in
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@REQUIRES@|$(LIB_PKGS)|' $< > $@

$(O)/kvmstats: $(CLI_OBJ) $(O)/libkvmstats.a
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(O)/libkvmstats.a $(CLI_LIBS)

-include tests/vmm/Makefile.inc

$(O)/tests/%: tests/unit/%.c $(O)/libkvmstats.a tests/unit/unit.h | $(O)/tests
	$(CC) $(CFLAGS) -Itests/unit $< -o $@ $(O)/libkvmstats.a -lcmocka $(LIB_LIBS)

# The driver of tests/integration/lifecycle.sh: the sampling loop under a
# changing host, and a minimal VMM that hot-adds vCPUs.
$(O)/tests/lifecycle_driver: tests/lifecycle_driver.c $(O)/libkvmstats.a | $(O)/tests
	$(CC) $(CFLAGS) $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/bench/%: bench/%.c bench/bench.h $(O)/libkvmstats.a | $(O)/bench
	$(CC) $(CFLAGS) -O2 $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/mkbad: tests/tools/mkbad.c $(O)/libkvmstats.a
	$(CC) $(CFLAGS) $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/mklog: tests/tools/mklog.c lib/log_format.h $(O)/libkvmstats.a
	$(CC) $(CFLAGS) $< -o $@ $(O)/libkvmstats.a $(LIB_LIBS)

$(O)/slowloris: tests/tools/slowloris.c
	$(CC) $(CFLAGS) $< -o $@

$(O)/fuzz/%: fuzz/%.c $(LIB_SRC) $(HDRS) | $(O)/fuzz
	clang -g -O1 -std=gnu11 -D_GNU_SOURCE -Iinclude -Ilib \
		$(shell pkg-config --cflags $(LIB_PKGS)) \
		-fsanitize=fuzzer,address,undefined $< $(LIB_SRC) -o $@ $(LIB_LIBS)

# (not $(O) itself: with O=build it would be the `build` target)
$(O)/lib $(O)/cli $(O)/tests $(O)/bench $(O)/fuzz:
	mkdir -p $@

unit: $(UNIT_BIN)
# Benchmarks measure and print ratios against baselines taken in the same
# run; they are not tests. bench/*.c are built, bench/*.sh are scripts.
bench: all
	@$(MAKE) --no-print-directory run-bench

run-bench: $(BENCH_BIN)
	@for b in $(BENCH_BIN) $(wildcard bench/*.sh); do echo "== $$b"; \
		$$b || exit 1; done

# The whole suite: unit, CLI, fuzz, KVM and QEMU integration, and the
# unit and CLI tests again under ASan+UBSan (in build-san/).
test: test-deps
	@$(MAKE) --no-print-directory build unit $(O)/mkbad $(O)/mklog $(O)/slowloris \
		$(O)/fuzz/fuzz_image $(O)/fuzz/fuzz_log $(O)/tests/lifecycle_driver
	@$(MAKE) --no-print-directory O=build-san SAN=address,undefined \
		OPTFLAGS='-O1 -g' build-san/kvmstats unit
	tests/run.sh

demo: all
	$(O)/kvmstats demo

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib \
		$(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(O)/kvmstats $(DESTDIR)$(PREFIX)/bin/
	install -D -m 755 $(O)/tinyvmm $(DESTDIR)$(PREFIX)/libexec/kvmstats/tinyvmm
	install -m 644 include/*.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(O)/libkvmstats.a $(DESTDIR)$(PREFIX)/lib/
	cp -P $(O)/libkvmstats.so* $(DESTDIR)$(PREFIX)/lib/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@REQUIRES@|$(LIB_PKGS)|' lib/libkvmstats.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/libkvmstats.pc
	install -m 644 docs/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions
	sed 's|@BINDIR@|$(PREFIX)/bin|' dist/kvmstats-record.service \
		> $(DESTDIR)$(PREFIX)/lib/systemd/system/kvmstats-record.service
	sed 's|@BINDIR@|$(PREFIX)/bin|' dist/kvmstats-serve.service \
		> $(DESTDIR)$(PREFIX)/lib/systemd/system/kvmstats-serve.service
	install -D -m 644 dist/web-config.example.yml \
		$(DESTDIR)$(PREFIX)/share/doc/kvmstats/web-config.example.yml
	install -m 644 dist/kvmstats.bash-completion \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/kvmstats

format:
	clang-format -i $(LIB_SRC) $(CLI_SRC) include/*.h lib/*.h cli/*.h \
		tests/unit/*.c tests/vmm/*.c bench/*.c fuzz/*.c

lint:
	clang-tidy --quiet $(LIB_SRC) $(CLI_SRC) -- $(CLI_CFLAGS) -Icli
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
		--inline-suppr -Iinclude -Ilib -Icli --std=c11 lib cli

clean:
	rm -rf build build-san

.PHONY: all build deps test-deps unit bench run-bench test demo install \
	format lint clean
