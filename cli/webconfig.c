// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The web configuration file of `kvmstats serve`, in the format the
 * Prometheus exporters share (node_exporter's --web.config.file):
 *
 *   tls_server_config:
 *     cert_file: server.crt         # relative to this file's directory
 *     key_file: server.key
 *     min_version: TLS12            # TLS10..TLS13; default TLS12
 *     max_version: TLS13
 *   http_server_config:
 *     headers:                      # security headers added to responses
 *       Strict-Transport-Security: max-age=31536000
 *   basic_auth_users:
 *     prometheus: $2y$10$...        # bcrypt hashes
 *
 * Parsed with libyaml; passwords checked with libxcrypt's bcrypt. A key
 * this file does not support is an error, never silently ignored: a user
 * who asked for client certificates must not get a server without them.
 */
#include <crypt.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "webconfig.h"

#define MAX_FILE (1u << 20)

struct loader {
	struct web_config *wc;
	yaml_document_t *doc;
	char *dir;
	char *err;
	size_t errlen;
};

static int fail(struct loader *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(struct loader *l, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(l->err, l->errlen, "%s: ", l->wc->path);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < l->errlen)
		vsnprintf(l->err + n, l->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* Read a whole (small) file into a NUL-terminated buffer. */
static char *slurp(const char *path, size_t *len, int *err)
{
	struct stat st;
	char *buf = NULL;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	*err = 0;
	if (fd < 0) {
		*err = errno;
		return NULL;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE) {
		*err = errno ? errno : EFBIG;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		*err = ENOMEM;
		goto out;
	}
	n = read(fd, buf, (size_t)st.st_size);
	if (n < 0) {
		*err = errno;
		free(buf);
		buf = NULL;
		goto out;
	}
	buf[n] = 0;
	if (len)
		*len = (size_t)n;
out:
	close(fd);
	return buf;
}

static yaml_node_t *node(struct loader *l, int id)
{
	return yaml_document_get_node(l->doc, id);
}

static const char *scalar(const yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value
						: NULL;
}

/* "key:" with nothing after it: a null, which means "not set". */
static bool is_null(const yaml_node_t *n)
{
	const char *s = scalar(n);

	return s && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       (!*s || !strcmp(s, "~") || !strcmp(s, "null"));
}

/* Read a file named in the config, relative to the config's directory. */
static char *read_named(struct loader *l, const char *key, const char *name)
{
	char path[4096];
	char *buf;
	int err;

	if (name[0] == '/')
		snprintf(path, sizeof(path), "%s", name);
	else
		snprintf(path, sizeof(path), "%s/%s", l->dir, name);
	buf = slurp(path, NULL, &err);
	if (!buf)
		fail(l, "%s %s: %s", key, path, strerror(err));
	return buf;
}

static int tls_version(const char *s)
{
	static const char *const names[] = { "TLS10", "TLS11", "TLS12", "TLS13" };

	for (int i = 0; i < 4; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

/* GnuTLS priorities allowing versions min..max (0: TLS 1.0 .. 3: 1.3). */
static int set_priorities(struct loader *l, int min, int max)
{
	static const char *const vers[] = { "+VERS-TLS1.0", "+VERS-TLS1.1",
					    "+VERS-TLS1.2", "+VERS-TLS1.3" };
	char buf[160] = "NORMAL:-VERS-ALL";

	if (min > max)
		return fail(l, "tls_server_config: min_version is above max_version");
	for (int v = max; v >= min; v--) {
		strcat(buf, ":");
		strcat(buf, vers[v]);
	}
	l->wc->priorities = strdup(buf);
	return l->wc->priorities ? 0 : fail(l, "out of memory");
}

static int load_tls(struct loader *l, yaml_node_t *map)
{
	const char *cert = NULL, *key = NULL;
	int min = 2, max = 3;

	if (is_null(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return fail(l, "tls_server_config must be a mapping");
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		const char *k = scalar(node(l, p->key)), *v = scalar(node(l, p->value));

		if (!k || !v)
			return fail(l, "tls_server_config: every value must be a string");
		if (!strcmp(k, "cert_file")) {
			cert = v;
		} else if (!strcmp(k, "key_file")) {
			key = v;
		} else if (!strcmp(k, "min_version") || !strcmp(k, "max_version")) {
			int ver = tls_version(v);

			if (ver < 0)
				return fail(l, "%s: what is '%s'? (TLS10, TLS11, TLS12, TLS13)",
					    k, v);
			*(k[1] == 'i' ? &min : &max) = ver;
		} else if (!strcmp(k, "client_auth_type")) {
			if (strcmp(v, "NoClientCert"))
				return fail(l, "client_auth_type %s is not supported "
					    "(client certificates are not checked)", v);
		} else {
			return fail(l, "tls_server_config: %s is not supported", k);
		}
	}
	if (!cert || !key || !*cert || !*key)
		return fail(l, "tls_server_config needs both cert_file and key_file");
	l->wc->cert_pem = read_named(l, "cert_file", cert);
	if (!l->wc->cert_pem)
		return -1;
	l->wc->key_pem = read_named(l, "key_file", key);
	if (!l->wc->key_pem)
		return -1;
	return set_priorities(l, min, max);
}

/* The response headers the exporters let a config add. */
static bool allowed_header(const char *name)
{
	static const char *const ok[] = {
		"Content-Security-Policy", "X-Frame-Options",
		"X-Content-Type-Options", "X-XSS-Protection",
		"Strict-Transport-Security",
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcasecmp(name, ok[i]))
			return true;
	return false;
}

static bool clean_value(const char *v)
{
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

static int load_headers(struct loader *l, yaml_node_t *map)
{
	struct web_config *wc = l->wc;

	if (is_null(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return fail(l, "http_server_config.headers must be a mapping");
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		const char *k = scalar(node(l, p->key)), *v = scalar(node(l, p->value));
		void *q;

		if (!k || !v)
			return fail(l, "headers: every value must be a string");
		if (!allowed_header(k))
			return fail(l, "headers: %s cannot be set", k);
		if (!clean_value(v))
			return fail(l, "headers: the value of %s has control characters", k);
		q = realloc(wc->headers, (wc->nheaders + 1) * sizeof(*wc->headers));
		if (!q)
			return fail(l, "out of memory");
		wc->headers = q;
		wc->headers[wc->nheaders].name = strdup(k);
		wc->headers[wc->nheaders].value = strdup(v);
		if (!wc->headers[wc->nheaders++].value)
			return fail(l, "out of memory");
	}
	return 0;
}

static int load_http(struct loader *l, yaml_node_t *map)
{
	if (is_null(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return fail(l, "http_server_config must be a mapping");
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		const char *k = scalar(node(l, p->key));

		if (!k)
			return fail(l, "http_server_config: a key must be a string");
		if (!strcmp(k, "headers")) {
			if (load_headers(l, node(l, p->value)))
				return -1;
		} else if (strcmp(k, "http2")) {
			/* http2 is accepted: this server speaks HTTP/1.1. */
			return fail(l, "http_server_config: %s is not supported", k);
		}
	}
	return 0;
}

static bool bcrypt_hash(const char *h)
{
	return strlen(h) == 60 && h[0] == '$' && h[1] == '2' &&
	       (h[2] == 'a' || h[2] == 'b' || h[2] == 'y') && h[3] == '$';
}

static int load_users(struct loader *l, yaml_node_t *map)
{
	struct web_config *wc = l->wc;

	if (is_null(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return fail(l, "basic_auth_users must be a mapping");
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start;
	     p < map->data.mapping.pairs.top; p++) {
		const char *k = scalar(node(l, p->key)), *v = scalar(node(l, p->value));
		void *q;

		if (!k || !v || !*k)
			return fail(l, "basic_auth_users: user names and hashes are strings");
		if (strchr(k, ':'))
			return fail(l, "basic_auth_users: '%s': a user name cannot hold ':'", k);
		if (!bcrypt_hash(v))
			return fail(l, "basic_auth_users: the hash of %s is not a bcrypt "
				    "hash ($2y$...; see kvmstats serve --hash-password)", k);
		for (size_t i = 0; i < wc->nusers; i++)
			if (!strcmp(wc->users[i].name, k))
				return fail(l, "basic_auth_users: %s is listed twice", k);
		q = realloc(wc->users, (wc->nusers + 1) * sizeof(*wc->users));
		if (!q)
			return fail(l, "out of memory");
		wc->users = q;
		wc->users[wc->nusers] = (struct web_user){ strdup(k), strdup(v), NULL };
		if (!wc->users[wc->nusers++].hash)
			return fail(l, "out of memory");
	}
	return 0;
}

static int load_root(struct loader *l)
{
	yaml_node_t *root = yaml_document_get_root_node(l->doc);

	if (!root || is_null(root))
		return 0;	/* an empty file: no TLS, no auth */
	if (root->type != YAML_MAPPING_NODE)
		return fail(l, "expected a mapping at the top");
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
	     p < root->data.mapping.pairs.top; p++) {
		const char *k = scalar(node(l, p->key));
		yaml_node_t *v = node(l, p->value);
		int err;

		if (!k)
			return fail(l, "a key at the top is not a string");
		if (!strcmp(k, "tls_server_config"))
			err = load_tls(l, v);
		else if (!strcmp(k, "http_server_config"))
			err = load_http(l, v);
		else if (!strcmp(k, "basic_auth_users"))
			err = load_users(l, v);
		else
			err = fail(l, "%s is not supported (tls_server_config, "
				   "http_server_config, basic_auth_users)", k);
		if (err)
			return err;
	}
	return 0;
}

int web_config_load(struct web_config *wc, const char *path, char *err,
		    size_t errlen)
{
	struct loader l = { .wc = wc, .err = err, .errlen = errlen };
	yaml_parser_t parser;
	yaml_document_t doc;
	char *text, *copy;
	size_t len;
	int e, ret = -1;

	memset(wc, 0, sizeof(*wc));
	pthread_mutex_init(&wc->lock, NULL);
	wc->path = strdup(path);
	text = slurp(path, &len, &e);
	if (!text || !wc->path) {
		snprintf(err, errlen, "%s: %s", path, strerror(e ? e : ENOMEM));
		free(text);
		web_config_free(wc);
		return -1;
	}
	copy = strdup(path);
	l.dir = copy ? strdup(dirname(copy)) : NULL;
	free(copy);
	if (!yaml_parser_initialize(&parser)) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out_text;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(err, errlen, "%s:%zu: %s", path,
			 (size_t)parser.problem_mark.line + 1,
			 parser.problem ? parser.problem : "not valid YAML");
		goto out_parser;
	}
	l.doc = &doc;
	ret = l.dir ? load_root(&l) : fail(&l, "out of memory");
	yaml_document_delete(&doc);
out_parser:
	yaml_parser_delete(&parser);
out_text:
	free(text);
	free(l.dir);
	/* All or nothing: a config that failed leaves nothing allocated. */
	if (ret)
		web_config_free(wc);
	return ret;
}

static void wipe(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void web_config_free(struct web_config *wc)
{
	for (size_t i = 0; i < wc->nusers; i++) {
		free(wc->users[i].name);
		free(wc->users[i].hash);
		wipe(wc->users[i].cached);
	}
	for (size_t i = 0; i < wc->nheaders; i++) {
		free(wc->headers[i].name);
		free(wc->headers[i].value);
	}
	free(wc->users);
	free(wc->headers);
	wipe(wc->key_pem);
	free(wc->cert_pem);
	free(wc->priorities);
	free(wc->path);
	pthread_mutex_destroy(&wc->lock);
	memset(wc, 0, sizeof(*wc));
}

/* Compare without an early exit, so that timing tells nothing. */
static bool same(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char d = la != lb;

	for (size_t i = 0; i < la && i < lb; i++)
		d |= (unsigned char)(a[i] ^ b[i]);
	return !d;
}

/* crypt(3) of @pass with @setting into a fresh string (NULL on failure). */
static char *hash_with(const char *pass, const char *setting)
{
	struct crypt_data *cd = calloc(1, sizeof(*cd));
	char *out = NULL, *h;

	if (!cd)
		return NULL;
	h = crypt_rn(pass, setting, cd, sizeof(*cd));
	/* libxcrypt fails with a string starting with '*'. */
	if (h && h[0] != '*')
		out = strdup(h);
	explicit_bzero(cd, sizeof(*cd));
	free(cd);
	return out;
}

static char *cheap_digest(const char *pass)
{
	char salt[CRYPT_GENSALT_OUTPUT_SIZE];

	/* SHA-256 crypt at its fewest rounds: a salted digest, ~0.3 ms. */
	if (!crypt_gensalt_rn("$5$", 1000, NULL, 0, salt, sizeof(salt)))
		return NULL;
	return hash_with(pass, salt);
}

static struct web_user *user_of(struct web_config *wc, const char *user)
{
	struct web_user *u = NULL;

	for (size_t i = 0; i < wc->nusers; i++)
		if (same(wc->users[i].name, user))
			u = &wc->users[i];
	return u;
}

bool web_auth_cached(struct web_config *wc, const char *user, const char *pass)
{
	struct web_user *u = user_of(wc, user);
	char *cached = NULL, *h;
	bool ok;

	if (u) {
		pthread_mutex_lock(&wc->lock);
		cached = u->cached ? strdup(u->cached) : NULL;
		pthread_mutex_unlock(&wc->lock);
	}
	if (!cached)
		return false;
	h = hash_with(pass, cached);
	ok = h && same(h, cached);
	wipe(h);
	wipe(cached);
	return ok;
}

bool web_auth_check(struct web_config *wc, const char *user, const char *pass)
{
	struct web_user *u = user_of(wc, user);
	char *cached, *h;
	bool ok;

	if (web_auth_cached(wc, user, pass))
		return true;
	/* An unknown user costs a bcrypt all the same. */
	h = hash_with(pass, u ? u->hash : wc->users[0].hash);
	ok = u && h && same(h, u->hash);
	wipe(h);
	if (!ok)
		return false;
	cached = cheap_digest(pass);
	pthread_mutex_lock(&wc->lock);
	wipe(u->cached);
	u->cached = cached;
	pthread_mutex_unlock(&wc->lock);
	return true;
}

int web_hash_password(const char *pass, char *out, size_t len)
{
	char salt[CRYPT_GENSALT_OUTPUT_SIZE];
	char *h;

	/* Cost 10, as htpasswd -B uses. */
	if (!crypt_gensalt_rn("$2b$", 10, NULL, 0, salt, sizeof(salt)))
		return -errno;
	h = hash_with(pass, salt);
	if (!h)
		return -EINVAL;
	snprintf(out, len, "%s", h);
	wipe(h);
	return 0;
}
