/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The exporter's web configuration: TLS and basic auth, in the YAML
 * format of the Prometheus exporters' --web.config.file (node_exporter's).
 */
#ifndef KVMSTATS_WEBCONFIG_H
#define KVMSTATS_WEBCONFIG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct web_user {
	char *name;
	char *hash;		/* bcrypt ($2a$, $2b$, $2y$) */
	/* After a success: a cheap salted digest of that password, so that a
	 * scraper's every request does not cost a bcrypt (about 50 ms). */
	char *cached;
};

struct web_header {
	char *name, *value;
};

struct web_config {
	char *path;
	/* tls_server_config */
	char *cert_pem, *key_pem;	/* file contents, NUL-terminated */
	char *priorities;		/* GnuTLS priority string */
	/* basic_auth_users */
	struct web_user *users;
	size_t nusers;
	pthread_mutex_t lock;		/* the users' caches */
	/* http_server_config.headers */
	struct web_header *headers;
	size_t nheaders;
};

/* Read and check @path; on failure -1 with a one-line reason in @err. An
 * empty file is valid (no TLS, no auth). */
int web_config_load(struct web_config *wc, const char *path, char *err,
		    size_t errlen);
void web_config_free(struct web_config *wc);

static inline bool web_config_tls(const struct web_config *wc)
{
	return wc->cert_pem != NULL;
}

static inline bool web_config_auth(const struct web_config *wc)
{
	return wc->nusers > 0;
}

/* Does this user and password match? Takes about as long for an unknown
 * user as for a wrong password. Thread safe. */
bool web_auth_check(struct web_config *wc, const char *user, const char *pass);
/* Only the cheap part: does @pass match the user's last good password? */
bool web_auth_cached(struct web_config *wc, const char *user, const char *pass);

/* A bcrypt hash of @pass for basic_auth_users; 0 or -errno. */
int web_hash_password(const char *pass, char *out, size_t len);

#endif
