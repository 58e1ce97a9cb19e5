// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The migration as QEMU will run it: its settings read over QMP, merged
 * with the caller's overrides and QEMU's defaults for its version.
 *
 * Facts from QEMU's migration/options.c and qapi/migration.json of each
 * release (read for facts only):
 *  - max-bandwidth 128 MiB/s (32 MiB/s before 2.x's change; 128 since),
 *    downtime-limit 300 ms, multifd-channels 2, multifd-compression none,
 *    multifd-zlib-level 1, multifd-zstd-level 1, cpu-throttle-initial 20,
 *    cpu-throttle-increment 10, max-cpu-throttle 99,
 *    throttle-trigger-threshold 50, cpu-throttle-tailslow false,
 *    max-postcopy-bandwidth 0 (post-copy unlimited): unchanged from 7.2
 *    to 10.0;
 *  - zero-page-detection (9.0+): "multifd" by default (zero pages found
 *    by the multifd channels, sent as offsets in a packet), "legacy" (the
 *    migration thread, as every release before 9.0 did), "none";
 *  - avail-switchover-bandwidth (8.2+): 0, i.e. the measured bandwidth;
 *  - capabilities multifd, auto-converge, xbzrle, postcopy-ram: off.
 */
#include <errno.h>
#include <string.h>

#include "mem_internal.h"
#include "qmp.h"

static const char *const key_names[KVMSTATS_MIG_NKEYS] = {
	[KVMSTATS_MIG_BANDWIDTH] = "max-bandwidth",
	[KVMSTATS_MIG_SWITCHOVER_BW] = "avail-switchover-bandwidth",
	[KVMSTATS_MIG_DOWNTIME] = "downtime-limit",
	[KVMSTATS_MIG_MULTIFD] = "multifd",
	[KVMSTATS_MIG_CHANNELS] = "multifd-channels",
	[KVMSTATS_MIG_COMPRESSION] = "multifd-compression",
	[KVMSTATS_MIG_LEVEL] = "multifd-level",
	[KVMSTATS_MIG_ZERO_DETECT] = "zero-page-detection",
	[KVMSTATS_MIG_AUTO_CONVERGE] = "auto-converge",
	[KVMSTATS_MIG_THROTTLE_INITIAL] = "cpu-throttle-initial",
	[KVMSTATS_MIG_THROTTLE_INCREMENT] = "cpu-throttle-increment",
	[KVMSTATS_MIG_XBZRLE] = "xbzrle",
	[KVMSTATS_MIG_POSTCOPY] = "postcopy-ram",
	[KVMSTATS_MIG_THROTTLE_MAX] = "max-cpu-throttle",
	[KVMSTATS_MIG_POSTCOPY_BW] = "max-postcopy-bandwidth",
	[KVMSTATS_MIG_THROTTLE_TRIGGER] = "throttle-trigger-threshold",
	[KVMSTATS_MIG_THROTTLE_TAILSLOW] = "cpu-throttle-tailslow",
};

static const char *const compress_names[] = {
	[KVMSTATS_MIG_COMPRESS_NONE] = "none",
	[KVMSTATS_MIG_COMPRESS_ZLIB] = "zlib",
	[KVMSTATS_MIG_COMPRESS_ZSTD] = "zstd",
	[KVMSTATS_MIG_COMPRESS_OTHER] = "other",
};

static const char *const zero_names[] = {
	[KVMSTATS_MIG_ZERO_LEGACY] = "legacy",
	[KVMSTATS_MIG_ZERO_MULTIFD] = "multifd",
	[KVMSTATS_MIG_ZERO_NONE] = "none",
};

const char *kvmstats_mig_key_str(enum kvmstats_mig_key k)
{
	return k < KVMSTATS_MIG_NKEYS ? key_names[k] : "unknown";
}

const char *kvmstats_mig_src_str(enum kvmstats_mig_src s)
{
	switch (s) {
	case KVMSTATS_MIG_SRC_DEFAULT:
		return "default";
	case KVMSTATS_MIG_SRC_QMP:
		return "qmp";
	case KVMSTATS_MIG_SRC_OPTION:
		return "option";
	case KVMSTATS_MIG_SRC_LIBVIRT:
		return "libvirt";
	case KVMSTATS_MIG_SRC_EXECUTABLE:
		return "executable";
	}
	return "unknown";
}

const char *kvmstats_mig_compress_str(enum kvmstats_mig_compress c)
{
	return c <= KVMSTATS_MIG_COMPRESS_OTHER ? compress_names[c] : "unknown";
}

int kvmstats_mig_compress_parse(const char *s)
{
	for (int i = 0; s && i < KVMSTATS_MIG_COMPRESS_OTHER; i++)
		if (!strcmp(s, compress_names[i]))
			return i;
	return -EINVAL;
}

const char *kvmstats_mig_zero_str(enum kvmstats_mig_zero z)
{
	return z <= KVMSTATS_MIG_ZERO_NONE ? zero_names[z] : "unknown";
}

static const char *yes(bool b)
{
	return b ? "true" : "false";
}

int kvmstats_migrate_settings__value(const struct kvmstats_migrate_settings *s,
				     enum kvmstats_mig_key k, char *buf,
				     size_t len)
{
	switch (k) {
	case KVMSTATS_MIG_BANDWIDTH:
		return snprintf(buf, len, "%.0f", s->bandwidth);
	case KVMSTATS_MIG_SWITCHOVER_BW:
		return snprintf(buf, len, "%.0f", s->switchover_bw);
	case KVMSTATS_MIG_DOWNTIME:
		return snprintf(buf, len, "%.0f", s->downtime_s * 1e3);
	case KVMSTATS_MIG_MULTIFD:
		return snprintf(buf, len, "%s", yes(s->multifd));
	case KVMSTATS_MIG_CHANNELS:
		return snprintf(buf, len, "%u", s->channels);
	case KVMSTATS_MIG_COMPRESSION:
		return snprintf(buf, len, "%s",
				kvmstats_mig_compress_str(s->compress));
	case KVMSTATS_MIG_LEVEL:
		return snprintf(buf, len, "%d", s->level);
	case KVMSTATS_MIG_ZERO_DETECT:
		return snprintf(buf, len, "%s",
				kvmstats_mig_zero_str(s->zero_detect));
	case KVMSTATS_MIG_AUTO_CONVERGE:
		return snprintf(buf, len, "%s", yes(s->auto_converge));
	case KVMSTATS_MIG_THROTTLE_INITIAL:
		return snprintf(buf, len, "%u", s->throttle_initial);
	case KVMSTATS_MIG_THROTTLE_INCREMENT:
		return snprintf(buf, len, "%u", s->throttle_increment);
	case KVMSTATS_MIG_XBZRLE:
		return snprintf(buf, len, "%s", yes(s->xbzrle));
	case KVMSTATS_MIG_POSTCOPY:
		return snprintf(buf, len, "%s", yes(s->postcopy));
	case KVMSTATS_MIG_THROTTLE_MAX:
		return snprintf(buf, len, "%u", s->throttle_max);
	case KVMSTATS_MIG_POSTCOPY_BW:
		return snprintf(buf, len, "%.0f", s->postcopy_bw);
	case KVMSTATS_MIG_THROTTLE_TRIGGER:
		return snprintf(buf, len, "%u", s->throttle_trigger);
	case KVMSTATS_MIG_THROTTLE_TAILSLOW:
		return snprintf(buf, len, "%s", yes(s->throttle_tailslow));
	case KVMSTATS_MIG_NKEYS:
		break;
	}
	return -EINVAL;
}

/* QEMU's defaults; which ones exist depends on the version. */
void ks_migrate_defaults(struct kvmstats_migrate_settings *s)
{
	unsigned int maj = s->qemu_major, min = s->qemu_minor;
	enum kvmstats_mig_src vsrc = s->version_src;

	memset(s, 0, sizeof(*s));
	s->qemu_major = maj;
	s->qemu_minor = min;
	s->version_src = vsrc;
	s->bandwidth = (double)KVMSTATS_QEMU_MAX_BANDWIDTH;
	s->downtime_s = KVMSTATS_QEMU_DOWNTIME_MS / 1e3;
	s->channels = 2;
	s->level = 1;
	s->throttle_initial = 20;
	s->throttle_increment = 10;
	s->throttle_max = 99;
	s->throttle_trigger = 50;
	s->zero_detect =
		maj >= 9 ? KVMSTATS_MIG_ZERO_MULTIFD : KVMSTATS_MIG_ZERO_LEGACY;
}

static bool get_int(struct json_object *o, const char *k, int64_t *v)
{
	struct json_object *j;

	if (!json_object_object_get_ex(o, k, &j) ||
	    !json_object_is_type(j, json_type_int))
		return false;
	*v = json_object_get_int64(j);
	return *v >= 0;
}

static const char *get_str(struct json_object *o, const char *k)
{
	struct json_object *j;

	if (!json_object_object_get_ex(o, k, &j) ||
	    !json_object_is_type(j, json_type_string))
		return NULL;
	return json_object_get_string(j);
}

static void caps(struct kvmstats_migrate_settings *s, struct json_object *a)
{
	static const struct {
		const char *name;
		enum kvmstats_mig_key k;
	} map[] = {
		{"multifd", KVMSTATS_MIG_MULTIFD},
		{"auto-converge", KVMSTATS_MIG_AUTO_CONVERGE},
		{"xbzrle", KVMSTATS_MIG_XBZRLE},
		{"postcopy-ram", KVMSTATS_MIG_POSTCOPY},
	};
	bool *dst[] = {&s->multifd, &s->auto_converge, &s->xbzrle,
		       &s->postcopy};

	for (size_t i = 0; json_object_is_type(a, json_type_array) &&
			   i < json_object_array_length(a);
	     i++) {
		struct json_object *c = json_object_array_get_idx(a, i), *st;
		const char *name = get_str(c, "capability");

		if (!name || !json_object_object_get_ex(c, "state", &st))
			continue;
		for (size_t k = 0; k < ARRAY_SIZE(map); k++) {
			if (strcmp(name, map[k].name))
				continue;
			*dst[k] = json_object_get_boolean(st);
			s->src[map[k].k] = KVMSTATS_MIG_SRC_QMP;
		}
	}
}

static void params(struct kvmstats_migrate_settings *s, struct json_object *o)
{
	struct json_object *j;
	const char *str;
	int64_t v;

	if (get_int(o, "max-bandwidth", &v) && v > 0) {
		s->bandwidth = (double)v;
		s->src[KVMSTATS_MIG_BANDWIDTH] = KVMSTATS_MIG_SRC_QMP;
	}
	if (get_int(o, "avail-switchover-bandwidth", &v)) {
		s->switchover_bw = (double)v;
		s->src[KVMSTATS_MIG_SWITCHOVER_BW] = KVMSTATS_MIG_SRC_QMP;
	}
	if (get_int(o, "downtime-limit", &v) && v > 0) {
		s->downtime_s = (double)v / 1e3;
		s->src[KVMSTATS_MIG_DOWNTIME] = KVMSTATS_MIG_SRC_QMP;
	}
	if (get_int(o, "multifd-channels", &v) && v > 0 && v <= 255) {
		s->channels = (unsigned int)v;
		s->src[KVMSTATS_MIG_CHANNELS] = KVMSTATS_MIG_SRC_QMP;
	}
	str = get_str(o, "multifd-compression");
	if (str) {
		int c = kvmstats_mig_compress_parse(str);

		s->compress = c < 0 ? KVMSTATS_MIG_COMPRESS_OTHER
				    : (enum kvmstats_mig_compress)c;
		s->src[KVMSTATS_MIG_COMPRESSION] = KVMSTATS_MIG_SRC_QMP;
	}
	str = get_str(o, "zero-page-detection");
	for (int z = 0; str && z <= KVMSTATS_MIG_ZERO_NONE; z++)
		if (!strcmp(str, zero_names[z])) {
			s->zero_detect = (enum kvmstats_mig_zero)z;
			s->src[KVMSTATS_MIG_ZERO_DETECT] = KVMSTATS_MIG_SRC_QMP;
		}
	if (get_int(o, "cpu-throttle-initial", &v) && v <= 99) {
		s->throttle_initial = (unsigned int)v;
		s->src[KVMSTATS_MIG_THROTTLE_INITIAL] = KVMSTATS_MIG_SRC_QMP;
	}
	if (get_int(o, "cpu-throttle-increment", &v) && v <= 99) {
		s->throttle_increment = (unsigned int)v;
		s->src[KVMSTATS_MIG_THROTTLE_INCREMENT] = KVMSTATS_MIG_SRC_QMP;
	}
	if (get_int(o, "max-cpu-throttle", &v) && v >= 1 && v <= 99) {
		s->throttle_max = (unsigned int)v;
		s->src[KVMSTATS_MIG_THROTTLE_MAX] = KVMSTATS_MIG_SRC_QMP;
	}
	if (get_int(o, "max-postcopy-bandwidth", &v)) {
		s->postcopy_bw = (double)v;
		s->src[KVMSTATS_MIG_POSTCOPY_BW] = KVMSTATS_MIG_SRC_QMP;
	}
	if (get_int(o, "throttle-trigger-threshold", &v) && v >= 1 && v <= 100) {
		s->throttle_trigger = (unsigned int)v;
		s->src[KVMSTATS_MIG_THROTTLE_TRIGGER] = KVMSTATS_MIG_SRC_QMP;
	}
	if (json_object_object_get_ex(o, "cpu-throttle-tailslow", &j) &&
	    json_object_is_type(j, json_type_boolean)) {
		s->throttle_tailslow = json_object_get_boolean(j);
		s->src[KVMSTATS_MIG_THROTTLE_TAILSLOW] = KVMSTATS_MIG_SRC_QMP;
	}
	/* Both levels are read; the one of the compression in use counts. */
	if (get_int(o,
		    s->compress == KVMSTATS_MIG_COMPRESS_ZLIB
			    ? "multifd-zlib-level"
			    : "multifd-zstd-level",
		    &v) &&
	    v <= 22) {
		s->level = (int)v;
		s->src[KVMSTATS_MIG_LEVEL] = KVMSTATS_MIG_SRC_QMP;
	}
}

static void version(struct kvmstats_migrate_settings *s, struct json_object *o)
{
	struct json_object *q;
	int64_t maj, min;

	if (!json_object_object_get_ex(o, "qemu", &q) ||
	    !get_int(q, "major", &maj) || !get_int(q, "minor", &min) ||
	    maj > 1000 || min > 1000)
		return;
	s->qemu_major = (unsigned int)maj;
	s->qemu_minor = (unsigned int)min;
	s->version_src = KVMSTATS_MIG_SRC_QMP;
}

/* The three queries, in the exchange mem_regions.c holds; every one is
 * optional (a QEMU that refuses one keeps the defaults for it). */
void ks_migrate_qmp(struct ks_qmp *q, uint64_t deadline,
		    struct kvmstats_migrate_settings *s)
{
	struct json_object *o = NULL;

	if (!ks_qmp_call(q, "query-version", NULL, deadline, &o, NULL, 0))
		version(s, o);
	json_object_put(o);
	o = NULL;
	ks_migrate_defaults(s);
	if (!ks_qmp_call(q, "query-migrate-capabilities", NULL, deadline, &o,
			 NULL, 0))
		caps(s, o);
	json_object_put(o);
	o = NULL;
	if (!ks_qmp_call(q, "query-migrate-parameters", NULL, deadline, &o,
			 NULL, 0))
		params(s, o);
	json_object_put(o);
}

/* The caller's word over QEMU's. */
void ks_migrate_override(struct kvmstats_migrate_settings *s,
			 const struct kvmstats_migrate_overrides *o)
{
	const enum kvmstats_mig_src opt = KVMSTATS_MIG_SRC_OPTION;

	if (o->bandwidth > 0) {
		s->bandwidth = o->bandwidth;
		s->src[KVMSTATS_MIG_BANDWIDTH] = opt;
	}
	if (o->downtime_ms > 0) {
		s->downtime_s = o->downtime_ms / 1e3;
		s->src[KVMSTATS_MIG_DOWNTIME] = opt;
	}
	if (o->parallel) {
		s->multifd = true;
		s->channels = o->parallel;
		s->src[KVMSTATS_MIG_MULTIFD] = s->src[KVMSTATS_MIG_CHANNELS] =
			opt;
	}
	if (o->compress >= 0 && o->compress < KVMSTATS_MIG_COMPRESS_OTHER) {
		s->compress = (enum kvmstats_mig_compress)o->compress;
		s->src[KVMSTATS_MIG_COMPRESSION] = opt;
		/* Like virsh migrate --parallel --compressed: multifd's. */
		if (s->compress && !s->multifd) {
			s->multifd = true;
			s->src[KVMSTATS_MIG_MULTIFD] = opt;
		}
	}
	if (o->auto_converge >= 0) {
		s->auto_converge = o->auto_converge;
		s->src[KVMSTATS_MIG_AUTO_CONVERGE] = opt;
	}
	if (o->postcopy >= 0) {
		s->postcopy = o->postcopy;
		s->src[KVMSTATS_MIG_POSTCOPY] = opt;
	}
	/* virsh migrate --postcopy-bandwidth sets it as the migration
	 * starts: QEMU's own is unlimited until then, the link's speed. */
	if (o->postcopy_bw > 0) {
		s->postcopy_bw = o->postcopy_bw;
		s->src[KVMSTATS_MIG_POSTCOPY_BW] = opt;
	}
}
