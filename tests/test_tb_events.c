/* TensorBoard event files, parsed back by a small reader here: both CRCs of every
 * record, the version record, and the tags, values and steps of the scalars. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/tb_events.h"
#include "test.h"

struct scalar {
	char tag[64];
	float value;
	long long step;
	int has_version;
};

static uint64_t read_varint(const unsigned char **p, const unsigned char *end)
{
	uint64_t v = 0;
	for (int shift = 0; *p < end && shift < 64; shift += 7) {
		unsigned char c = *(*p)++;
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			break;
	}
	return v;
}

/* Decode Event {1: double, 2: int64, 3: string, 5: Summary{1: Value{1: tag, 2: float}}}. */
static int parse_event(const unsigned char *p, size_t n, struct scalar *s)
{
	const unsigned char *end = p + n;
	memset(s, 0, sizeof(*s));
	while (p < end) {
		uint64_t key = read_varint(&p, end);
		int field = (int)(key >> 3), wire = (int)(key & 7);
		if (wire == 1) {
			p += 8;
		} else if (wire == 0) {
			uint64_t v = read_varint(&p, end);
			if (field == 2)
				s->step = (long long)v;
		} else if (wire == 2) {
			uint64_t len = read_varint(&p, end);
			if (field == 3)
				s->has_version = len == 13 && !memcmp(p, "brain.Event:2", 13);
			if (field == 5) {
				const unsigned char *q = p, *qe = p + len;
				if (read_varint(&q, qe) != (1 << 3 | 2))
					return -1;
				uint64_t vlen = read_varint(&q, qe);
				const unsigned char *ve = q + vlen;
				while (q < ve) {
					uint64_t k = read_varint(&q, ve);
					if (k == (1 << 3 | 2)) {
						uint64_t tl = read_varint(&q, ve);
						snprintf(s->tag, sizeof(s->tag), "%.*s", (int)tl, q);
						q += tl;
					} else if (k == (2 << 3 | 5)) {
						memcpy(&s->value, q, 4);
						q += 4;
					} else {
						return -1;
					}
				}
			}
			p += len;
		} else if (wire == 5) {
			p += 4;
		} else {
			return -1;
		}
	}
	return p == end ? 0 : -1;
}

static uint32_t le32(const unsigned char *b)
{
	return b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Read every record of path into out (at most cap); returns the count or -1 on a
 * framing or CRC error. */
static int read_records(const char *path, struct scalar *out, int cap)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	int n = 0, bad = 0;
	unsigned char hdr[12], crc[4], data[2048];
	while (!bad && fread(hdr, 1, 12, f) == 12) {
		uint64_t len = 0;
		for (int i = 0; i < 8; i++)
			len |= (uint64_t)hdr[i] << (8 * i);
		bad = le32(hdr + 8) != tb_crc_mask(tb_crc32c(hdr, 8)) || len > sizeof(data) ||
		      fread(data, 1, len, f) != len || fread(crc, 1, 4, f) != 4 ||
		      le32(crc) != tb_crc_mask(tb_crc32c(data, len)) || n == cap ||
		      parse_event(data, len, &out[n]) < 0;
		n++;
	}
	fclose(f);
	return bad ? -1 : n;
}

TEST(tb_crc32c_known_value)
{
	CHECK_EQ_INT(tb_crc32c("123456789", 9), 0xE3069283u);
	CHECK_EQ_INT(tb_crc32c("", 0), 0);
	/* The mask rotates right by 15 and adds TensorFlow's constant. */
	CHECK_EQ_INT(tb_crc_mask(0), 0xa282ead8u);
	CHECK_EQ_INT(tb_crc_mask(1u << 15), 0xa282ead9u);
}

TEST(tb_events_round_trip)
{
	const char *dir = test_tmpdir();
	char logdir[512];
	snprintf(logdir, sizeof(logdir), "%s/tb", dir);
	struct tb_writer *w;
	CHECK_EQ_INT(tb_writer_open(&w, logdir), 0);
	if (test_failed())
		return;
	char path[4096];
	snprintf(path, sizeof(path), "%s", tb_writer_path(w));
	CHECK(strstr(path, "/events.out.tfevents.") != NULL);
	for (int s = 0; s < 5; s++) {
		CHECK_EQ_INT(tb_add_scalar(w, "train/loss", 2.5 - 0.25 * s, s), 0);
		CHECK_EQ_INT(tb_add_scalar(w, "perf/img_per_s", 1000.0 + s, 10 * s), 0);
	}
	CHECK_EQ_INT(tb_writer_close(w), 0);

	struct scalar rec[16];
	int n = read_records(path, rec, 16);
	CHECK_EQ_INT(n, 11);
	if (n != 11)
		return;
	CHECK(rec[0].has_version);
	for (int s = 0; s < 5; s++) {
		const struct scalar *a = &rec[1 + 2 * s], *b = &rec[2 + 2 * s];
		CHECK(!strcmp(a->tag, "train/loss"));
		CHECK_NEAR(a->value, 2.5 - 0.25 * s, 1e-6);
		CHECK_EQ_INT(a->step, s);
		CHECK(!strcmp(b->tag, "perf/img_per_s"));
		CHECK_NEAR(b->value, 1000.0 + s, 1e-3);
		CHECK_EQ_INT(b->step, 10 * s);
	}
}

/* Flipping one data byte must break the data CRC the reader checks. */
TEST(tb_events_corruption_detected)
{
	const char *dir = test_tmpdir();
	struct tb_writer *w;
	CHECK_EQ_INT(tb_writer_open(&w, dir), 0);
	if (test_failed())
		return;
	char path[4096];
	snprintf(path, sizeof(path), "%s", tb_writer_path(w));
	CHECK_EQ_INT(tb_add_scalar(w, "x", 1.0, 1), 0);
	CHECK_EQ_INT(tb_writer_close(w), 0);
	struct scalar rec[4];
	CHECK_EQ_INT(read_records(path, rec, 4), 2);
	FILE *f = fopen(path, "r+b");
	CHECK(f != NULL);
	if (!f)
		return;
	fseek(f, -6, SEEK_END);
	int c = fgetc(f);
	fseek(f, -6, SEEK_END);
	fputc(c ^ 0x40, f);
	fclose(f);
	CHECK_EQ_INT(read_records(path, rec, 4), -1);
}

/* TensorBoard's own reader, when the package is installed. */
TEST(tb_events_tensorboard_reads)
{
	char out[8192];
	if (test_run("python3 -c 'import tensorboard' ", out, sizeof(out)) != 0)
		SKIP("python package tensorboard not installed");
	const char *dir = test_tmpdir();
	struct tb_writer *w;
	CHECK_EQ_INT(tb_writer_open(&w, dir), 0);
	if (test_failed())
		return;
	for (int s = 0; s < 3; s++)
		CHECK_EQ_INT(tb_add_scalar(w, "train/loss", 1.5 + s, s), 0);
	CHECK_EQ_INT(tb_writer_close(w), 0);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "python3 tools/check_tb.py '%s'", dir);
	int rc = test_run(cmd, out, sizeof(out));
	CHECK_MSG(rc == 0, "check_tb.py failed (%d): %s", rc, out);
	CHECK(strstr(out, "train/loss 2 3.5") != NULL);
}
