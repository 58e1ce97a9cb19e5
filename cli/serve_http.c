// SPDX-License-Identifier: GPL-2.0-or-later
/* kvmstats serve: scrapes and HTTP requests; see serve.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>

#include "prom_process.h"
#include "serve.h"

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
		    "served to this scrape; 0 for sources read on the spot; "
		    "absent for a source that served none");
	for (unsigned int i = 0; names[i]; i++) {
		/* No reading served, no age: not 0, which reads as fresh. */
		if (!st->src_read[prom_source_index(names[i])])
			continue;
		snprintf(lab, sizeof(lab), "source=\"%s\"", names[i]);
		prom_sample(b, "kvmstats_source_data_age_seconds", lab,
			    st->src_age_ns[prom_source_index(names[i])] / 1e9);
	}
}

static void own_metrics(struct server *s, struct prom_buf *b, enum prom_format f,
			uint64_t read_ns)
{
	struct prom_model_stats st;

	prom_model_stats(s->model, &st);
	prom_model_render_info(s->model, f, b);
	prom_process_metrics(b, f);
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
	prom_family(b, f, "kvmstats_hidden_processes", "gauge", NULL,
		    "Processes of other users whose fds this exporter may not "
		    "look at (not root, no CAP_SYS_PTRACE): VMMs among them are "
		    "not exported");
	prom_sample_u64(b, "kvmstats_hidden_processes", NULL, (uint64_t)s->hidden_procs);
	prom_family(b, f, "kvmstats_hidden_vmms", "gauge", NULL,
		    "Of those, the processes known to hold a VM (a kvm-pit thread "
		    "names them)");
	prom_sample_u64(b, "kvmstats_hidden_vmms", NULL, (uint64_t)s->hidden_vmms);
	prom_family(b, f, "kvmstats_skipped_stats", "gauge", NULL,
		    "Stats left out: of a type or unit this version does not know, "
		    "clashing with another stat's name, or histograms left out "
		    "by --no-histograms");
	prom_sample_u64(b, "kvmstats_skipped_stats", NULL, st.skipped_stats);
	prom_family(b, f, "kvmstats_series_cut", "gauge", NULL,
		    "Series left out: past a VMM's share of samples (4096, and "
		    "512 per vCPU)");
	prom_sample_u64(b, "kvmstats_series_cut", NULL, st.series_cut);
	prom_family(b, f, "kvmstats_scrapes", "counter", NULL,
		    "Scrapes served per format (requests that shared one count once)");
	prom_sample_u64(b, "kvmstats_scrapes_total", "format=\"text\"",
			s->scrapes[PROM_TEXT]);
	prom_sample_u64(b, "kvmstats_scrapes_total", "format=\"openmetrics\"",
			s->scrapes[PROM_OPENMETRICS]);
	prom_family(b, f, "kvmstats_requests_refused", "counter", NULL,
		    "Requests refused: busy (every exposition buffer in use), "
		    "unauthorized, or throttled (too many failed logins)");
	prom_sample_u64(b, "kvmstats_requests_refused_total", "reason=\"busy\"",
			atomic_load(&s->busy));
	prom_sample_u64(b, "kvmstats_requests_refused_total", "reason=\"unauthorized\"",
			atomic_load(&s->denied));
	prom_sample_u64(b, "kvmstats_requests_refused_total", "reason=\"throttled\"",
			atomic_load(&s->guard.throttled));
	prom_family(b, f, "kvmstats_connections_closed", "counter", NULL,
		    "Connections the exporter closed: no request head within 5 s "
		    "(late), let go for a newcomer when the slots were full "
		    "(evicted), or refused for want of a slot (refused)");
	prom_sample_u64(b, "kvmstats_connections_closed_total", "reason=\"late\"",
			atomic_load(&s->guard.late));
	prom_sample_u64(b, "kvmstats_connections_closed_total", "reason=\"evicted\"",
			atomic_load(&s->guard.evicted));
	prom_sample_u64(b, "kvmstats_connections_closed_total", "reason=\"refused\"",
			atomic_load(&s->guard.refused));
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
	plan_metrics(s, b, f);
	follow_metrics(s, b, f);
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

/* A short text answer, with one more header when @name is set. */
static enum MHD_Result reply_text_with(struct server *s, struct MHD_Connection *c,
				       unsigned int code, const char *text,
				       const char *name, const char *value)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; charset=utf-8");
	if (name)
		MHD_add_response_header(resp, name, value);
	add_headers(s, resp);
	ret = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result reply_text(struct server *s, struct MHD_Connection *c,
				  unsigned int code, const char *text)
{
	return reply_text_with(s, c, code, text, NULL, NULL);
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

/* Basic auth, when the web config lists users: throttled (serve_guard.c). */
static enum auth_result authorized(struct server *s, struct MHD_Connection *c,
				   unsigned int *wait_s)
{
	enum auth_result res = AUTH_DENIED;
	char *user, *pass = NULL;

	if (!s->have_web || !web_config_auth(&s->web))
		return AUTH_OK;
	user = MHD_basic_auth_get_username_password(c, &pass);
	if (user && pass)
		res = guard_auth(s, c, user, pass, wait_s);
	if (pass) {
		explicit_bzero(pass, strlen(pass));
		MHD_free(pass);
	}
	if (user)
		MHD_free(user);
	return res;
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

/* Too many failed logins from this address, or from all of them. */
static enum MHD_Result throttle(struct server *s, struct MHD_Connection *c,
				unsigned int wait_s)
{
	char after[16];

	snprintf(after, sizeof(after), "%u", wait_s);
	return reply_text_with(s, c, MHD_HTTP_TOO_MANY_REQUESTS,
			       "too many failed logins: try again later\n",
			       MHD_HTTP_HEADER_RETRY_AFTER, after);
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
	unsigned int wait_s = 0;

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
		guard_request(s, c, true);
		return MHD_YES;
	}
	if (*upload_size) {
		rq->body += *upload_size;
		*upload_size = 0;
		/* A GET with a body is odd; a big one is an attack. */
		return rq->body > MAX_BODY ? MHD_NO : MHD_YES;
	}
	switch (authorized(s, c, &wait_s)) {
	case AUTH_DENIED:
		return deny(s, c);
	case AUTH_THROTTLED:
		return throttle(s, c, wait_s);
	case AUTH_OK:
		break;
	}
	if (!strcmp(url, s->o.path))
		return serve_metrics(s, c, rq->arrived);
	if (!strcmp(url, "/"))
		return serve_landing(s, c);
	return reply_text(s, c, MHD_HTTP_NOT_FOUND, "not found: see /\n");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode code)
{
	(void)code;
	/* Kept alive, it waits for its next head: under the deadline again. */
	guard_request(cls, c, false);
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

int start_http(struct server *s)
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
	struct sockaddr_storage ss = { 0 };
	socklen_t sl = sizeof(ss);

	if (tls) {
		if (!MHD_is_feature_supported(MHD_FEATURE_TLS)) {
			cli_err(s->cli, "this libmicrohttpd was built without TLS");
			return -1;
		}
		flags |= MHD_USE_TLS;
	}
	if (!getsockname(s->listen_fd, (struct sockaddr *)&ss, &sl) &&
	    ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->d = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, s,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
		MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
		/* Connection slots are serve_guard.c's to hand out. */
		MHD_OPTION_CONNECTION_LIMIT, guard_mhd_limit(s),
		MHD_OPTION_NOTIFY_CONNECTION, guard_notify, s,
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
