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
 * a thread per core on large hosts), then the model (prom.c) renders the
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
 * After start-up the process keeps only the capabilities reading other
 * processes' stats fds needs (see drop_caps()).
 */
#include <arpa/inet.h>
#include <cap-ng.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "prom.h"
#include "webconfig.h"

static const char serve_usage[] =
	"[--listen ADDR:PORT] [--web-config FILE] [--path PATH]\n"
	"       [--threads N] [--refresh SECONDS] [--no-histograms] [--gzip-level N]\n"
	"       [--max-connections N] [--max-connections-per-ip N] [--timeout SECONDS]\n"
	"       [--ready FILE] " CLI_TARGET_USAGE "\n"
	"   or: serve --hash-password  (reads a password on stdin, prints a bcrypt hash)";

/* Expositions alive at once (being built, or still being sent). */
#define MAX_RESULTS 4
/* A request body is never expected: a client sending more is dropped. */
#define MAX_BODY 4096

enum {
	OPT_LISTEN = OPT_CMD_BASE,
	OPT_WEB_CONFIG,
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
};

struct serve_opts {
	const char *listen;
	const char *web_config;
	const char *path;
	const char *ready;
	unsigned int threads;
	unsigned int refresh_s;
	int gzip_level;
	unsigned int max_conn, max_conn_ip, timeout_s;
	bool no_hist;
};

/* One exposition, shared by the responses that send it. A result made
 * for a gzip scraper holds only the gzip bytes: the text was rendered into
 * the server's scratch buffers, which every scrape reuses. */
struct result {
	struct prom_expo e;
	bool plain;		/* e's text parts hold the exposition */
	atomic_int refs;	/* the server's "latest" + responses */
	uint64_t start_ns;	/* when its scrape began */
};

struct server {
	struct cli *cli;
	struct serve_opts o;
	struct target_args *targs;
	struct web_config web;
	bool have_web;
	int listen_fd;
	char addr[INET6_ADDRSTRLEN + 16];
	struct MHD_Daemon *d;

	/* Everything below is used under @lock, one scrape at a time. */
	pthread_mutex_t lock;
	struct kvmstats_host *host;
	struct prom_model *model;
	struct prom_pool *pool;
	struct prom_expo scratch;
	struct result results[MAX_RESULTS];
	struct result *latest[2];	/* per format */
	uint64_t scrapes[2];		/* per format */
	char last_errors[1024];		/* of the last refresh, said once */
	uint64_t read_errors[PROM_NSRC];
	uint64_t render_ns, refresh_ns;
	uint64_t rebuilds;		/* of the model: VMs came or went */
	atomic_uint_fast64_t busy;	/* requests refused: results all in use */
	uint64_t stale;			/* requests given the previous result */
	atomic_uint_fast64_t denied;	/* requests refused: authentication */
	char *landing;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the exporter's own metrics ------------------------------------------ */

/* The families with a sample per source. */
static void source_metrics(struct server *s, struct prom_buf *b,
			   enum prom_format f, const struct prom_model_stats *st)
{
	const char *const *names = kvmstats_sources();
	char lab[64];

	prom_family(b, f, "kvmstats_source_read_seconds", "gauge", "seconds",
		    "Time this scrape spent reading each source's VMs, summed over "
		    "the reading threads");
	for (unsigned int i = 0; names[i]; i++) {
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample(b, "kvmstats_source_read_seconds", lab,
			    kvmstats_host__sweep_ns(s->host, names[i]) / 1e9);
	}
	prom_family(b, f, "kvmstats_source_vms", "gauge", NULL,
		    "VMs read through each source");
	for (unsigned int i = 0; names[i]; i++) {
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample_u64(b, "kvmstats_source_vms", lab,
				st->src_vms[prom_source_index(names[i])]);
	}
	prom_family(b, f, "kvmstats_source_read_errors", "counter", NULL,
		    "Readings of a VM or vCPU that failed (its series were left "
		    "out of that scrape)");
	for (unsigned int i = 0; names[i]; i++) {
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample_u64(b, "kvmstats_source_read_errors_total", lab,
				s->read_errors[prom_source_index(names[i])]);
	}
	prom_family(b, f, "kvmstats_source_data_age_seconds", "gauge", "seconds",
		    "Age of the oldest reading a background source (QMP, libvirt) "
		    "served to this scrape; 0 for sources read on the spot");
	for (unsigned int i = 0; names[i]; i++) {
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample(b, "kvmstats_source_data_age_seconds", lab,
			    st->src_age_ns[prom_source_index(names[i])] / 1e9);
	}
}

static void own_metrics(struct server *s, struct prom_buf *b, enum prom_format f,
			uint64_t read_ns)
{
	struct prom_model_stats st;
	char lab[64];

	prom_model_stats(s->model, &st);
	prom_model_render_info(s->model, f, b);
	prom_family(b, f, "kvmstats_build_info", "gauge", NULL,
		    "The exporter's version (always 1)");
	snprintf(lab, sizeof(lab), "version=\"%s\"", kvmstats_version_string());
	prom_sample(b, "kvmstats_build_info", lab, 1);
	prom_family(b, f, "kvmstats_scrape_read_seconds", "gauge", "seconds",
		    "Wall time this scrape took to read every VM (one sweep)");
	prom_sample(b, "kvmstats_scrape_read_seconds", NULL, read_ns / 1e9);
	prom_family(b, f, "kvmstats_scrape_render_seconds", "gauge", "seconds",
		    "Wall time the previous scrape took to render its exposition");
	prom_sample(b, "kvmstats_scrape_render_seconds", NULL, s->render_ns / 1e9);
	source_metrics(s, b, f, &st);
	prom_family(b, f, "kvmstats_vmms", "gauge", NULL, "VMM processes exported");
	prom_sample_u64(b, "kvmstats_vmms", NULL, st.vmms);
	prom_family(b, f, "kvmstats_vms", "gauge", NULL, "VMs exported");
	prom_sample_u64(b, "kvmstats_vms", NULL, st.vms);
	prom_family(b, f, "kvmstats_vcpus", "gauge", NULL, "vCPUs exported");
	prom_sample_u64(b, "kvmstats_vcpus", NULL, st.vcpus);
	prom_family(b, f, "kvmstats_skipped_stats", "gauge", NULL,
		    "Stats left out: of a type or unit this version does not know, "
		    "clashing with another stat's name, or histograms left out "
		    "by --no-histograms");
	prom_sample_u64(b, "kvmstats_skipped_stats", NULL, st.skipped_stats);
	prom_family(b, f, "kvmstats_scrapes", "counter", NULL,
		    "Scrapes served per format (requests that shared one count once)");
	prom_sample_u64(b, "kvmstats_scrapes_total", "format=\"text\"",
			s->scrapes[PROM_TEXT]);
	prom_sample_u64(b, "kvmstats_scrapes_total", "format=\"openmetrics\"",
			s->scrapes[PROM_OPENMETRICS]);
	prom_family(b, f, "kvmstats_requests_refused", "counter", NULL,
		    "Requests refused: busy (every exposition buffer in use) or "
		    "unauthorized");
	prom_sample_u64(b, "kvmstats_requests_refused_total", "reason=\"busy\"",
			atomic_load(&s->busy));
	prom_sample_u64(b, "kvmstats_requests_refused_total", "reason=\"unauthorized\"",
			atomic_load(&s->denied));
	prom_family(b, f, "kvmstats_stale_responses", "counter", NULL,
		    "Requests given the previous exposition (at most --timeout "
		    "seconds old) because every exposition buffer was being sent");
	prom_sample_u64(b, "kvmstats_stale_responses_total", NULL, s->stale);
	prom_family(b, f, "kvmstats_read_threads", "gauge", NULL,
		    "Threads that read and render a scrape");
	prom_sample_u64(b, "kvmstats_read_threads", NULL, prom_pool_threads(s->pool));
	prom_family(b, f, "kvmstats_model_rebuilds", "counter", NULL,
		    "Times the metric families and label strings were rebuilt "
		    "because VMs or vCPUs came or went");
	prom_sample_u64(b, "kvmstats_model_rebuilds_total", NULL, s->rebuilds);
	prom_family(b, f, "kvmstats_host_refresh_seconds", "gauge", "seconds",
		    "Wall time of the last rescan of the host for VMMs");
	prom_sample(b, "kvmstats_host_refresh_seconds", NULL, s->refresh_ns / 1e9);
	prom_end(b, f);
}

/* ---- scrapes ---------------------------------------------------------------- */

static void result_put(struct result *r)
{
	atomic_fetch_sub(&r->refs, 1);
}

static struct result *free_result(struct server *s)
{
	for (int i = 0; i < MAX_RESULTS; i++)
		if (atomic_load(&s->results[i].refs) == 0)
			return &s->results[i];
	return NULL;
}

/* Read every VM and render: called under s->lock. NULL when every result
 * buffer is still being sent (errno EBUSY) or memory ran out. */
static struct result *collect(struct server *s, enum prom_format f, bool gz)
{
	struct result *r = free_result(s);
	struct prom_expo *out;
	uint64_t t0 = now_ns(), t1;
	int changed;

	if (!r) {
		errno = EBUSY;
		return NULL;
	}
	kvmstats_host__sweep_parallel(s->host, s->o.threads);
	t1 = now_ns();
	changed = prom_model_update(s->model, s->host);
	if (changed < 0) {
		errno = -changed;
		return NULL;
	}
	s->rebuilds += changed;
	prom_model_prepare(s->model);
	{
		struct prom_model_stats st;

		prom_model_stats(s->model, &st);
		for (int i = 0; i < PROM_NSRC; i++)
			s->read_errors[i] += st.src_errors[i];
	}
	/* A gzip scraper's text is only needed until it is compressed. */
	out = gz ? &s->scratch : &r->e;
	prom_expo_reset(out, f);
	prom_expo_reset(&r->e, f);
	errno = ENOMEM;
	if (prom_expo_render(s->pool, s->model, out))
		return NULL;
	s->scrapes[f]++;
	own_metrics(s, prom_expo_tail(out), f, t1 - t0);
	if (prom_expo_tail(out)->failed)
		return NULL;
	r->plain = !gz;
	if (gz && prom_expo_gzip(s->pool, out, &r->e, s->o.gzip_level))
		return NULL;
	s->render_ns = now_ns() - t1;
	r->start_ns = t0;
	atomic_store(&r->refs, 1);	/* the server's, as latest */
	if (s->latest[f])
		result_put(s->latest[f]);
	s->latest[f] = r;
	return r;
}

/* Can @r be sent as asked (text, or gzip made from its text)? */
static bool fits(const struct result *r, bool gz)
{
	return r && (r->plain || (gz && r->e.gz_ready));
}

/* The exposition for a request that arrived at @arrived: the latest one if
 * its scrape began after that (another request's scrape, which this one
 * waited for), else a new one. When every buffer is still being sent, the
 * latest one all the same if it is younger than the connection timeout:
 * slightly older readings rather than an error or more memory. Returns it
 * with a reference taken, or NULL (errno EBUSY or ENOMEM). */
static struct result *scrape(struct server *s, enum prom_format f, bool gz,
			     uint64_t arrived)
{
	struct result *r, *last;

	pthread_mutex_lock(&s->lock);
	last = s->latest[f];
	r = fits(last, gz) && last->start_ns >= arrived ? last : collect(s, f, gz);
	if (!r && errno == EBUSY && fits(last, gz) &&
	    now_ns() - last->start_ns < s->o.timeout_s * 1000000000ull) {
		r = last;
		s->stale++;
	}
	if (r && gz && !r->e.gz_ready &&
	    prom_expo_gzip(s->pool, &r->e, &r->e, s->o.gzip_level)) {
		errno = ENOMEM;
		r = NULL;
	}
	if (r)
		atomic_fetch_add(&r->refs, 1);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* ---- HTTP -------------------------------------------------------------------- */

/* The q-value a header list (Accept, Accept-Encoding) gives @token: 1 when
 * it names it without one, -1 when it does not name it. */
static double qvalue(const char *list, const char *token)
{
	size_t n = strlen(token);
	double best = -1;

	while (list && *list) {
		const char *end = strchr(list, ','), *q;
		size_t len;

		while (*list == ' ' || *list == '\t')
			list++;
		len = end ? (size_t)(end - list) : strlen(list);
		if (len >= n && !strncasecmp(list, token, n) &&
		    (len == n || list[n] == ';' || list[n] == ' ')) {
			double v = 1;

			q = strstr(list + n, "q=");
			if (q && q < list + len && (q[-1] == ';' || q[-1] == ' '))
				v = strtod(q + 2, NULL);
			if (v > best)
				best = v;
		}
		list = end ? end + 1 : NULL;
	}
	return best;
}

/* OpenMetrics when the scraper prefers it to the text format (Prometheus
 * asks for it first); the text format otherwise. */
static enum prom_format negotiate(const char *accept)
{
	double om = qvalue(accept, "application/openmetrics-text");
	double text = qvalue(accept, "text/plain");

	return om > 0 && om >= text ? PROM_OPENMETRICS : PROM_TEXT;
}

static void add_headers(struct server *s, struct MHD_Response *resp)
{
	for (size_t i = 0; s->have_web && i < s->web.nheaders; i++)
		MHD_add_response_header(resp, s->web.headers[i].name,
					s->web.headers[i].value);
}

static enum MHD_Result reply_text(struct server *s, struct MHD_Connection *c,
				  unsigned int code, const char *text)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; charset=utf-8");
	add_headers(s, resp);
	ret = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void release(void *cls)
{
	result_put(cls);
}

static enum MHD_Result serve_metrics(struct server *s, struct MHD_Connection *c,
				     uint64_t arrived)
{
	const char *acc = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						      MHD_HTTP_HEADER_ACCEPT);
	const char *enc = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						      MHD_HTTP_HEADER_ACCEPT_ENCODING);
	enum prom_format f = negotiate(acc);
	bool gz = qvalue(enc, "gzip") > 0;
	struct iovec iov[PROM_MAX_PARTS + 4];
	struct MHD_IoVec miov[PROM_MAX_PARTS + 4];
	struct MHD_Response *resp;
	struct result *r;
	enum MHD_Result ret;
	size_t n;

	r = scrape(s, f, gz, arrived);
	if (!r) {
		if (errno == EBUSY) {
			atomic_fetch_add(&s->busy, 1);
			return reply_text(s, c, MHD_HTTP_SERVICE_UNAVAILABLE,
					  "busy: every exposition buffer is still being "
					  "sent to other clients\n");
		}
		return reply_text(s, c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				  "scrape failed: out of memory\n");
	}
	n = prom_expo_iov(&r->e, gz, iov, PROM_MAX_PARTS + 4);
	for (size_t i = 0; i < n; i++)
		miov[i] = (struct MHD_IoVec){ iov[i].iov_base, iov[i].iov_len };
	resp = MHD_create_response_from_iovec(miov, (unsigned int)n, release, r);
	if (!resp) {
		result_put(r);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				f == PROM_OPENMETRICS ? PROM_OM_CTYPE : PROM_TEXT_CTYPE);
	if (gz)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Accept, Accept-Encoding");
	add_headers(s, resp);
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result serve_landing(struct server *s, struct MHD_Connection *c)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		strlen(s->landing), s->landing, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/html; charset=utf-8");
	add_headers(s, resp);
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Basic auth, when the web config lists users. */
static bool authorized(struct server *s, struct MHD_Connection *c)
{
	char *user, *pass = NULL;
	bool ok;

	if (!s->have_web || !web_config_auth(&s->web))
		return true;
	user = MHD_basic_auth_get_username_password(c, &pass);
	ok = user && pass && web_auth_check(&s->web, user, pass);
	if (pass) {
		explicit_bzero(pass, strlen(pass));
		MHD_free(pass);
	}
	if (user)
		MHD_free(user);
	return ok;
}

static enum MHD_Result deny(struct server *s, struct MHD_Connection *c)
{
	static const char text[] = "unauthorized\n";
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		sizeof(text) - 1, (void *)text, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	atomic_fetch_add(&s->denied, 1);
	if (!resp)
		return MHD_NO;
	add_headers(s, resp);
	ret = MHD_queue_basic_auth_fail_response(c, "kvmstats", resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Per request: when it arrived and how much body it sent. */
struct request {
	uint64_t arrived;
	size_t body;
};

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct server *s = cls;
	struct request *rq = *con_cls;

	(void)version;
	(void)upload;
	if (!rq) {
		/* First call: headers only. Anything but GET/HEAD is refused
		 * before a body is read. */
		if (strcmp(method, MHD_HTTP_METHOD_GET) &&
		    strcmp(method, MHD_HTTP_METHOD_HEAD))
			return reply_text(s, c, MHD_HTTP_METHOD_NOT_ALLOWED,
					  "only GET and HEAD\n");
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		rq->arrived = now_ns();
		*con_cls = rq;
		return MHD_YES;
	}
	if (*upload_size) {
		rq->body += *upload_size;
		*upload_size = 0;
		/* A GET with a body is odd; a big one is an attack. */
		return rq->body > MAX_BODY ? MHD_NO : MHD_YES;
	}
	if (!authorized(s, c))
		return deny(s, c);
	if (!strcmp(url, s->o.path))
		return serve_metrics(s, c, rq->arrived);
	if (!strcmp(url, "/"))
		return serve_landing(s, c);
	return reply_text(s, c, MHD_HTTP_NOT_FOUND, "not found: see /\n");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode code)
{
	(void)cls;
	(void)c;
	(void)code;
	free(*con_cls);
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct server *s = cls;
	char msg[512];
	size_t n;

	if (s->cli->verbose <= 0)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = 0;
	cli_warn(s->cli, "http: %s", msg);
}

/* ---- start-up ------------------------------------------------------------------ */

/* "ADDR:PORT" or "[ADDR]:PORT" of a bound socket (port 0 picks one). */
static void addr_text(int fd, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char a[INET6_ADDRSTRLEN] = "?";

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

/*
 * Capabilities. Reading another process's stats fds takes listing
 * /proc/PID/fd and pidfd_getfd(), both ptrace access checks: the same
 * uid, or CAP_SYS_PTRACE (which also covers Yama and non-dumpable VMMs,
 * and the opt-in attach source's ptrace). A VMM running as another user
 * (libvirt's qemu) keeps /proc/PID/fd at mode 0500 for its owner, which
 * only CAP_DAC_READ_SEARCH lets us list. Nothing else is needed after the
 * socket is bound and the TLS files are read: every other capability is
 * dropped, from the bounding set too, and no exec can regain one.
 */
static void drop_caps(struct server *s)
{
	static const int keep[] = { CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH };
	bool setpcap;

	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	capng_get_caps_process();
	setpcap = capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP);
	if (capng_have_capabilities(CAPNG_SELECT_CAPS) == CAPNG_NONE && !setpcap)
		return;	/* an unprivileged run: nothing to give up */
	{
		bool had[2];

		for (int i = 0; i < 2; i++)
			had[i] = capng_have_capability(CAPNG_PERMITTED, keep[i]);
		capng_clear(CAPNG_SELECT_BOTH);
		for (int i = 0; i < 2; i++)
			if (had[i])
				capng_update(CAPNG_ADD, CAPNG_EFFECTIVE | CAPNG_PERMITTED,
					     keep[i]);
		for (int i = 0; i < 2; i++)
			if (had[i])
				capng_update(CAPNG_ADD, CAPNG_BOUNDING_SET, keep[i]);
	}
	if (capng_apply(setpcap ? CAPNG_SELECT_BOTH : CAPNG_SELECT_CAPS))
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

static int start_http(struct server *s)
{
	unsigned int flags = MHD_USE_THREAD_PER_CONNECTION |
			     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			     MHD_USE_ERROR_LOG;
	bool tls = s->have_web && web_config_tls(&s->web);
	struct MHD_OptionItem topts[] = {
		{ MHD_OPTION_HTTPS_MEM_CERT, 0, tls ? s->web.cert_pem : NULL },
		{ MHD_OPTION_HTTPS_MEM_KEY, 0, tls ? s->web.key_pem : NULL },
		{ MHD_OPTION_HTTPS_PRIORITIES, 0, tls ? s->web.priorities : NULL },
		{ MHD_OPTION_END, 0, NULL },
	};
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (tls) {
		if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
			cli_err(s->cli, "this libmicrohttpd was built without TLS");
			return -1;
		}
		flags |= MHD_USE_TLS;
	}
	getsockname(s->listen_fd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->d = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, s,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
		MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
		MHD_OPTION_CONNECTION_LIMIT, s->o.max_conn,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->o.max_conn_ip,
		MHD_OPTION_CONNECTION_TIMEOUT, s->o.timeout_s,
		/* Request line and headers must fit in 16 KiB (a
		 * Prometheus scrape sends well under 1 KiB). */
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384,
		MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512 * 1024),
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_ARRAY, tls ? topts : &topts[3],
		MHD_OPTION_END);
	if (!s->d) {
		cli_err(s->cli, "cannot start the HTTP server on %s%s", s->addr,
			tls ? " (is the TLS certificate or key valid?)" : "");
		return -1;
	}
	return 0;
}

static void write_ready(struct server *s)
{
	char tmp[4096];
	FILE *f;

	if (!s->o.ready)
		return;
	snprintf(tmp, sizeof(tmp), "%s.tmp", s->o.ready);
	f = fopen(tmp, "we");
	if (!f) {
		cli_warn(s->cli, "--ready %s: %s", s->o.ready, strerror(errno));
		return;
	}
	fprintf(f, "%s\n", s->addr);
	if (fclose(f) || rename(tmp, s->o.ready))
		cli_warn(s->cli, "--ready %s: %s", s->o.ready, strerror(errno));
}

static void refresh(struct server *s)
{
	uint64_t t0 = now_ns();
	int n;

	pthread_mutex_lock(&s->lock);
	n = kvmstats_host__refresh(s->host);
	s->refresh_ns = now_ns() - t0;
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		cli_warn(s->cli, "scanning the host: %s", strerror(-n));
	/* A --pid VMM that cannot be read is said once, not every refresh. */
	if (strcmp(s->last_errors, kvmstats_host__errors(s->host))) {
		snprintf(s->last_errors, sizeof(s->last_errors), "%s",
			 kvmstats_host__errors(s->host));
		target_report_errors(s->cli, s->host);
	}
}

/* Until SIGINT or SIGTERM: rescan the host every refresh_s seconds. */
static void main_loop(struct server *s, const sigset_t *set)
{
	struct timespec ts = { .tv_sec = s->o.refresh_s };

	for (;;) {
		int sig = sigtimedwait(set, NULL, &ts);

		if (sig == SIGINT || sig == SIGTERM)
			return;
		if (sig < 0 && errno == EINTR)
			continue;
		refresh(s);
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
		cli_err(cli, "serve --hash-password: no password on stdin");
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

static int parse_opts(struct cli *cli, struct serve_opts *o, struct target_args *a,
		      int argc, char **argv, bool *hash)
{
	static const struct option opts[] = {
		CLI_TARGET_LONGOPTS,
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "web-config", required_argument, NULL, OPT_WEB_CONFIG },
		{ "web.config.file", required_argument, NULL, OPT_WEB_CONFIG },
		{ "path", required_argument, NULL, OPT_PATH },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "refresh", required_argument, NULL, OPT_REFRESH },
		{ "no-histograms", no_argument, NULL, OPT_NO_HIST },
		{ "gzip-level", required_argument, NULL, OPT_GZIP_LEVEL },
		{ "max-connections", required_argument, NULL, OPT_MAX_CONN },
		{ "max-connections-per-ip", required_argument, NULL, OPT_MAX_CONN_IP },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "ready", required_argument, NULL, OPT_READY },
		{ "hash-password", no_argument, NULL, OPT_HASH },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	long v;
	int c;

	while ((c = getopt_long(argc, argv, CLI_TARGET_SHORTOPTS "l:h", opts,
				NULL)) != -1) {
		int used = cli_target_opt(cli, a, c, optarg);

		if (used < 0)
			return EXIT_USAGE;
		if (used)
			continue;
		v = 0;
		switch (c) {
		case 'l':
		case OPT_LISTEN:
			o->listen = optarg;
			break;
		case OPT_WEB_CONFIG:
			o->web_config = optarg;
			break;
		case OPT_PATH:
			if (optarg[0] != '/' || !strcmp(optarg, "/")) {
				cli_err(cli, "--path: '%s' must start with / and not be /",
					optarg);
				return EXIT_USAGE;
			}
			o->path = optarg;
			break;
		case OPT_READY:
			o->ready = optarg;
			break;
		case OPT_NO_HIST:
			o->no_hist = true;
			break;
		case OPT_HASH:
			*hash = true;
			break;
		case OPT_THREADS:
			v = cli_parse_long(cli, "--threads", optarg, 0, PROM_MAX_PARTS);
			o->threads = (unsigned int)v;
			break;
		case OPT_REFRESH:
			v = cli_parse_long(cli, "--refresh", optarg, 1, 86400);
			o->refresh_s = (unsigned int)v;
			break;
		case OPT_GZIP_LEVEL:
			v = cli_parse_long(cli, "--gzip-level", optarg, 1, 9);
			o->gzip_level = (int)v;
			break;
		case OPT_MAX_CONN:
			v = cli_parse_long(cli, "--max-connections", optarg, 1, 4096);
			o->max_conn = (unsigned int)v;
			break;
		case OPT_MAX_CONN_IP:
			v = cli_parse_long(cli, "--max-connections-per-ip", optarg, 1, 4096);
			o->max_conn_ip = (unsigned int)v;
			break;
		case OPT_TIMEOUT:
			v = cli_parse_long(cli, "--timeout", optarg, 1, 3600);
			o->timeout_s = (unsigned int)v;
			break;
		case 'h':
			printf("usage: %s serve %s\n", cli->prog, serve_usage);
			return -1;
		default:
			return cli_usage(cli, "serve", serve_usage);
		}
		if (v < 0)
			return EXIT_USAGE;
	}
	if (optind < argc) {
		cli_err(cli, "serve: unexpected argument '%s'", argv[optind]);
		return cli_usage(cli, "serve", serve_usage);
	}
	if (a->nfiles) {
		cli_err(cli, "serve: --file is not served (image files do not change)");
		return EXIT_USAGE;
	}
	return 0;
}

static void server_free(struct server *s)
{
	if (s->d)
		MHD_stop_daemon(s->d);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	/* Every response is gone with the daemon: the results are free. */
	for (int i = 0; i < MAX_RESULTS; i++)
		prom_expo_free(&s->results[i].e);
	prom_expo_free(&s->scratch);
	prom_pool_free(s->pool);
	prom_model_free(s->model);
	kvmstats_host__free(s->host);
	if (s->have_web)
		web_config_free(&s->web);
	free(s->landing);
	pthread_mutex_destroy(&s->lock);
}

static int run(struct server *s)
{
	sigset_t set;
	char why[512];

	if (s->o.web_config) {
		if (web_config_load(&s->web, s->o.web_config, why, sizeof(why))) {
			cli_err(s->cli, "%s", why);
			return EXIT_FAIL;
		}
		s->have_web = true;
	}
	if (open_listener(s))
		return EXIT_FAIL;
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
		cli_err(s->cli, "serve: out of memory");
		return EXIT_FAIL;
	}
	refresh(s);
	if (start_http(s))
		return EXIT_FAIL;
	if (s->cli->verbose >= 0)
		fprintf(stderr, "%s: serving %s://%s%s (%zu VMMs)\n", s->cli->prog,
			s->have_web && web_config_tls(&s->web) ? "https" : "http",
			s->addr, s->o.path, kvmstats_host__num_vmms(s->host));
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
		       .max_conn_ip = 16, .timeout_s = 10 },
	};
	bool hash = false;
	int ret;

	if (target_args_init(&a, argc))
		return EXIT_FAIL;
	pthread_mutex_init(&s.lock, NULL);
	ret = parse_opts(cli, &s.o, &a, argc, argv, &hash);
	if (ret == -1)
		ret = EXIT_OK;
	else if (!ret && hash)
		ret = hash_password(cli);
	else if (!ret)
		ret = run(&s);
	server_free(&s);
	target_args_free(&a);
	return ret;
}
