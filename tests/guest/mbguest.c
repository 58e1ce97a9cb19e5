// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * mbguest: a tiny multiboot guest that gives a real QEMU VM a known memory
 * content and exit count, for kvmstats' tests (zero-page scan, dirty rate,
 * migration planner, QMP/libvirt sources).
 *
 * Boot:  qemu-system-x86_64 -enable-kvm -m 256 -display none \
 *          -serial file:LOG -kernel build/mbguest.elf -append "KEYS"
 *
 * Command-line keys (space separated key=value; unknown keys are reported
 * on the serial line and ignored; SIZE takes a K, M or G suffix):
 *
 *   base=SIZE     start of the regions below (default 16M)
 *   nonzero=SIZE  bytes from base filled with a non-zero pattern: every
 *                 32-bit word of the page at address P holds P ^ 0xa5a5a5a5,
 *                 so no page is zero and no two pages are equal (default 0)
 *   zero=SIZE     the next bytes written with zeros: touched, but zero
 *                 pages (default 0)
 *   stride=SIZE   write only one 32-bit word every SIZE bytes in both
 *                 regions (a multiple of 4; e.g. 4K: one word per page,
 *                 which still makes every nonzero page non-zero and
 *                 every zero page touched) instead of every word
 *                 (default 4).  Under kvm_pvm every guest instruction is
 *                 emulated: a full fill runs at about 30 MB/s, stride=4K
 *                 takes milliseconds.
 *   exits=N       N port I/O exits (out to port 0x80) after the writes
 *                 (default 0)
 *   dirty=SIZE    bytes from base rewritten by dirtyloop (default 16M)
 *   dirtyloop=1   after READY, rewrite the dirty region forever, page by
 *                 page, as fast as it can (or at rate=); otherwise halt
 *                 with interrupts off
 *   rate=N        with dirtyloop=1: rewrite N pages per second (a plain
 *                 number, no suffix), paced by the TSC, which the guest
 *                 calibrates against the CMOS clock (default 0: as
 *                 fast as it can).  The pace is kept in 1 ms ticks; a
 *                 guest that falls behind (throttled by auto-converge,
 *                 or too slow) does not catch up, as a paced workload
 *                 would not
 *   scatter=1     with rate=: each page rewritten is drawn at random
 *                 (uniformly, with repeats) from the dirty region
 *                 instead of the next one in order: pages dirtied within
 *                 t grow as W(1 - exp(-rt/W)), and no phase ties them to
 *                 the order QEMU sends pages in
 *   data=random|compressible
 *                 what dirtyloop writes: random rewrites every word of
 *                 the page from a xorshift generator, which zlib and zstd
 *                 cannot compress; compressible (default) changes one
 *                 byte per page, a different non-zero one on each pass
 *   pool=ADDR poolsize=SIZE
 *                 random bytes put there by the loader (QEMU's -device
 *                 loader): data=random copies each page from the pool
 *                 (rep movsl, at a word offset that moves on each pass)
 *                 instead of running the generator, which is much faster
 *                 where KVM emulates every guest instruction (kvm_pvm
 *                 runs the generator at about 100 pages/s)
 *
 * Memory above base + nonzero + zero is never touched.  Regions are cut at
 * the end of RAM (multiboot mem_upper).  When the work is done the guest
 * prints one "mbguest: ..." line and then "READY" on COM1 (port 0x3f8).
 * With rate=, a line "mbguest: tsc K kHz, rate N pages/s, data=..." comes
 * before READY and, a second later, "mbguest: dirtied N pages in the
 * first second" (what it could really do).
 *
 * Freestanding: no header, no libgcc (no 64-bit division), so it builds
 * with any gcc -m32, multilib or not.
 */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define MB_MAGIC	0x2badb002u
#define MB_INFO_MEM	(1u << 0)
#define MB_INFO_CMDLINE	(1u << 2)
#define COM1		0x3f8
#define EXIT_PORT	0x80
#define PAGE_SIZE	4096u
#define PATTERN		0xa5a5a5a5u
#define CMOS_INDEX	0x70
#define CMOS_DATA	0x71
#define TICKS_PER_S	1000u		/* the pace is kept per ms: finer than
					 * auto-converge's 10 ms slices */

/* The first fields of the multiboot information structure. */
struct mb_info {
	u32 flags;
	u32 mem_lower;		/* KiB below 1 MiB */
	u32 mem_upper;		/* KiB from 1 MiB to the first hole */
	u32 boot_device;
	u32 cmdline;		/* physical address of a C string */
};

struct config {
	u64 base;
	u64 nonzero;
	u64 zero;
	u64 dirty;
	u64 stride;
	u64 exits;
	u64 dirtyloop;
	u64 rate;
	u64 pool;
	u64 poolsize;
	u64 scatter;
	int random;
};

extern char _end[];		/* from the linker script */

static inline void outb(u16 port, u8 v)
{
	__asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

static inline u8 inb(u16 port)
{
	u8 v;

	__asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}

static void putc_serial(char c)
{
	/* Wait for the transmit holding register to empty. */
	while (!(inb(COM1 + 5) & 0x20))
		;
	outb(COM1, c);
}

static void puts_serial(const char *s)
{
	while (*s)
		putc_serial(*s++);
}

static void putu_serial(u32 v)
{
	char buf[11];
	int i = sizeof(buf);

	buf[--i] = 0;
	do {
		buf[--i] = '0' + v % 10;
		v /= 10;
	} while (v);
	puts_serial(&buf[i]);
}

/* Sizes are printed in KiB so that they fit a u32 without 64-bit division. */
static void put_kib(const char *key, u64 bytes)
{
	puts_serial(key);
	putu_serial((u32)(bytes >> 10));
	puts_serial("K");
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n';
}

/* If tok is "key=...", points *val at the value. */
static int key_is(const char *tok, const char *key, const char **val)
{
	while (*key && *tok == *key) {
		tok++;
		key++;
	}
	if (*key || *tok != '=')
		return 0;
	*val = tok + 1;
	return 1;
}

/* Parses "123", "64M", "0x100000"; returns 0 on garbage. */
static int parse_size(const char *s, u64 *out)
{
	u64 v = 0;
	u32 base = 10;
	int digits = 0;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	for (;; s++, digits++) {
		u32 d;

		if (*s >= '0' && *s <= '9')
			d = *s - '0';
		else if (base == 16 && *s >= 'a' && *s <= 'f')
			d = *s - 'a' + 10;
		else if (base == 16 && *s >= 'A' && *s <= 'F')
			d = *s - 'A' + 10;
		else
			break;
		v = v * base + d;
	}
	if (!digits)
		return 0;
	switch (*s) {
	case 'k': case 'K': v <<= 10; s++; break;
	case 'm': case 'M': v <<= 20; s++; break;
	case 'g': case 'G': v <<= 30; s++; break;
	}
	if (*s && !is_space(*s))
		return 0;
	*out = v;
	return 1;
}

static void bad_token(const char *tok)
{
	puts_serial("mbguest: ignoring '");
	while (*tok && !is_space(*tok))
		putc_serial(*tok++);
	puts_serial("'\n");
}

/* A word ends at a space or the end of the string. */
static int word_is(const char *s, const char *word)
{
	while (*word && *s == *word) {
		s++;
		word++;
	}
	return !*word && (!*s || is_space(*s));
}

static void parse_token(struct config *c, const char *tok)
{
	const struct {
		const char *key;
		u64 *val;
	} keys[] = {
		{ "base", &c->base },
		{ "nonzero", &c->nonzero },
		{ "zero", &c->zero },
		{ "dirty", &c->dirty },
		{ "stride", &c->stride },
		{ "exits", &c->exits },
		{ "dirtyloop", &c->dirtyloop },
		{ "rate", &c->rate },
		{ "pool", &c->pool },
		{ "poolsize", &c->poolsize },
		{ "scatter", &c->scatter },
	};
	const char *val;
	unsigned int i;

	if (key_is(tok, "data", &val)) {
		if (word_is(val, "random"))
			c->random = 1;
		else if (word_is(val, "compressible"))
			c->random = 0;
		else
			bad_token(tok);
		return;
	}

	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (key_is(tok, keys[i].key, &val)) {
			if (!parse_size(val, keys[i].val))
				bad_token(tok);
			return;
		}
	}
	bad_token(tok);
}

/*
 * Loaders put the image's file name first (QEMU: "FILE APPEND"); a first
 * word without '=' is that name, not a key.
 */
static void parse_cmdline(struct config *c, const char *s)
{
	int first = 1;

	while (*s) {
		const char *tok;
		int has_eq = 0;

		while (is_space(*s))
			s++;
		if (!*s)
			break;
		tok = s;
		while (*s && !is_space(*s))
			has_eq |= *s++ == '=';
		if (!(first && !has_eq))
			parse_token(c, tok);
		first = 0;
	}
}

/* Cut [start, start + *len) at end; returns what remains. */
static u64 clamp(u64 start, u64 len, u64 end)
{
	if (start >= end)
		return 0;
	return len > end - start ? end - start : len;
}

/* rep stosl: the fastest way to write memory when every insn is emulated. */
static void fill32(u32 addr, u32 value, u32 words)
{
	__asm__ volatile("cld; rep stosl"
			 : "+D"(addr), "+c"(words)
			 : "a"(value)
			 : "memory");
}

/* One word every stride bytes: the page's pattern word, or zero. */
static void fill_sparse(u32 start, u32 len, u32 stride, u32 pattern)
{
	u64 off;

	for (off = 0; off + 4 <= len; off += stride) {
		u32 p = start + (u32)off;

		*(volatile u32 *)p = pattern ? (p & ~(PAGE_SIZE - 1)) ^ pattern : 0;
	}
}

static void fill(u32 start, u32 len, u32 stride, u32 pattern)
{
	u32 p;

	if (stride != 4) {
		fill_sparse(start, len, stride, pattern);
		return;
	}
	for (p = start; p - start < len; p += PAGE_SIZE) {
		u32 left = len - (p - start);
		u32 words = (left < PAGE_SIZE ? left : PAGE_SIZE) / 4;

		fill32(p, pattern ? p ^ pattern : 0, words);
	}
}

static inline u64 rdtsc(void)
{
	u32 lo, hi;

	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return (u64)hi << 32 | lo;
}

static u8 rtc_seconds(void)
{
	outb(CMOS_INDEX, 0x00);
	return inb(CMOS_DATA);
}

/*
 * TSC cycles per tick: the cycles between two ticks of the CMOS clock's
 * seconds, one second apart (the guest waits up to two seconds for it).
 * The PIT's channel 2 was tried first, as Linux's pit_calibrate_tsc()
 * does, but under kvm_pvm it gave 2.45 to 3.37 GHz for a 2.45 GHz TSC
 * from one boot to the next; a one-second span makes the error of a poll
 * negligible.  0 if the seconds never ticked.  Without 64-bit division:
 * a quarter of a second's cycles fits 32 bits below 17 GHz.
 */
static u32 tsc_per_tick(void)
{
	u32 spins = 0;
	u64 t0, t1;
	u8 s;

	s = rtc_seconds();
	while (rtc_seconds() == s)
		if (++spins > 200000000u)
			return 0;
	t0 = rdtsc();
	s = rtc_seconds();
	while (rtc_seconds() == s)
		if (++spins > 400000000u)
			return 0;
	t1 = rdtsc();
	if ((t1 - t0) >> 34)
		return 0;
	return (u32)((t1 - t0) >> 2) / (TICKS_PER_S / 4);
}

struct pool {
	u32 addr;
	u32 size;		/* a multiple of the page size; 0: no pool */
	u32 at;			/* the next page's offset in it */
};

/* rep movsl: one instruction, as fill32. */
static void copy32(u32 dst, u32 src, u32 words)
{
	__asm__ volatile("cld; rep movsl"
			 : "+D"(dst), "+S"(src), "+c"(words)
			 :
			 : "memory");
}

/*
 * The next page of the pool, shifted by a word each time the pool wraps,
 * so that a page never gets the content it had: what it copies is random
 * and never repeats within a compressor's window.
 */
static void pool_page(u32 p, struct pool *pl)
{
	u32 left = pl->size - pl->at;

	if (left >= PAGE_SIZE) {
		copy32(p, pl->addr + pl->at, PAGE_SIZE / 4);
	} else {
		copy32(p, pl->addr + pl->at, left / 4);
		copy32(p + left, pl->addr, (PAGE_SIZE - left) / 4);
	}
	pl->at += PAGE_SIZE;
	if (pl->at >= pl->size)
		pl->at = (pl->at - pl->size + 4) % pl->size;
}

/* Rewrite the page at p: every word (random) or one byte (compressible). */
static void dirty_page(u32 p, int random, u8 v, u32 *x, struct pool *pl)
{
	u32 i, s = *x;

	if (random && pl->size) {
		pool_page(p, pl);
		return;
	}
	if (!random) {
		*(volatile u8 *)p = v;
		return;
	}
	for (i = 0; i < PAGE_SIZE; i += 4) {
		s ^= s << 13;
		s ^= s >> 17;
		s ^= s << 5;
		((volatile u32 *)p)[i / 4] = s;
	}
	*x = s;
}

static void dirty_forever(u32 start, u32 len, int random, struct pool *pl)
{
	u32 pass = 0, p, x = 0x9e3779b9u;

	for (;;) {
		u8 v = pass++ % 255 + 1;	/* never 0: pages stay non-zero */

		for (p = start; p - start < len; p += PAGE_SIZE)
			dirty_page(p, random, v, &x, pl);
	}
}

/*
 * rate pages per second: each 1 ms tick earns rate credits and a page
 * costs TICKS_PER_S of them, so no rate is rounded away.  A tick missed
 * (the vCPU was not running) is not made up for.
 */
static void dirty_paced(u32 start, u32 len, u32 rate, int random, int scatter,
			u32 tick, struct pool *pl)
{
	u32 pass = 0, p = start, x = 0x9e3779b9u, credit = 0, ticks = 0;
	u32 done = 0, pick = 0x2545f491u;
	u64 next = rdtsc() + tick, now;

	for (;;) {
		credit += rate;
		while (credit >= TICKS_PER_S) {
			if (scatter) {
				pick ^= pick << 13;
				pick ^= pick >> 17;
				pick ^= pick << 5;
				p = start + PAGE_SIZE *
					    (u32)(((u64)pick * (len / PAGE_SIZE)) >> 32);
				/* A new value on each write, so that our
				 * sampler sees every rewrite QEMU counts. */
				pass = done;
			}
			dirty_page(p, random, pass % 255 + 1, &x, pl);
			credit -= TICKS_PER_S;
			done++;
			p += PAGE_SIZE;
			if (p - start >= len) {
				p = start;
				pass++;
			}
		}
		if (++ticks == TICKS_PER_S) {
			puts_serial("mbguest: dirtied ");
			putu_serial(done);
			puts_serial(" pages in the first second\n");
		}
		while ((now = rdtsc()) < next)
			__asm__ volatile("pause");
		/* Woken late (the vCPU did not run): the ticks missed are
		 * lost. Checked after the wait, so a wake-up makes up for
		 * none (checked before, it made up for one: a guest
		 * throttled to a 10 ms slice dirtied twice its share). */
		if (now - next > tick)
			next = now;
		next += tick;
	}
}

static void halt_forever(void)
{
	for (;;)
		__asm__ volatile("cli; hlt");
}

static void report(const struct config *c)
{
	put_kib("mbguest: base=", c->base);
	put_kib(" nonzero=", c->nonzero);
	put_kib(" zero=", c->zero);
	puts_serial(" stride=");
	putu_serial((u32)c->stride);
	puts_serial(" exits=");
	putu_serial((u32)c->exits);
	if (c->dirtyloop)
		put_kib(" dirty=", c->dirty);
	puts_serial("\n");
}

/* The paced loop's clock and figures, then READY; 0 without a clock. */
static u32 report_pace(const struct config *c)
{
	u32 tick = tsc_per_tick();

	if (!tick) {
		puts_serial("mbguest: no CMOS clock to calibrate the TSC against\n");
		return 0;
	}
	puts_serial("mbguest: tsc ");
	putu_serial(tick / 10);
	puts_serial(" kHz, rate ");
	putu_serial((u32)c->rate);
	puts_serial(" pages/s, data=");
	puts_serial(c->random ? "random" : "compressible");
	if (c->random && c->poolsize)
		put_kib(" from a pool of ", c->poolsize);
	puts_serial("\n");
	return tick;
}

void mb_main(u32 magic, const struct mb_info *mbi)
{
	struct config c = { .base = 16u << 20, .dirty = 16u << 20, .stride = 4 };
	struct pool pl = { 0 };
	u64 ram_end = 0xffffffffull;
	u32 i;

	if (magic != MB_MAGIC) {
		puts_serial("mbguest: not started by a multiboot loader\n");
		halt_forever();
	}
	if (mbi->flags & MB_INFO_MEM)
		ram_end = (1ull << 20) + ((u64)mbi->mem_upper << 10);
	if (mbi->flags & MB_INFO_CMDLINE)
		parse_cmdline(&c, (const char *)mbi->cmdline);

	/* Never overwrite ourselves, nor what the loader put after us. */
	if (c.base < (u32)_end + (1u << 20) || c.base & (PAGE_SIZE - 1)) {
		puts_serial("mbguest: base must be page aligned and 1M past the image\n");
		halt_forever();
	}
	if (!c.stride || c.stride & 3 || c.stride > 0x40000000u) {
		puts_serial("mbguest: stride must be a non-zero multiple of 4\n");
		halt_forever();
	}
	c.nonzero = clamp(c.base, c.nonzero, ram_end);
	c.zero = clamp(c.base + c.nonzero, c.zero, ram_end);
	c.dirty = clamp(c.base, c.dirty, ram_end);
	if (c.exits > 0xffffffffu)
		c.exits = 0xffffffffu;

	fill(c.base, c.nonzero, c.stride, PATTERN);
	fill(c.base + c.nonzero, c.zero, c.stride, 0);
	for (i = 0; i < c.exits; i++)
		outb(EXIT_PORT, 0);
	if (c.poolsize && c.pool + c.poolsize <= ram_end && c.pool >= (u32)_end) {
		pl.addr = (u32)c.pool;
		pl.size = (u32)c.poolsize & ~(PAGE_SIZE - 1);
	}
	if (c.rate > 0xffffffffu / 2)
		c.rate = 0xffffffffu / 2;
	report(&c);
	if (c.dirtyloop && c.rate) {
		u32 tick = report_pace(&c);

		if (!tick)
			halt_forever();
		puts_serial("READY\n");
		dirty_paced(c.base, c.dirty, c.rate, c.random, (int)c.scatter, tick, &pl);
	}
	puts_serial("READY\n");
	if (c.dirtyloop)
		dirty_forever(c.base, c.dirty, c.random, &pl);
	halt_forever();
}
