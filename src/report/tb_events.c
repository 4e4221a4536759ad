#include "report/tb_events.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"
#include "core/timeutil.h"

/* The event file is written whole at close (atomic_file), as every output is. */
struct tb_writer {
	struct atomic_file af;
	FILE *f;
	char path[4096];
};

/* Table for the reflected Castagnoli polynomial 0x82F63B78, built on first use. */
static uint32_t crc_table[256];

static void crc_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t tb_crc32c(const void *data, size_t len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, crc_table_init);
	const unsigned char *p = data;
	uint32_t c = 0xFFFFFFFFu;
	for (size_t i = 0; i < len; i++)
		c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
	return c ^ 0xFFFFFFFFu;
}

uint32_t tb_crc_mask(uint32_t crc)
{
	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* --- a protobuf encoder just big enough for Event and Summary ------------------------ */

struct pbuf {
	unsigned char b[1024];
	size_t n;
	int overflow;
};

static void pb_byte(struct pbuf *p, unsigned char c)
{
	if (p->n < sizeof(p->b))
		p->b[p->n++] = c;
	else
		p->overflow = 1;
}

static void pb_varint(struct pbuf *p, uint64_t v)
{
	while (v >= 0x80) {
		pb_byte(p, (unsigned char)(v | 0x80));
		v >>= 7;
	}
	pb_byte(p, (unsigned char)v);
}

static void pb_tag(struct pbuf *p, int field, int wire)
{
	pb_varint(p, (uint64_t)field << 3 | (uint64_t)wire);
}

static void pb_bytes(struct pbuf *p, int field, const void *data, size_t len)
{
	pb_tag(p, field, 2);
	pb_varint(p, len);
	for (size_t i = 0; i < len; i++)
		pb_byte(p, ((const unsigned char *)data)[i]);
}

/* Fixed-width fields are little-endian on the wire. */
static void pb_fixed(struct pbuf *p, int field, int wire, const void *v, size_t len)
{
	unsigned char le[8];
	memcpy(le, v, len);
	pb_tag(p, field, wire);
	for (size_t i = 0; i < len; i++)
		pb_byte(p, le[i]);
}

static void pb_double(struct pbuf *p, int field, double v)
{
	pb_fixed(p, field, 1, &v, 8);
}

static void pb_float(struct pbuf *p, int field, float v)
{
	pb_fixed(p, field, 5, &v, 4);
}


/* One TFRecord: length, masked CRC of the length, data, masked CRC of the data. */
static int record_write(struct tb_writer *w, const struct pbuf *p)
{
	if (p->overflow)
		return gp_error(GP_EINVAL, "tensorboard: event larger than %zu bytes", sizeof(p->b));
	unsigned char len[8];
	uint64_t n = p->n;
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)(n >> (8 * i));
	uint32_t crc_len = tb_crc_mask(tb_crc32c(len, 8));
	uint32_t crc_data = tb_crc_mask(tb_crc32c(p->b, p->n));
	unsigned char c1[4], c2[4];
	for (int i = 0; i < 4; i++) {
		c1[i] = (unsigned char)(crc_len >> (8 * i));
		c2[i] = (unsigned char)(crc_data >> (8 * i));
	}
	if (fwrite(len, 1, 8, w->f) != 8 || fwrite(c1, 1, 4, w->f) != 4 ||
	    fwrite(p->b, 1, p->n, w->f) != p->n || fwrite(c2, 1, 4, w->f) != 4)
		return gp_error(GP_EIO, "cannot write '%s'", w->path);
	return 0;
}

int tb_writer_open(struct tb_writer **out, const char *logdir)
{
	char host[64];
	int rc;
	*out = NULL;
	if (mkdir(logdir, 0755) != 0 && errno != EEXIST)
		return gp_error(GP_EIO, "cannot create '%s': %s", logdir, strerror(errno));
	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = 0;
	struct tb_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return gp_error(GP_ENOMEM, "tensorboard: out of memory");
	snprintf(w->path, sizeof(w->path), "%s/events.out.tfevents.%lld.%s", logdir,
		 (long long)time(NULL), host);
	if ((rc = atomic_file_open(&w->af, w->path)) < 0)
		goto free_w;
	w->f = w->af.f;
	struct pbuf p = { .n = 0 };
	pb_double(&p, 1, gp_wall_s());
	pb_bytes(&p, 3, "brain.Event:2", 13);
	rc = record_write(w, &p);
	if (rc < 0)
		goto close_f;
	*out = w;
	return 0;
close_f:
	atomic_file_abort(&w->af);
free_w:
	free(w);
	return rc;
}

int tb_add_scalar(struct tb_writer *w, const char *tag, double value, long long step)
{
	return tb_add_scalar_at(w, tag, value, step, gp_wall_s());
}

int tb_add_scalar_at(struct tb_writer *w, const char *tag, double value, long long step, double wall_time)
{
	size_t tag_len = strlen(tag);
	if (tag_len > 512)
		return gp_error(GP_EINVAL, "tensorboard: tag too long: '%.40s...'", tag);
	struct pbuf val = { .n = 0 }, sum = { .n = 0 }, ev = { .n = 0 };
	pb_bytes(&val, 1, tag, tag_len);
	pb_float(&val, 2, (float)value);
	pb_bytes(&sum, 1, val.b, val.n);
	pb_double(&ev, 1, wall_time);
	pb_tag(&ev, 2, 0);
	pb_varint(&ev, (uint64_t)step);
	pb_bytes(&ev, 5, sum.b, sum.n);
	return record_write(w, &ev);
}

const char *tb_writer_path(const struct tb_writer *w)
{
	return w->path;
}

int tb_writer_close(struct tb_writer *w)
{
	int rc = 0;
	if (!w)
		return 0;
	rc = atomic_file_commit(&w->af);
	free(w);
	return rc;
}
