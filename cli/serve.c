// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * kvmstats serve: a Prometheus exporter of every VM's KVM stats.
 *
 *   GET /metrics   Prometheus text format 0.0.4, or OpenMetrics 1.0 when
 *                  the Accept header asks for it; gzip when accepted
 *   GET /          a small landing page
 *
 * HTTP is libmicrohttpd's (a thread per connection, bounded in number,
 * per client address, in header size and in idle time); TLS is its
 * GnuTLS support; basic auth and TLS come from a web config file in the
 * format of the Prometheus exporters (webconfig.c).
 *
 * A scrape: one sweep of every stats fd (kvmstats_host__sweep_parallel,
 * a thread per core on large hosts), then the model (prom_model.c) renders the
 * readings in parts, one per core, into buffers that are reused. Scrapes
 * run one at a time; requests that arrive while one runs take the result
 * of the next, so ten scrapers cost about one scrape. A result stays alive
 * while responses still send it; at most MAX_RESULTS exist, so a slow
 * client cannot make the exporter grow: past that a request gets 503.
 *
 * The host is rescanned for new VMMs every --refresh seconds by the main
 * thread. Sources that talk to a VMM (QMP, libvirt) refresh their readings
 * in the background, so a scrape reads them without waiting; their data's
 * age is exported. Nothing is ever written to a VM.
 *
 * With --plan-interval, a thread of its own runs the migration planner
 * (kvmstats plan's library) over the exported VMMs every interval and
 * publishes the figures; a scrape only copies the last published ones
 * (see "the migration planner" below). With --follow-interval (on with
 * the planner unless 0), another polls each VMM's migration status and
 * publishes each VM's last migration beside its prediction
 * (serve_follow.c).
 *
 * After start-up the process keeps only the capabilities reading other
 * processes' stats fds needs, and the planner's when it is on (see
 * drop_caps()).
 */
#include <arpa/inet.h>
#include <cap-ng.h>
#include <ctype.h>
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "discover.h"
#include "serve.h"

/* Workers that open new VMMs, and how long start-up waits for them before
 * serving: a VMM that holds its stats fds opens in milliseconds. */
#define DISCOVER_THREADS 4
#define START_WAIT_NS (300 * 1000000ull)
/* While VMMs are being opened, how often the main thread inserts them. */
#define COLLECT_NS (50 * 1000000ull)

enum {
	OPT_WEB_CONFIG = OPT_CMD_BASE,
	OPT_PATH,
	OPT_THREADS,
	OPT_REFRESH,
	OPT_NO_HIST,
	OPT_GZIP_LEVEL,
	OPT_MAX_CONN,
	OPT_MAX_CONN_IP,
	OPT_TIMEOUT,
	OPT_READY,
	OPT_HASH,
	OPT_PLAN_INTERVAL,
	OPT_PLAN_METHOD,
	OPT_PLAN_DIRTY,
	OPT_PLAN_MAX_CPU,
	OPT_PLAN_RATE,
	OPT_PLAN_BANDWIDTH,
	OPT_PLAN_DOWNTIME,
	OPT_DRAIN_LINK,
	OPT_PARALLEL_MIGRATIONS,
	OPT_FOLLOW_INTERVAL,
};

/* ---- start-up ------------------------------------------------------------------ */

/* "ADDR:PORT" or "[ADDR]:PORT" of a bound socket (port 0 picks one). */
static void addr_text(int fd, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char a[INET6_ADDRSTRLEN] = "?";

	memset(&ss, 0, sizeof(ss));
	if (getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		snprintf(out, len, "?");
		return;
	}
	if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		snprintf(out, len, "[%s]:%d", a, ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		snprintf(out, len, "%s:%d", a, ntohs(s4->sin_port));
	}
}

/* --listen's form, checked as it is parsed (a usage error): ADDR:PORT
 * with a port of 0..65535; whether ADDR resolves is open_listener's. */
static bool listen_form_ok(const struct cli *cli, const char *l)
{
	const char *colon = strrchr(l, ':');
	char *end;
	long port;

	if (!colon || !colon[1]) {
		cli_err(cli, "--listen: '%s' is not ADDR:PORT", l);
		return false;
	}
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || *end || port < 0 || port > 65535) {
		cli_err(cli, "--listen: '%s': the port is not a number in 0..65535", l);
		return false;
	}
	return true;
}

/* ADDR:PORT, [V6ADDR]:PORT, HOST:PORT or :PORT (every address). */
static int open_listener(struct server *s)
{
	char host[256], port[16];
	const char *l = s->o.listen, *colon = strrchr(l, ':');
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai;
	int fd, one = 1, err;
	size_t hl;

	if (!colon || !colon[1] || strlen(colon + 1) >= sizeof(port)) {
		cli_err(s->cli, "--listen: '%s' is not ADDR:PORT", l);
		return -1;
	}
	hl = (size_t)(colon - l);
	if (hl >= 2 && l[0] == '[' && l[hl - 1] == ']')
		l++, hl -= 2;
	if (hl >= sizeof(host)) {
		cli_err(s->cli, "--listen: address too long");
		return -1;
	}
	memcpy(host, l, hl);
	host[hl] = 0;
	snprintf(port, sizeof(port), "%s", colon + 1);
	err = getaddrinfo(hl ? host : NULL, port, &hints, &ai);
	if (err) {
		cli_err(s->cli, "--listen %s: %s", s->o.listen, gai_strerror(err));
		return -1;
	}
	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
			err = errno;
			close(fd);
			fd = -1;
			errno = err;
		}
	}
	if (fd < 0) {
		cli_err(s->cli, "--listen %s: %s", s->o.listen, strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	addr_text(fd, s->addr, sizeof(s->addr));
	freeaddrinfo(ai);
	s->listen_fd = fd;
	return 0;
}

/* Is the socket bound to loopback only? */
static bool loopback_only(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	memset(&ss, 0, sizeof(ss));
	if (getsockname(fd, (struct sockaddr *)&ss, &sl))
		return false;
	if (ss.ss_family == AF_INET)
		return ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24 == 127;
	if (ss.ss_family == AF_INET6) {
		const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

/* Every VM's names and stats are for whoever reaches the port: beyond
 * this host's loopback, say so when nothing guards them. */
static void warn_exposed(struct server *s)
{
	bool tls = s->have_web && web_config_tls(&s->web);
	bool auth = s->have_web && web_config_auth(&s->web);

	if (loopback_only(s->listen_fd) || (tls && auth))
		return;
	cli_warn(s->cli, "listening on %s, beyond this host's loopback, "
		 "without %s: anyone who reaches the port reads every VM's names "
		 "and stats%s (see --web-config)", s->addr,
		 !tls && !auth ? "TLS or basic auth" : !tls ? "TLS" : "basic auth",
		 !tls && auth ? ", and passwords cross the network in clear" : "");
}

/*
 * Capabilities. Reading another process's stats fds takes listing
 * /proc/PID/fd and pidfd_getfd(), both ptrace access checks: the same
 * uid, or CAP_SYS_PTRACE (which also covers Yama and non-dumpable VMMs,
 * and the opt-in attach source's ptrace). A VMM running as another user
 * (libvirt's qemu) keeps /proc/PID/fd at mode 0500 for its owner, which
 * only CAP_DAC_READ_SEARCH lets us list.
 *
 * The planner (--plan-interval) reads /proc/PID/maps and opens
 * /proc/PID/pagemap (ptrace read checks, as above) and copies guest pages
 * with process_vm_readv (a ptrace attach check on the real uid: the same
 * uid and a dumpable VMM that Yama lets us attach to, or CAP_SYS_PTRACE):
 * all covered. PAGEMAP_SCAN (Linux 6.7) tells the pages mapping the
 * shared zero page without showing any PFN, so it needs nothing more. The
 * PFN bits of /proc/PID/pagemap entries, the older kernels' way to tell
 * them (and THP membership, through /proc/kpageflags), need CAP_SYS_ADMIN
 * of whoever opened the file: far too much to keep for an exporter, so
 * there such pages count as non-zero for the pagemap method (sample and
 * scan test their content and get them right). Guest RAM in shared memory
 * (memfd, hugetlbfs, a memory-backend-file) is reached through
 * /proc/PID/map_files, which needs CAP_CHECKPOINT_RESTORE (Linux 5.9+)
 * or CAP_SYS_ADMIN: without it every page the VMM does not map is unknown.
 * So with --plan-interval, and only then, CAP_CHECKPOINT_RESTORE is kept
 * too.
 *
 * Nothing else is needed after the socket is bound and the TLS files are
 * read: every other capability is dropped, from the bounding set too, and
 * no exec can regain one.
 */
static void drop_caps(struct server *s)
{
	static const int keep[] = { CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
				    CAP_CHECKPOINT_RESTORE };

	if (caps_keep_only(keep, s->o.plan.interval_s ? 3 : 2))
		cli_warn(s->cli, "could not drop capabilities");
}

static void raise_nofile(void)
{
	struct rlimit rl;

	/* One fd per VM and vCPU: thousands on a large host. */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static bool select_vmm(void *arg, struct kvmstats_vmm *v)
{
	return target_selected(arg, v);
}

static int make_landing(struct server *s)
{
	const char *scheme = s->have_web && web_config_tls(&s->web) ? "https" : "http";
	int n = asprintf(&s->landing,
		"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
		"<title>kvmstats exporter</title></head>\n<body>\n"
		"<h1>kvmstats exporter</h1>\n"
		"<p>KVM statistics of every VM on this host, for Prometheus.</p>\n"
		"<ul><li><a href=\"%s\">%s</a> (Prometheus text format, OpenMetrics "
		"when asked, gzip when accepted)</li></ul>\n"
		"<p>Version %s, serving %s://%s.</p>\n</body></html>\n",
		s->o.path, s->o.path, kvmstats_version_string(), scheme, s->addr);

	return n < 0 ? -1 : 0;
}

static void write_ready(struct server *s)
{
	char tmp[4096];
	FILE *f;

	if (!s->o.ready)
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", s->o.ready);
	f = open_output(tmp, false);
	if (!f) {
		cli_warn(s->cli, "--ready %s: %s", s->o.ready, strerror(errno));
		return;
	}
	fprintf(f, "%s\n", s->addr);
	if (fclose(f) || rename(tmp, s->o.ready))
		cli_warn(s->cli, "--ready %s: %s", s->o.ready, strerror(errno));
}

/* A --pid VMM that cannot be read is said once, not every refresh. */
static void report_errors(struct server *s)
{
	if (!strcmp(s->last_errors, kvmstats_host__errors(s->host)))
		return;
	snprintf(s->last_errors, sizeof(s->last_errors), "%s",
		 kvmstats_host__errors(s->host));
	target_report_errors(s->cli, s->host);
}

/* Drop exited VMMs and queue the new ones: their opening (a QMP monitor
 * can take --timeout per exchange) is the workers' (discover.c), and
 * after the first the scan of /proc is the scanner's, so the scrape lock
 * is held for a moment only. --pid VMMs need no scan. */
static void refresh(struct server *s, bool first)
{
	uint64_t t0 = now_ns();
	int n;

	pthread_mutex_lock(&s->lock);
	n = first || s->targs->npids ? discover_refresh(s->disc) :
	    discover_scan(s->disc);
	s->refresh_ns = now_ns() - t0;
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		cli_warn(s->cli, "scanning the host: %s", strerror(-n));
	if (!s->targs->npids) {
		struct target_hidden h;

		target_hidden(&h);
		s->hidden_procs = h.procs;
		s->hidden_vmms = h.vmms;
	}
	report_errors(s);
}

/* Insert the VMMs the workers opened: exported from the next scrape. */
static void collect(struct server *s)
{
	pthread_mutex_lock(&s->lock);
	discover_collect(s->disc);
	pthread_mutex_unlock(&s->lock);
	report_errors(s);
}

/* Until SIGINT or SIGTERM: rescan the host every refresh_s seconds, and
 * insert VMMs as soon as they are opened. */
static void main_loop(struct server *s, const sigset_t *set)
{
	uint64_t every = (uint64_t)s->o.refresh_s * 1000000000ull;
	uint64_t next = now_ns() + every;

	for (;;) {
		uint64_t now = now_ns(), wait = next > now ? next - now : 0;
		struct timespec ts;
		int sig;

		if (discover_busy(s->disc) && wait > COLLECT_NS)
			wait = COLLECT_NS;
		ts = (struct timespec){ .tv_sec = (time_t)(wait / 1000000000ull),
					.tv_nsec = (long)(wait % 1000000000ull) };
		sig = sigtimedwait(set, NULL, &ts);
		if (sig == SIGINT || sig == SIGTERM)
			return;
		if (sig < 0 && errno == EINTR)
			continue;
		collect(s);
		if (now_ns() >= next) {
			refresh(s, false);
			next = now_ns() + every;
		}
	}
}

static int hash_password(struct cli *cli)
{
	char pass[1024], hash[128];
	struct termios t, quiet;
	bool tty = isatty(STDIN_FILENO) && !tcgetattr(STDIN_FILENO, &t);
	size_t n;
	int err;

	if (tty) {
		fprintf(stderr, "password: ");
		quiet = t;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		tcsetattr(STDIN_FILENO, TCSANOW, &quiet);
	}
	if (!fgets(pass, sizeof(pass), stdin))
		pass[0] = 0;
	if (tty) {
		tcsetattr(STDIN_FILENO, TCSANOW, &t);
		fputc('\n', stderr);
	}
	n = strcspn(pass, "\r\n");
	pass[n] = 0;
	if (!n) {
		cli_err(cli, "--hash-password: no password on stdin");
		return EXIT_USAGE;
	}
	err = web_hash_password(pass, hash, sizeof(hash));
	explicit_bzero(pass, sizeof(pass));
	if (err) {
		cli_err(cli, "cannot hash: %s", strerror(-err));
		return EXIT_FAIL;
	}
	printf("%s\n", hash);
	return EXIT_OK;
}

/* A number in [min, max]: 0, or -1 (reported). */
static int parse_num(const struct cli *cli, const char *opt, const char *arg,
		     double min, double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !isfinite(v) || v < min || v > max) {
		cli_err(cli, "%s: '%s' is not a number from %g to %g", opt, arg, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

/* BYTES/S with an optional K, M or G (powers of 1024), as plan takes it. */
static int parse_bandwidth(const struct cli *cli, const char *opt, const char *arg,
			   double *out)
{
	static const char units[] = "KMG";
	const char *u;
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
	if (u) {
		v *= (double)(1ull << (10 * (u - units + 1)));
		end++;
	}
	end += strspn(end, "iB");
	if (!strcmp(end, "/s"))
		end += 2;
	if (errno || end == arg || *end || !isfinite(v) || v <= 0) {
		cli_err(cli, "%s: '%s' is not a rate in bytes/s (e.g. 1G)", opt, arg);
		return -1;
	}
	*out = v;
	return 0;
}

/* 1: a --plan-* option (used), 0: not one, -1: a bad value (reported). */
static int plan_opt(struct cli *cli, struct plan_cfg *p, int c, const char *arg)
{
	long v;
	int m;

	/* The options after --plan-interval in the enum tune the planner. */
	if (c > OPT_PLAN_INTERVAL && c <= OPT_PARALLEL_MIGRATIONS)
		p->given = true;
	switch (c) {
	case OPT_PLAN_INTERVAL:
		v = cli_parse_long(cli, "--plan-interval", arg, 0, 86400);
		p->interval_s = (unsigned int)v;
		return v < 0 ? -1 : 1;
	case OPT_PLAN_METHOD:
		m = kvmstats_method_parse(arg);
		if (m < 0 || m >= KVMSTATS_METHOD_NR) {
			cli_err(cli, "--plan-method: what is '%s'? (stats, pagemap, "
				"sample, scan)", arg);
			return -1;
		}
		p->method = (enum kvmstats_method)m;
		return 1;
	case OPT_PLAN_DIRTY:
		return parse_num(cli, "--plan-dirty-interval", arg, 0, 3600,
				 &p->dirty_s) ? -1 : 1;
	case OPT_PLAN_MAX_CPU:
		return parse_num(cli, "--plan-max-cpu", arg, 0.01, 1024,
				 &p->max_cpu) ? -1 : 1;
	case OPT_PLAN_RATE:
		if (parse_num(cli, "--plan-rate", arg, 0.001, 1e9, &p->rate))
			return -1;
		p->rate *= 1048576;
		return 1;
	case OPT_PLAN_BANDWIDTH:
		return parse_bandwidth(cli, "--plan-bandwidth", arg, &p->bandwidth) ? -1 : 1;
	case OPT_PLAN_DOWNTIME:
		return parse_num(cli, "--plan-downtime", arg, 1, 3600000,
				 &p->downtime_ms) ? -1 : 1;
	case OPT_DRAIN_LINK:
		return parse_bandwidth(cli, "--drain-link", arg, &p->drain_link) ? -1 : 1;
	case OPT_PARALLEL_MIGRATIONS:
		v = cli_parse_long(cli, "--parallel-migrations", arg, 1, 64);
		p->parallel = (uint32_t)v;
		p->parallel_given = true;
		return v < 0 ? -1 : 1;
	}
	return 0;
}

struct serve_args {
	struct serve_opts *o;
	struct target_args *a;
	bool hash;
	unsigned int others;	/* options given besides --hash-password */
};

/* A number in [min, max] into @out; -1 when bad (reported). */
static int set_uint(const struct cli *cli, const char *opt, const char *arg,
		    long min, long max, unsigned int *out)
{
	long v = cli_parse_long(cli, opt, arg, min, max);

	if (v >= 0)
		*out = (unsigned int)v;
	return v < 0 ? -1 : 0;
}

static int serve_opt(struct cli *cli, void *ctx, int key, const char *arg)
{
	struct serve_args *sa = ctx;
	struct serve_opts *o = sa->o;
	unsigned int level;
	int used = cli_target_opt(cli, sa->a, key, arg);

	if (!used)
		used = plan_opt(cli, &o->plan, key, arg);
	sa->others += key != OPT_HASH;
	if (used)
		return used < 0 ? -1 : 0;
	switch (key) {
	case 'l':
		if (!listen_form_ok(cli, arg))
			return -1;
		o->listen = arg;
		return 0;
	case OPT_WEB_CONFIG:
		o->web_config = arg;
		return 0;
	case OPT_PATH:
		if (arg[0] != '/' || !strcmp(arg, "/")) {
			cli_err(cli, "--path: '%s' must start with / and not be /",
				arg);
			return -1;
		}
		o->path = arg;
		return 0;
	case OPT_READY:
		o->ready = arg;
		return 0;
	case OPT_NO_HIST:
		o->no_hist = true;
		return 0;
	case OPT_HASH:
		sa->hash = true;
		return 0;
	case OPT_THREADS:
		return set_uint(cli, "--threads", arg, 0, PROM_MAX_PARTS, &o->threads);
	case OPT_REFRESH:
		return set_uint(cli, "--refresh", arg, 1, 86400, &o->refresh_s);
	case OPT_GZIP_LEVEL:
		if (set_uint(cli, "--gzip-level", arg, 1, 9, &level))
			return -1;
		o->gzip_level = (int)level;
		return 0;
	case OPT_MAX_CONN:
		return set_uint(cli, "--max-connections", arg, 1, 4096, &o->max_conn);
	case OPT_MAX_CONN_IP:
		return set_uint(cli, "--max-connections-per-ip", arg, 1, 4096,
				&o->max_conn_ip);
	case OPT_TIMEOUT:
		return set_uint(cli, "--timeout", arg, 1, 3600, &o->timeout_s);
	case OPT_FOLLOW_INTERVAL:
		o->follow_given = true;
		return set_uint(cli, "--follow-interval", arg, 0, 86400, &o->follow_s);
	}
	return 0;
}

static int serve_check(struct cli *cli, void *ctx)
{
	struct serve_args *sa = ctx;

	if (sa->hash && sa->others)
		return cli_bad(cli, "--hash-password reads a password and ends: "
			       "it takes no other option");
	if (sa->o->plan.given && !sa->o->plan.interval_s)
		return cli_bad(cli, "the --plan-* options need --plan-interval "
			       "SECONDS");
	if (sa->o->plan.parallel_given && !sa->o->plan.drain_link)
		return cli_bad(cli, "--parallel-migrations needs --drain-link BYTES/S");
	/* The planner's predictions are scored by default. */
	if (!sa->o->follow_given && sa->o->plan.interval_s)
		sa->o->follow_s = 1;
	return target_args_check(cli, sa->a, false);
}

static const struct cli_opt serve_opts[] = {
	{ "listen", 'l', CLI_OPT_SHORT, "ADDR:PORT", "127.0.0.1:9938",
	  "where to listen; [::1]:PORT, :PORT (every address); port 0 picks one" },
	{ "web-config", OPT_WEB_CONFIG, 0, "FILE", "none",
	  "TLS and basic auth, as the Prometheus exporters' web config" },
	{ "web.config.file", OPT_WEB_CONFIG, CLI_OPT_ALIAS, "FILE", NULL, NULL },
	{ "path", OPT_PATH, 0, "PATH", "/metrics",
	  "where the metrics are served" },
	{ "threads", OPT_THREADS, 0, "N", "0: one per online CPU",
	  "threads that read, render and compress a scrape" },
	{ "refresh", OPT_REFRESH, 0, "SECONDS", "5",
	  "how often the host is rescanned for new VMMs and vCPUs" },
	{ "no-histograms", OPT_NO_HIST, 0, NULL, NULL,
	  "leave the histogram stats out" },
	{ "gzip-level", OPT_GZIP_LEVEL, 0, "N", "1",
	  "zlib level, 1 (fastest) to 9" },
	{ "max-connections", OPT_MAX_CONN, 0, "N", "64",
	  "connections at once, a thread each" },
	{ "max-connections-per-ip", OPT_MAX_CONN_IP, 0, "N", "16",
	  "connections at once from one client address" },
	{ "timeout", OPT_TIMEOUT, 0, "SECONDS", "10",
	  "a connection idle this long is closed" },
	{ "ready", OPT_READY, 0, "FILE", "none",
	  "write the address listened on to FILE once serving" },
	{ "hash-password", OPT_HASH, 0, NULL, NULL,
	  "read a password on stdin, print its bcrypt hash, and end" },
	{ "plan-interval", OPT_PLAN_INTERVAL, 0, "SECONDS", "0: no plan",
	  "plan every exported VMM this often and export the figures" },
	{ "plan-method", OPT_PLAN_METHOD, 0, "METHOD", "pagemap",
	  "how zero pages are estimated: stats, pagemap, sample, scan" },
	{ "plan-dirty-interval", OPT_PLAN_DIRTY, 0, "SECONDS", "1",
	  "the dirty rate is measured over this long; 0: clean guests" },
	{ "plan-max-cpu", OPT_PLAN_MAX_CPU, 0, "N", "1",
	  "CPU budget of a scan, in cores" },
	{ "plan-rate", OPT_PLAN_RATE, 0, "MIB/S", "none",
	  "read budget of a scan over all its threads" },
	{ "plan-bandwidth", OPT_PLAN_BANDWIDTH, 0, "BYTES/S",
	  "QEMU's, else 128M", "migration bandwidth (suffix K, M or G)" },
	{ "plan-downtime", OPT_PLAN_DOWNTIME, 0, "MS", "QEMU's, else 300",
	  "downtime limit of the model" },
	{ "drain-link", OPT_DRAIN_LINK, 0, "BYTES/S", "none: no drain",
	  "schedule the host's drain through this link each round and export it" },
	{ "parallel-migrations", OPT_PARALLEL_MIGRATIONS, 0, "N", "2",
	  "the drain's migrations at a time" },
	{ "follow-interval", OPT_FOLLOW_INTERVAL, 0, "SECONDS",
	  "1 with --plan-interval, else 0: off",
	  "poll each VMM's migration (query-migrate) this often and export "
	  "the last one's figures beside the plan's" },
	CLI_OPTS_TARGET,
	{ 0 },
};

static const struct cli_spec serve_spec = {
	.cmd = "serve",
	.text = "metrics over HTTP",
	.about = "A Prometheus exporter of every VM's KVM stats: GET /metrics "
		 "in the text format,\nor OpenMetrics when asked; TLS and "
		 "basic auth from --web-config.\nWith --plan-interval, the "
		 "migration planner's figures too; with --follow-interval,\n"
		 "each VM's last migration as QEMU counted it beside the "
		 "prediction.",
	.opts = serve_opts,
	.opt = serve_opt,
	.check = serve_check,
};

static void server_free(struct server *s)
{
	/* First: the follower takes the scrape lock and the planner's. */
	follower_free(&s->follow);
	/* Then the planner: it takes the scrape lock and reads the host. */
	planner_free(&s->plan);
	if (s->d)
		MHD_stop_daemon(s->d);
	/* Every connection has been closed, and said so. */
	guard_free(&s->guard);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	/* Every response is gone with the daemon: the results are free. */
	for (int i = 0; i < MAX_RESULTS; i++)
		prom_expo_free(&s->results[i].e);
	prom_expo_free(&s->scratch);
	prom_pool_free(s->pool);
	prom_model_free(s->model);
	/* Its workers read the host. */
	discover_free(s->disc);
	kvmstats_host__free(s->host);
	if (s->have_web)
		web_config_free(&s->web);
	free(s->landing);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->qmp_lock);
}

static int run(struct server *s)
{
	sigset_t set;
	char why[512];
	size_t nvmms;

	if (s->o.web_config) {
		if (web_config_load(&s->web, s->o.web_config, why, sizeof(why))) {
			cli_err(s->cli, "%s", why);
			return EXIT_FAIL;
		}
		s->have_web = true;
	}
	if (open_listener(s))
		return EXIT_FAIL;
	warn_exposed(s);
	/* A thread per connection: glibc would give each its own arena and
	 * keep what it freed there; two arenas keep the footprint flat. */
	mallopt(M_ARENA_MAX, 2);
	raise_nofile();
	drop_caps(s);
	/* Every thread started from here on inherits this mask: the
	 * signals wait for the main thread's sigtimedwait(). */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	s->host = target_host_new(s->cli, s->targs);
	s->model = prom_model_new(&(struct prom_opts){
		.no_histograms = s->o.no_hist,
		.select = s->targs->name_set ? select_vmm : NULL,
		.select_arg = s->targs });
	s->pool = prom_pool_new(s->o.threads);
	if (!s->host || !s->model || !s->pool || make_landing(s)) {
		cli_err(s->cli, "out of memory");
		return EXIT_FAIL;
	}
	s->disc = discover_new(s->host, DISCOVER_THREADS);
	if (!s->disc) {
		cli_err(s->cli, "cannot start: %s", strerror(errno));
		return EXIT_FAIL;
	}
	/* The VMMs that open at once are there at the first scrape; those
	 * that take longer come in when ready, never holding it up. */
	refresh(s, true);
	discover_wait(s->disc, START_WAIT_NS);
	collect(s);
	/* Counted now: once serving, the host is the scrapes' (under the lock). */
	nvmms = kvmstats_host__num_vmms(s->host);
	if (guard_start(s) || start_http(s) || planner_start(s) ||
	    follower_start(s))
		return EXIT_FAIL;
	if (s->cli->verbose >= 0)
		fprintf(stderr, "%s: %s: serving %s://%s%s (%zu VMMs)\n",
			s->cli->prog, s->cli->cmd,
			s->have_web && web_config_tls(&s->web) ? "https" : "http",
			s->addr, s->o.path, nvmms);
	if (!s->targs->npids)
		target_warn_hidden(s->cli);	/* other users' VMMs */
	write_ready(s);
	main_loop(s, &set);
	return EXIT_OK;
}

int cmd_serve(struct cli *cli, int argc, char **argv)
{
	struct target_args a;
	struct server s = {
		.cli = cli, .listen_fd = -1, .targs = &a,
		.o = { .listen = "127.0.0.1:9938", .path = "/metrics",
		       .refresh_s = 5, .gzip_level = 1, .max_conn = 64,
		       .max_conn_ip = 16, .timeout_s = 10,
		       .plan = { .method = KVMSTATS_METHOD_PAGEMAP, .dirty_s = 1,
				 .parallel = 2 } },
	};
	struct serve_args sa = { .o = &s.o, .a = &a };
	int ret;

	if (target_args_init(&a, argc))
		return EXIT_FAIL;
	pthread_mutex_init(&s.lock, NULL);
	pthread_mutex_init(&s.qmp_lock, NULL);
	planner_init(&s.plan);
	follower_init(&s.follow);
	guard_init(&s.guard);
	ret = cli_parse(cli, &serve_spec, &sa, argc, argv);
	if (ret == CLI_PARSED)
		ret = sa.hash ? hash_password(cli) : run(&s);
	server_free(&s);
	target_args_free(&a);
	return ret;
}
