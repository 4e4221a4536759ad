/* Checkpoints: bit-exact round trips, the byte layout the safetensors spec asks for,
 * one clear error per kind of bad file, and a net left untouched by a failed load.
 * The nets here are filled by hand (state table, host arrays, node counters), so the
 * tests depend on nothing but the struct net contract. */
#include "test.h"

#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/rng.h"
#include "nn/checkpoint.h"

/* Variants of the fake net, each a way a file can disagree with a net. */
enum fake_kind { FAKE_FULL, FAKE_NO_FC_BIAS, FAKE_EXTRA_KEY, FAKE_FC_TRANSPOSED, FAKE_RENAMED };

static void fake_add(struct net *net, const char *name, enum state_kind kind, int node,
		     int ndim, const int64_t *dims)
{
	struct state_entry *e = &net->state[net->n_state++];
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->kind = kind;
	e->node = node;
	e->ndim = ndim;
	e->numel = 1;
	for (int d = 0; d < ndim; d++) {
		e->dims[d] = dims[d];
		e->numel *= (size_t)dims[d];
	}
	if (kind == STATE_PARAM) {
		e->offset = net->params_count;
		net->params_count += e->numel;
		net->n_params++;
	} else if (kind == STATE_RUNNING) {
		e->offset = net->running_count;
		net->running_count += e->numel;
	}
}

/* A tiny conv -> batch norm -> linear net with torchvision's keys (parameters first,
 * as net.h lays them out), random values from seed and a few values whose bits a
 * careless conversion would change. */
static struct net *fake_net_new(enum fake_kind kind, uint64_t seed)
{
	struct net *net = calloc(1, sizeof(*net));
	struct rng r;

	snprintf(net->model, sizeof(net->model), "fake");
	net->n_nodes = 3;
	fake_add(net, "conv1.weight", STATE_PARAM, 0, 4, (int64_t[]){ 4, 3, 3, 3 });
	fake_add(net, "bn1.weight", STATE_PARAM, 1, 1, (int64_t[]){ 4 });
	fake_add(net, "bn1.bias", STATE_PARAM, 1, 1, (int64_t[]){ 4 });
	fake_add(net, "fc.weight", STATE_PARAM, 2, 2,
		 kind == FAKE_FC_TRANSPOSED ? (int64_t[]){ 4, 10 } : (int64_t[]){ 10, 4 });
	if (kind == FAKE_RENAMED)
		fake_add(net, "fc.b", STATE_PARAM, 2, 1, (int64_t[]){ 10 });
	else if (kind != FAKE_NO_FC_BIAS)
		fake_add(net, "fc.bias", STATE_PARAM, 2, 1, (int64_t[]){ 10 });
	if (kind == FAKE_EXTRA_KEY)
		fake_add(net, "fc.extra", STATE_PARAM, 2, 1, (int64_t[]){ 3 });
	fake_add(net, "bn1.running_mean", STATE_RUNNING, 1, 1, (int64_t[]){ 4 });
	fake_add(net, "bn1.running_var", STATE_RUNNING, 1, 1, (int64_t[]){ 4 });
	fake_add(net, "bn1.num_batches_tracked", STATE_COUNTER, 1, 0, NULL);

	net->host_params = malloc(net->params_count * sizeof(float));
	net->host_running = malloc(net->running_count * sizeof(float));
	rng_seed(&r, seed, 7);
	for (size_t i = 0; i < net->params_count; i++)
		net->host_params[i] = (float)rng_normal(&r);
	for (size_t i = 0; i < net->running_count; i++)
		net->host_running[i] = (float)rng_uniform(&r);
	uint32_t nan_bits = 0x7fc12345u;
	net->host_params[0] = -0.0f;
	net->host_params[1] = 1e-40f; /* subnormal */
	net->host_params[2] = INFINITY;
	memcpy(&net->host_params[3], &nan_bits, 4);
	net->nodes[1].bn_batches_tracked = 123456789012LL + (int64_t)seed;
	return net;
}

/* One float parameter "w" of shape [2] and one counter "n": for hand-written files. */
static struct net *tiny_net_new(void)
{
	struct net *net = calloc(1, sizeof(*net));
	snprintf(net->model, sizeof(net->model), "tiny");
	net->n_nodes = 1;
	fake_add(net, "w", STATE_PARAM, 0, 1, (int64_t[]){ 2 });
	fake_add(net, "n", STATE_COUNTER, 0, 0, NULL);
	net->host_params = calloc(2, sizeof(float));
	net->host_params[0] = 42.0f;
	net->nodes[0].bn_batches_tracked = 5;
	return net;
}

static void fake_net_free(struct net *net)
{
	free(net->host_params);
	free(net->host_running);
	free(net);
}

/* Same state, bit for bit (NaN payloads and signed zeros included). */
static int nets_equal(const struct net *a, const struct net *b)
{
	if (a->params_count != b->params_count || a->running_count != b->running_count ||
	    memcmp(a->host_params, b->host_params, a->params_count * sizeof(float)) ||
	    (a->running_count &&
	     memcmp(a->host_running, b->host_running, a->running_count * sizeof(float))))
		return 0;
	for (int i = 0; i < a->n_nodes; i++)
		if (a->nodes[i].bn_batches_tracked != b->nodes[i].bn_batches_tracked)
			return 0;
	return 1;
}

static void path_join(char *out, size_t cap, const char *dir, const char *name)
{
	snprintf(out, cap, "%s/%s", dir, name);
}

static void file_write(const char *path, const void *bytes, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (f) {
		fwrite(bytes, 1, n, f);
		fclose(f);
	}
}

/* A safetensors file from a header text (not padded) and data bytes. */
static void st_write(const char *path, const char *header, const void *data, size_t data_bytes)
{
	uint64_t n = strlen(header);
	FILE *f = fopen(path, "wb");
	if (!f)
		return;
	fwrite(&n, 8, 1, f);
	fwrite(header, 1, n, f);
	fwrite(data, 1, data_bytes, f);
	fclose(f);
}

static unsigned char *file_read(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long len;
	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc(len + 1)) && fread(buf, 1, len, f) == (size_t)len)
		*n = (size_t)len;
	else
		free(buf), buf = NULL;
	fclose(f);
	return buf;
}

/* rc is code and the message holds what names the problem. */
#define CHECK_ERR(rc, code, text)                                                        \
	do {                                                                             \
		int rc_ = (rc);                                                          \
		CHECK_EQ_INT(rc_, code);                                                 \
		CHECK_MSG(strstr(gp_errmsg(), text), "message \"%s\" lacks \"%s\"",     \
			  gp_errmsg(), text);                                            \
	} while (0)

TEST(checkpoint_roundtrip_bit_exact)
{
	const char *dir = test_tmpdir();
	char path[512];
	struct net *a = fake_net_new(FAKE_FULL, 1), *b = fake_net_new(FAKE_FULL, 2);

	path_join(path, sizeof(path), dir, "a.safetensors");
	CHECK(!nets_equal(a, b));
	CHECK_EQ_INT(checkpoint_save(a, path), 0);
	CHECK_EQ_INT(checkpoint_load(b, path), 0);
	CHECK(nets_equal(a, b));
	CHECK_EQ_INT(b->nodes[1].bn_batches_tracked, 123456789013LL);
	fake_net_free(a);
	fake_net_free(b);
}

TEST(checkpoint_byte_layout)
{
	const char *dir = test_tmpdir();
	char path[512];
	struct net *net = fake_net_new(FAKE_FULL, 3);
	size_t file_bytes = 0;

	path_join(path, sizeof(path), dir, "layout.safetensors");
	CHECK_EQ_INT(checkpoint_save(net, path), 0);
	unsigned char *buf = file_read(path, &file_bytes);
	CHECK(buf && file_bytes > 8);
	if (!buf || file_bytes <= 8)
		goto free_net;

	uint64_t n;
	memcpy(&n, buf, 8);
	CHECK_EQ_INT(n % 8, 0);
	CHECK(8 + n <= file_bytes);
	if (8 + n > file_bytes)
		goto free_buf;
	const char *text = (const char *)buf + 8;
	size_t json_end = n;
	while (json_end > 0 && text[json_end - 1] == ' ')
		json_end--;
	CHECK(text[0] == '{' && json_end > 0 && text[json_end - 1] == '}');
	CHECK(n - json_end < 8);

	json_error_t jerr;
	json_t *h = json_loadb(text, n, 0, &jerr);
	CHECK_MSG(h != NULL, "header: %s", jerr.text);
	if (!h)
		goto free_buf;
	json_t *meta = json_object_get(h, "__metadata__");
	CHECK(!strcmp(json_string_value(json_object_get(meta, "format")) ?: "", "pt"));
	CHECK(!strcmp(json_string_value(json_object_get(meta, "producer")) ?: "", "gpuperf"));
	CHECK(!strcmp(json_string_value(json_object_get(meta, "model")) ?: "", "fake"));
	CHECK_EQ_INT(json_object_size(h), net->n_state + 1);

	/* Written in state order, so contiguity is checked in that order. */
	uint64_t data_bytes = file_bytes - 8 - n, expect_begin = 0;
	const unsigned char *data = buf + 8 + n;
	for (int i = 0; i < net->n_state; i++) {
		const struct state_entry *e = &net->state[i];
		json_t *t = json_object_get(h, e->name);
		json_t *shape = json_object_get(t, "shape"), *offs = json_object_get(t, "data_offsets");
		const char *dtype = json_string_value(json_object_get(t, "dtype"));
		uint64_t begin = json_integer_value(json_array_get(offs, 0));
		uint64_t end = json_integer_value(json_array_get(offs, 1));
		int counter = e->kind == STATE_COUNTER;

		CHECK_MSG(t != NULL, "no entry '%s'", e->name);
		CHECK(dtype && !strcmp(dtype, counter ? "I64" : "F32"));
		CHECK_EQ_INT(json_array_size(shape), e->ndim);
		for (int d = 0; d < e->ndim; d++)
			CHECK_EQ_INT(json_integer_value(json_array_get(shape, d)), e->dims[d]);
		CHECK_EQ_INT(begin, expect_begin);
		CHECK_EQ_INT(end - begin, e->numel * (counter ? 8 : 4));
		CHECK(end <= data_bytes);
		if (end > data_bytes || begin != expect_begin)
			break;
		if (counter)
			CHECK(!memcmp(data + begin, &net->nodes[e->node].bn_batches_tracked, 8));
		else
			CHECK(!memcmp(data + begin, (e->kind == STATE_PARAM ? net->host_params
									  : net->host_running) + e->offset,
				      e->numel * 4));
		expect_begin = end;
	}
	CHECK_EQ_INT(expect_begin, data_bytes);
	json_decref(h);
free_buf:
	free(buf);
free_net:
	fake_net_free(net);
}

TEST(checkpoint_save_is_atomic)
{
	const char *dir = test_tmpdir();
	char path[512], bad[512];
	struct net *a = fake_net_new(FAKE_FULL, 4), *b = fake_net_new(FAKE_FULL, 5);

	/* Overwrite an existing file; no temporary may remain beside it. */
	path_join(path, sizeof(path), dir, "w.safetensors");
	CHECK_EQ_INT(checkpoint_save(a, path), 0);
	CHECK_EQ_INT(checkpoint_save(b, path), 0);
	DIR *d = opendir(dir);
	int n_files = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			n_files++;
			CHECK_MSG(!strcmp(de->d_name, "w.safetensors"), "stray file '%s'", de->d_name);
		}
	if (d)
		closedir(d);
	CHECK_EQ_INT(n_files, 1);
	CHECK_EQ_INT(checkpoint_load(a, path), 0);
	CHECK(nets_equal(a, b));

	path_join(bad, sizeof(bad), dir, "no/such/dir/w.safetensors");
	CHECK_ERR(checkpoint_save(a, bad), GP_EIO, "cannot write");
	CHECK(access(bad, F_OK) != 0);

	/* An entry pointing past the host arrays is refused before anything is written. */
	path_join(bad, sizeof(bad), dir, "broken.safetensors");
	a->state[1].offset = a->params_count;
	CHECK_ERR(checkpoint_save(a, bad), GP_EINVAL, "bn1.weight");
	CHECK(access(bad, F_OK) != 0);

	/* Two entries with one key would make a header Python refuses. */
	snprintf(b->state[2].name, sizeof(b->state[2].name), "bn1.weight");
	CHECK_ERR(checkpoint_save(b, bad), GP_EINVAL,
		  "state key 'bn1.weight' is reserved or repeated");
	CHECK(access(bad, F_OK) != 0);
	fake_net_free(a);
	fake_net_free(b);
}

TEST(checkpoint_load_missing_file)
{
	char path[512], expect[600];
	struct net *net = fake_net_new(FAKE_FULL, 6), *ref = fake_net_new(FAKE_FULL, 6);

	path_join(path, sizeof(path), test_tmpdir(), "absent.safetensors");
	snprintf(expect, sizeof(expect), "cannot open '%s': No such file or directory", path);
	CHECK_EQ_INT(checkpoint_load(net, path), GP_EIO);
	CHECK_MSG(!strcmp(gp_errmsg(), expect), "message \"%s\"", gp_errmsg());
	CHECK(nets_equal(net, ref));
	fake_net_free(net);
	fake_net_free(ref);
}

TEST(checkpoint_load_not_safetensors)
{
	const char *dir = test_tmpdir();
	char path[512], expect[600];
	struct net *net = fake_net_new(FAKE_FULL, 7), *ref = fake_net_new(FAKE_FULL, 7);
	uint64_t past[2] = { 1000, 0 };

	path_join(path, sizeof(path), dir, "empty");
	file_write(path, "", 0);
	CHECK_ERR(checkpoint_load(net, path), GP_EFORMAT, "is not a safetensors file (0 bytes");

	path_join(path, sizeof(path), dir, "short");
	file_write(path, "abcde", 5);
	CHECK_ERR(checkpoint_load(net, path), GP_EFORMAT, "is not a safetensors file (5 bytes");

	path_join(path, sizeof(path), dir, "past");
	file_write(path, past, sizeof(past));
	snprintf(expect, sizeof(expect),
		 "'%s' is not a safetensors file (header length 1000 past end of file)", path);
	CHECK_EQ_INT(checkpoint_load(net, path), GP_EFORMAT);
	CHECK_MSG(!strcmp(gp_errmsg(), expect), "message \"%s\"", gp_errmsg());

	path_join(path, sizeof(path), dir, "garbage");
	st_write(path, "this is no JSON at all!", "", 0);
	CHECK_ERR(checkpoint_load(net, path), GP_EFORMAT, "header is not JSON");

	path_join(path, sizeof(path), dir, "array");
	st_write(path, "[1, 2]", "", 0);
	CHECK_ERR(checkpoint_load(net, path), GP_EFORMAT, "header is not a JSON object");

	/* Random bytes: the length field is far past the end. */
	unsigned char noise[256];
	struct rng r;
	rng_seed(&r, 99, 1);
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (unsigned char)rng_u32(&r);
	path_join(path, sizeof(path), dir, "noise");
	file_write(path, noise, sizeof(noise));
	CHECK_ERR(checkpoint_load(net, path), GP_EFORMAT, "is not a safetensors file");
	CHECK(nets_equal(net, ref));
	fake_net_free(net);
	fake_net_free(ref);
}

/* Save a variant and load it into the full net: the load must fail with msg and
 * leave the net as it was. */
static void check_variant_refused(enum fake_kind kind, const char *msg)
{
	char path[512];
	struct net *other = fake_net_new(kind, 8);
	struct net *net = fake_net_new(FAKE_FULL, 9), *ref = fake_net_new(FAKE_FULL, 9);

	path_join(path, sizeof(path), test_tmpdir(), "variant.safetensors");
	CHECK_EQ_INT(checkpoint_save(other, path), 0);
	CHECK_ERR(checkpoint_load(net, path), GP_EFORMAT, msg);
	CHECK(nets_equal(net, ref));
	fake_net_free(other);
	fake_net_free(net);
	fake_net_free(ref);
}

TEST(checkpoint_load_key_mismatch)
{
	check_variant_refused(FAKE_NO_FC_BIAS,
			      "does not match the fake net: 1 missing key (first 'fc.bias')");
	CHECK(!strstr(gp_errmsg(), "unexpected"));
	check_variant_refused(FAKE_EXTRA_KEY,
			      "does not match the fake net: 1 unexpected key (first 'fc.extra')");
	CHECK(!strstr(gp_errmsg(), "missing"));
	check_variant_refused(FAKE_RENAMED, "1 missing key (first 'fc.bias'), "
					    "1 unexpected key (first 'fc.b')");
}

TEST(checkpoint_load_shape_mismatch)
{
	check_variant_refused(FAKE_FC_TRANSPOSED,
			      "shape mismatch for 'fc.weight': [4, 10] in the file, [10, 4] in the net");
}

TEST(checkpoint_load_truncated)
{
	char path[512];
	struct net *src = fake_net_new(FAKE_FULL, 11);
	struct net *net = fake_net_new(FAKE_FULL, 10), *ref = fake_net_new(FAKE_FULL, 10);
	struct stat st;

	path_join(path, sizeof(path), test_tmpdir(), "cut.safetensors");
	CHECK_EQ_INT(checkpoint_save(src, path), 0);
	CHECK_EQ_INT(stat(path, &st), 0);
	CHECK_EQ_INT(truncate(path, st.st_size - 4), 0);
	CHECK_ERR(checkpoint_load(net, path), GP_EFORMAT,
		  "is truncated: entry 'bn1.num_batches_tracked' ends at data byte");
	CHECK(nets_equal(net, ref));
	fake_net_free(src);
	fake_net_free(net);
	fake_net_free(ref);
}

/* Hand-written headers for the tiny net: each breaks one rule of the format. */
TEST(checkpoint_load_bad_headers)
{
	static const struct {
		const char *header;
		size_t data_bytes;
		const char *msg;
	} cases[] = {
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]}}",
		  12, "entries 'w' and 'n' overlap" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]}}",
		  12, "entry 'w' has data_offsets [0, 4] (4 bytes) but F32 [2] needs 8 bytes" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[12,20]}}",
		  20, "data bytes [8, 12) belong to no entry" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		  20, "the last 4 data bytes belong to no entry" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		  12, "is truncated: entry 'n' ends at data byte 16 but the file holds 12" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		  16, "'w' needs data_offsets [begin, end] with 0 <= begin <= end" },
		{ "{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[16,24]}}",
		  24, "'w' has dtype I64, expected F32, F64, F16 or BF16" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}",
		  12, "'n' has dtype F32, expected I64 or I32 for a counter" },
		{ "{\"w\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		  16, "entry 'w' has unknown dtype 'F17'" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}",
		  8, "entry 'w' needs \"dtype\", \"shape\" and \"data_offsets\"" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		  16, "'w' has a shape that is not a list of non-negative integers" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}",
		  16, "shape mismatch for 'n': [1] in the file, [] in the net" },
		{ "{\"__metadata__\":{\"format\":1},"
		  "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		  16, "__metadata__ value 'format' is not a string" },
		{ "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		  "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
		  16, "header is not JSON (duplicate object key" },
	};
	unsigned char data[32] = { 0 };
	char path[512];
	struct net *net = tiny_net_new(), *ref = tiny_net_new();

	path_join(path, sizeof(path), test_tmpdir(), "bad.safetensors");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		st_write(path, cases[i].header, data, cases[i].data_bytes);
		CHECK_ERR(checkpoint_load(net, path), GP_EFORMAT, cases[i].msg);
	}
	CHECK(nets_equal(net, ref));

	/* The same layout with valid offsets loads, so the cases above fail for their
	 * stated reason only. */
	int64_t n = 9;
	float w[2] = { 0.25f, -3.0f };
	memcpy(data, w, 8);
	memcpy(data + 8, &n, 8);
	st_write(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		       "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}", data, 16);
	CHECK_EQ_INT(checkpoint_load(net, path), 0);
	CHECK(net->host_params[0] == 0.25f && net->host_params[1] == -3.0f);
	CHECK_EQ_INT(net->nodes[0].bn_batches_tracked, 9);
	fake_net_free(net);
	fake_net_free(ref);
}

/* Files from PyTorch may hold other float widths and an int32 counter. */
TEST(checkpoint_load_converts_dtypes)
{
	char path[512];
	struct net *net = tiny_net_new();
	unsigned char data[32];

	path_join(path, sizeof(path), test_tmpdir(), "conv.safetensors");

	/* F16: 1.0 and the smallest subnormal (2^-24); I32 counter. */
	uint16_t h[2] = { 0x3c00, 0x0001 };
	int32_t n32 = -7;
	memcpy(data, h, 4);
	memcpy(data + 4, &n32, 4);
	st_write(path, "{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
		       "\"n\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[4,8]}}", data, 8);
	CHECK_EQ_INT(checkpoint_load(net, path), 0);
	CHECK(net->host_params[0] == 1.0f && net->host_params[1] == ldexpf(1.0f, -24));
	CHECK_EQ_INT(net->nodes[0].bn_batches_tracked, -7);

	/* F16 -2.5 and -infinity. */
	h[0] = 0xc100;
	h[1] = 0xfc00;
	memcpy(data, h, 4);
	st_write(path, "{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
		       "\"n\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[4,8]}}", data, 8);
	CHECK_EQ_INT(checkpoint_load(net, path), 0);
	CHECK(net->host_params[0] == -2.5f && net->host_params[1] == -INFINITY);

	/* BF16: 1.0 and 3.140625. */
	uint16_t bf[2] = { 0x3f80, 0x4049 };
	int64_t n64 = 11;
	memcpy(data, bf, 4);
	memcpy(data + 4, &n64, 8);
	st_write(path, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
		       "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[4,12]}}", data, 12);
	CHECK_EQ_INT(checkpoint_load(net, path), 0);
	CHECK(net->host_params[0] == 1.0f && net->host_params[1] == 3.140625f);
	CHECK_EQ_INT(net->nodes[0].bn_batches_tracked, 11);

	/* F64 rounds to the nearest float. */
	double d[2] = { 0.1, -1e300 };
	memcpy(data, d, 16);
	memcpy(data + 16, &n64, 8);
	st_write(path, "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
		       "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[16,24]}}", data, 24);
	CHECK_EQ_INT(checkpoint_load(net, path), 0);
	CHECK(net->host_params[0] == 0.1f && net->host_params[1] == -INFINITY);
	fake_net_free(net);
}

TEST(checkpoint_list_prints_entries)
{
	char path[512], *text = NULL;
	size_t len = 0;
	struct net *net = fake_net_new(FAKE_FULL, 12);

	path_join(path, sizeof(path), test_tmpdir(), "list.safetensors");
	CHECK_EQ_INT(checkpoint_save(net, path), 0);
	FILE *out = open_memstream(&text, &len);
	CHECK_EQ_INT(checkpoint_list(path, out), 0);
	fclose(out);
	int lines = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
		char name[128], dtype[16], shape[64];
		CHECK_EQ_INT(sscanf(line, "%127s %15s %63[^\n]", name, dtype, shape), 3);
		const struct state_entry *e = &net->state[lines < net->n_state ? lines : 0];
		CHECK(!strcmp(name, e->name));
		if (!strcmp(name, "fc.weight"))
			CHECK(!strcmp(dtype, "F32") && !strcmp(shape, "[10, 4]"));
		if (!strcmp(name, "bn1.num_batches_tracked"))
			CHECK(!strcmp(dtype, "I64") && !strcmp(shape, "[]"));
	}
	CHECK_EQ_INT(lines, net->n_state);
	free(text);

	path_join(path, sizeof(path), test_tmpdir(), "absent");
	CHECK_ERR(checkpoint_list(path, stdout), GP_EIO, "No such file or directory");
	fake_net_free(net);
}

/* The Python safetensors library must read our files: names, dtypes, shapes and the
 * sum of each tensor as tools/safetensors_check.py prints them. */
TEST(checkpoint_readable_by_python_safetensors)
{
	char path[512], cmd[1200], out[8192];
	struct net *net = fake_net_new(FAKE_FULL, 13);

	if (access("tools/safetensors_check.py", R_OK))
		SKIP("tools/safetensors_check.py not found (run from the repository root)");
	if (test_run("python3 -c 'import numpy, safetensors.numpy'", out, sizeof(out)))
		SKIP("python3 with numpy and safetensors not available");
	/* Finite values only, so that the sums compare. */
	net->host_params[2] = 2.0f;
	net->host_params[3] = 3.0f;
	path_join(path, sizeof(path), test_tmpdir(), "py.safetensors");
	CHECK_EQ_INT(checkpoint_save(net, path), 0);
	snprintf(cmd, sizeof(cmd), "python3 tools/safetensors_check.py '%s'", path);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "metadata format=pt model=fake producer=gpuperf"),
		  "output:\n%s", out);
	for (int i = 0; i < net->n_state; i++) {
		const struct state_entry *e = &net->state[i];
		char want[160], shape[64] = "(";
		double sum = 0;
		for (int d = 0; d < e->ndim; d++)
			snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%lld%s",
				 (long long)e->dims[d], e->ndim == 1 ? "," : d + 1 < e->ndim ? ", " : "");
		strcat(shape, ")");
		snprintf(want, sizeof(want), "%s %s %s sum=", e->name,
			 e->kind == STATE_COUNTER ? "int64" : "float32", shape);
		const char *line = strstr(out, want);
		CHECK_MSG(line, "no line \"%s\" in:\n%s", want, out);
		if (!line)
			continue;
		if (e->kind == STATE_COUNTER)
			sum = (double)net->nodes[e->node].bn_batches_tracked;
		else
			for (size_t k = 0; k < e->numel; k++)
				sum += (e->kind == STATE_PARAM ? net->host_params
							       : net->host_running)[e->offset + k];
		CHECK_NEAR(strtod(line + strlen(want), NULL), sum, 1e-9 * (1 + fabs(sum)));
	}
	fake_net_free(net);
}

/* A file written by Python's safetensors.numpy.save_file ({"w": float32 [1.5, -2],
 * "n": int64 3}): it orders entries by dtype, then name, so "n" comes first in the
 * data, unlike our state order. */
TEST(checkpoint_load_python_written_file)
{
	const char *path = "tests/data/ckpt/python_written.safetensors";
	struct net *net = tiny_net_new();

	if (access(path, R_OK))
		SKIP("tests/data/ckpt not found (run from the repository root)");
	CHECK_EQ_INT(checkpoint_load(net, path), 0);
	CHECK(net->host_params[0] == 1.5f && net->host_params[1] == -2.0f);
	CHECK_EQ_INT(net->nodes[0].bn_batches_tracked, 3);
	fake_net_free(net);
}
