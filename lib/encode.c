// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The producer side: build a stats image as the kernel lays one out
 * (kvm_stats_read() in virt/kvm/binary_stats.c): header, id string of
 * name_size bytes, descriptors of sizeof(desc) + name_size bytes each,
 * then the data block with the stats in descriptor order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void *kvmstats_image__encode(const char *id,
			     const struct kvmstats_encode_desc *d, size_t n,
			     const uint64_t *values, size_t *len,
			     const struct kvmstats_encode_opts *opts)
{
	struct kvmstats_encode_opts o;
	struct kvmstats_abi_header h = { 0 };
	size_t dsz, nvals = 0, total;
	unsigned char *img;
	int err = ks_opts_copy(&o, sizeof(o), opts);

	if (err || !id || (n && !d) || !len || n > UINT32_MAX / 2) {
		errno = EINVAL;
		return NULL;
	}
	h.flags = o.header_flags;
	h.name_size = o.name_size ? o.name_size : KS_ABI_NAME_SIZE;
	if (h.name_size > KS_MAX_NAME_SIZE || strlen(id) >= h.name_size) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (!d[i].name || strlen(d[i].name) >= h.name_size) {
			errno = ENAMETOOLONG;
			return NULL;
		}
		nvals += d[i].size ? d[i].size : 1;
	}
	dsz = sizeof(struct kvmstats_abi_desc) + h.name_size;
	h.num_desc = (uint32_t)n;
	h.id_offset = sizeof(h);
	h.desc_offset = h.id_offset + h.name_size;
	total = h.desc_offset + n * dsz;
	if (total > KS_MAX_IMAGE || nvals * 8 > KS_MAX_DATA) {
		errno = EFBIG;
		return NULL;
	}
	h.data_offset = (uint32_t)total;
	total += nvals * 8;
	img = calloc(1, total);
	if (!img)
		return NULL;
	memcpy(img, &h, sizeof(h));
	strcpy((char *)img + h.id_offset, id);
	for (size_t i = 0, off = 0; i < n; i++) {
		struct kvmstats_abi_desc ad = {
			.flags = d[i].flags,
			.exponent = d[i].exponent,
			.size = d[i].size ? d[i].size : 1,
			.offset = (uint32_t)off,
			.bucket_size = d[i].bucket_size,
		};
		unsigned char *p = img + h.desc_offset + i * dsz;

		memcpy(p, &ad, sizeof(ad));
		strcpy((char *)p + sizeof(ad), d[i].name);
		off += (size_t)ad.size * 8;
	}
	if (values)
		memcpy(img + h.data_offset, values, nvals * 8);
	*len = total;
	return img;
}

ssize_t kvmstats_image__pread(const void *image, size_t len, void *buf,
			      size_t count, off_t pos)
{
	if (pos < 0)
		return -EINVAL;
	if ((uint64_t)pos >= len)
		return 0;
	if (count > len - (size_t)pos)
		count = len - (size_t)pos;
	memcpy(buf, (const unsigned char *)image + pos, count);
	return (ssize_t)count;
}
