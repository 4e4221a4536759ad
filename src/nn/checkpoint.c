/* safetensors reader and writer. The layout: an 8-byte little-endian header length N,
 * N bytes of JSON that map each tensor name to its dtype, shape and [begin, end) byte
 * offsets into the data that follows, then the raw little-endian data. The reader
 * checks what the reference (Rust) implementation checks, so that a file accepted
 * here is accepted by Python too: the offsets cover the data exactly, without holes
 * or overlaps. */
#include "nn/checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"
#include "core/sort.h"

/* Tensor data goes between memory and file with memcpy, which keeps the file's byte
 * order only on a little-endian host (every machine this tool targets). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c assumes a little-endian host"
#endif

/* The reference implementation refuses larger headers too; the limit also keeps a
 * garbage length field from asking for a huge allocation. */
#define CKPT_HEADER_MAX_BYTES (100ull << 20)
#define CKPT_MAX_DIMS 8
#define CKPT_SHAPE_STR 128

/* Every dtype of the safetensors spec, so that any valid file can be listed. */
enum st_dtype {
	ST_F32 = 0, ST_F64, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8,
	ST_U64, ST_U32, ST_U16, ST_U8, ST_BOOL, ST_F8_E4M3, ST_F8_E5M2, ST_COUNT
};

static const struct {
	const char *name;
	size_t bytes;
} st_dtypes[ST_COUNT] = {
	[ST_F32] = { "F32", 4 },   [ST_F64] = { "F64", 8 },   [ST_F16] = { "F16", 2 },
	[ST_BF16] = { "BF16", 2 }, [ST_I64] = { "I64", 8 },   [ST_I32] = { "I32", 4 },
	[ST_I16] = { "I16", 2 },   [ST_I8] = { "I8", 1 },     [ST_U64] = { "U64", 8 },
	[ST_U32] = { "U32", 4 },   [ST_U16] = { "U16", 2 },   [ST_U8] = { "U8", 1 },
	[ST_BOOL] = { "BOOL", 1 }, [ST_F8_E4M3] = { "F8_E4M3", 1 },
	[ST_F8_E5M2] = { "F8_E5M2", 1 },
};

struct ckpt_tensor {
	const char *name; /* owned by the header JSON */
	enum st_dtype dtype;
	int ndim;
	int64_t dims[CKPT_MAX_DIMS];
	uint64_t begin, end; /* byte offsets into the data section */
};

struct ckpt_file {
	const char *path;
	FILE *f;
	json_t *header;
	uint64_t data_start; /* 8 + header length */
	uint64_t data_bytes;
	struct ckpt_tensor *tensors; /* in file order */
	int n_tensors;
};

/* "[3, 4]" as Python prints a shape; "[]" for a scalar. */
static const char *shape_format(char buf[CKPT_SHAPE_STR], const int64_t *dims, int ndim)
{
	size_t len = 0;
	buf[len++] = '[';
	for (int i = 0; i < ndim && len < CKPT_SHAPE_STR - 24; i++)
		len += snprintf(buf + len, CKPT_SHAPE_STR - len, "%s%lld", i ? ", " : "",
				(long long)dims[i]);
	snprintf(buf + len, CKPT_SHAPE_STR - len, "]");
	return buf;
}

/* --- the net's side ---------------------------------------------------------------- */

/* A state entry must describe memory the net really has: the lead's net.c fills the
 * table, and a wrong offset here would read or write past the host arrays. */
static int state_entry_check(const struct net *net, int i)
{
	const struct state_entry *e = &net->state[i];
	uint64_t numel = 1;

	if (e->ndim < 0 || e->ndim > 4)
		return gp_error(GP_EINVAL, "state entry '%s' has %d dims", e->name, e->ndim);
	for (int d = 0; d < e->ndim; d++) {
		if (e->dims[d] < 0)
			return gp_error(GP_EINVAL, "state entry '%s' has a negative dim", e->name);
		numel *= (uint64_t)e->dims[d];
	}
	if (numel != e->numel)
		return gp_error(GP_EINVAL, "state entry '%s' has numel %zu but its shape holds %llu",
				e->name, e->numel, (unsigned long long)numel);
	switch (e->kind) {
	case STATE_PARAM:
	case STATE_RUNNING: {
		size_t count = e->kind == STATE_PARAM ? net->params_count : net->running_count;
		const float *base = e->kind == STATE_PARAM ? net->host_params : net->host_running;
		if (e->offset > count || e->numel > count - e->offset || (e->numel && !base))
			return gp_error(GP_EINVAL, "state entry '%s' lies outside the host arrays",
					e->name);
		return 0;
	}
	case STATE_COUNTER:
		if (e->node < 0 || e->node >= net->n_nodes || e->numel != 1)
			return gp_error(GP_EINVAL, "counter '%s' has no node or is not a scalar",
					e->name);
		return 0;
	}
	return gp_error(GP_EINVAL, "state entry '%s' has an unknown kind", e->name);
}

static int net_check(const struct net *net)
{
	if (net->n_state < 0 || net->n_state > GP_MAX_STATE)
		return gp_error(GP_EINVAL, "net has %d state entries", net->n_state);
	for (int i = 0; i < net->n_state; i++)
		GP_TRY(state_entry_check(net, i));
	return 0;
}

static float *state_floats(const struct net *net, const struct state_entry *e)
{
	return (e->kind == STATE_PARAM ? net->host_params : net->host_running) + e->offset;
}

/* --- writing --------------------------------------------------------------------------- */

/* The JSON header: __metadata__ first, then the entries in state order with
 * contiguous offsets. */
static int header_build(const struct net *net, json_t **out)
{
	json_t *root = json_object();
	uint64_t offset = 0;
	int rc;

	if (!root)
		return gp_error(GP_ENOMEM, "out of memory building the checkpoint header");
	if (json_object_set_new(root, "__metadata__",
				json_pack("{s:s, s:s, s:s}", "format", "pt", "producer", "gpuperf",
					  "model", net->model))) {
		rc = gp_error(GP_EINVAL, "model name '%s' is not valid UTF-8", net->model);
		goto free_root;
	}
	for (int i = 0; i < net->n_state; i++) {
		const struct state_entry *e = &net->state[i];
		enum st_dtype dt = e->kind == STATE_COUNTER ? ST_I64 : ST_F32;
		uint64_t end = offset + e->numel * st_dtypes[dt].bytes;
		json_t *shape = json_array();

		for (int d = 0; d < e->ndim; d++)
			json_array_append_new(shape, json_integer(e->dims[d]));
		json_t *entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtypes[dt].name,
					  "shape", shape, "data_offsets", (json_int_t)offset,
					  (json_int_t)end);
		if (!entry || json_array_size(shape) != (size_t)e->ndim) {
			json_decref(entry);
			rc = gp_error(GP_ENOMEM, "out of memory building the checkpoint header");
			goto free_root;
		}
		if (!strcmp(e->name, "__metadata__") || json_object_get(root, e->name)) {
			json_decref(entry);
			rc = gp_error(GP_EINVAL, "state key '%s' is reserved or repeated", e->name);
			goto free_root;
		}
		if (json_object_set_new(root, e->name, entry)) {
			rc = gp_error(GP_EINVAL, "state key '%s' is not valid UTF-8", e->name);
			goto free_root;
		}
		offset = end;
	}
	*out = root;
	return 0;

free_root:
	json_decref(root);
	return rc;
}

static int data_write(const struct net *net, FILE *f)
{
	for (int i = 0; i < net->n_state; i++) {
		const struct state_entry *e = &net->state[i];
		size_t wrote;

		if (e->kind == STATE_COUNTER)
			wrote = fwrite(&net->nodes[e->node].bn_batches_tracked, sizeof(int64_t), 1, f);
		else
			wrote = fwrite(state_floats(net, e), sizeof(float), e->numel, f);
		if (wrote != (e->kind == STATE_COUNTER ? 1 : e->numel))
			return -1;
	}
	return 0;
}

int checkpoint_save(const struct net *net, const char *path)
{
	json_t *header = NULL;
	char *json = NULL;
	struct atomic_file af;
	int rc;

	GP_TRY(net_check(net));
	GP_TRY(header_build(net, &header));
	json = json_dumps(header, JSON_COMPACT);
	if (!json) {
		rc = gp_error(GP_ENOMEM, "out of memory writing '%s'", path);
		goto free_json;
	}
	if ((rc = atomic_file_open(&af, path)) < 0)
		goto free_json;
	/* The header is padded with spaces to a multiple of 8 so that the data starts
	 * aligned, as the Python writer does. */
	size_t json_bytes = strlen(json);
	size_t pad_bytes = (8 - json_bytes % 8) % 8;
	uint64_t header_bytes = json_bytes + pad_bytes;
	if (fwrite(&header_bytes, 8, 1, af.f) != 1 ||
	    fwrite(json, 1, json_bytes, af.f) != json_bytes ||
	    fwrite("       ", 1, pad_bytes, af.f) != pad_bytes || data_write(net, af.f)) {
		rc = gp_error(GP_EIO, "cannot write '%s': %s", path, strerror(errno));
		atomic_file_abort(&af);
		goto free_json;
	}
	rc = atomic_file_commit(&af);
free_json:
	free(json);
	json_decref(header);
	return rc;
}

/* --- reading the file ------------------------------------------------------------------- */

static int tensor_parse(const struct ckpt_file *cf, const char *name, json_t *val,
			struct ckpt_tensor *t)
{
	json_t *dtype = json_object_get(val, "dtype");
	json_t *shape = json_object_get(val, "shape");
	json_t *offsets = json_object_get(val, "data_offsets");
	char shape_str[CKPT_SHAPE_STR];

	t->name = name;
	if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offsets))
		return gp_error(GP_EFORMAT, "'%s': entry '%s' needs \"dtype\", \"shape\" and "
			       "\"data_offsets\"", cf->path, name);
	for (t->dtype = 0; t->dtype < ST_COUNT; t->dtype++)
		if (!strcmp(st_dtypes[t->dtype].name, json_string_value(dtype)))
			break;
	if (t->dtype == ST_COUNT)
		return gp_error(GP_EFORMAT, "'%s': entry '%s' has unknown dtype '%s'", cf->path,
				name, json_string_value(dtype));

	t->ndim = (int)json_array_size(shape);
	if (t->ndim > CKPT_MAX_DIMS)
		return gp_error(GP_EFORMAT, "'%s': entry '%s' has %d dims (at most %d supported)",
				cf->path, name, t->ndim, CKPT_MAX_DIMS);
	/* Bounding numel by 2^60 keeps numel * 8 bytes from overflowing. */
	uint64_t numel = 1;
	for (int d = 0; d < t->ndim; d++) {
		json_t *dim = json_array_get(shape, d);
		if (!json_is_integer(dim) || json_integer_value(dim) < 0)
			return gp_error(GP_EFORMAT, "'%s': entry '%s' has a shape that is not a list "
				       "of non-negative integers", cf->path, name);
		t->dims[d] = json_integer_value(dim);
	}
	for (int d = 0; d < t->ndim; d++) {
		if (t->dims[d] && numel > (1ull << 60) / (uint64_t)t->dims[d])
			return gp_error(GP_EFORMAT, "'%s': entry '%s' has a shape too large for any "
				       "file", cf->path, name);
		numel *= (uint64_t)t->dims[d];
	}

	json_t *b = json_array_get(offsets, 0), *e = json_array_get(offsets, 1);
	if (json_array_size(offsets) != 2 || !json_is_integer(b) || !json_is_integer(e) ||
	    json_integer_value(b) < 0 || json_integer_value(e) < json_integer_value(b))
		return gp_error(GP_EFORMAT, "'%s': entry '%s' needs data_offsets [begin, end] with "
			       "0 <= begin <= end", cf->path, name);
	t->begin = (uint64_t)json_integer_value(b);
	t->end = (uint64_t)json_integer_value(e);
	uint64_t need_bytes = numel * st_dtypes[t->dtype].bytes;
	if (t->end - t->begin != need_bytes)
		return gp_error(GP_EFORMAT, "'%s': entry '%s' has data_offsets [%llu, %llu] "
			       "(%llu bytes) but %s %s needs %llu bytes", cf->path, name,
			       (unsigned long long)t->begin, (unsigned long long)t->end,
			       (unsigned long long)(t->end - t->begin), st_dtypes[t->dtype].name,
			       shape_format(shape_str, t->dims, t->ndim),
			       (unsigned long long)need_bytes);
	return 0;
}

static int by_offsets(const void *a, const void *b)
{
	const struct ckpt_tensor *x = *(const struct ckpt_tensor *const *)a;
	const struct ckpt_tensor *y = *(const struct ckpt_tensor *const *)b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Sorted by offsets, each tensor must start where the previous one ended, and the
 * last must end exactly at the end of the file. */
static int offsets_check(const struct ckpt_file *cf)
{
	const struct ckpt_tensor **order;
	uint64_t covered = 0;
	int rc = 0;

	if (!cf->n_tensors)
		goto check_end;
	order = malloc(cf->n_tensors * sizeof(*order));
	if (!order)
		return gp_error(GP_ENOMEM, "out of memory reading '%s'", cf->path);
	for (int i = 0; i < cf->n_tensors; i++)
		order[i] = &cf->tensors[i];
	gp_qsort(order, cf->n_tensors, sizeof(*order), by_offsets);
	for (int i = 0; i < cf->n_tensors && !rc; i++) {
		if (order[i]->begin < covered)
			rc = gp_error(GP_EFORMAT, "'%s': entries '%s' and '%s' overlap "
				      "(data_offsets [%llu, %llu] and [%llu, %llu])", cf->path,
				      order[i - 1]->name, order[i]->name,
				      (unsigned long long)order[i - 1]->begin,
				      (unsigned long long)order[i - 1]->end,
				      (unsigned long long)order[i]->begin,
				      (unsigned long long)order[i]->end);
		else if (order[i]->begin > covered)
			rc = gp_error(GP_EFORMAT, "'%s': data bytes [%llu, %llu) belong to no entry "
				      "(before '%s')", cf->path, (unsigned long long)covered,
				      (unsigned long long)order[i]->begin, order[i]->name);
		else if (order[i]->end > cf->data_bytes)
			rc = gp_error(GP_EFORMAT, "'%s' is truncated: entry '%s' ends at data byte "
				      "%llu but the file holds %llu data bytes", cf->path,
				      order[i]->name, (unsigned long long)order[i]->end,
				      (unsigned long long)cf->data_bytes);
		covered = order[i]->end;
	}
	free(order);
	if (rc)
		return rc;
check_end:
	if (covered != cf->data_bytes)
		return gp_error(GP_EFORMAT, "'%s': the last %llu data bytes belong to no entry",
				cf->path, (unsigned long long)(cf->data_bytes - covered));
	return 0;
}

static int metadata_check(const struct ckpt_file *cf, json_t *meta)
{
	const char *key;
	json_t *val;

	if (!json_is_object(meta))
		return gp_error(GP_EFORMAT, "'%s': __metadata__ is not an object", cf->path);
	json_object_foreach(meta, key, val)
		if (!json_is_string(val))
			return gp_error(GP_EFORMAT, "'%s': __metadata__ value '%s' is not a string",
					cf->path, key);
	return 0;
}

static void file_close(struct ckpt_file *cf)
{
	free(cf->tensors);
	json_decref(cf->header);
	if (cf->f)
		fclose(cf->f);
	memset(cf, 0, sizeof(*cf));
}

/* Open path and check everything about it that does not depend on a net. */
static int file_open(struct ckpt_file *cf, const char *path)
{
	uint64_t header_bytes;
	char *text = NULL;
	json_error_t jerr;
	int rc;

	memset(cf, 0, sizeof(*cf));
	cf->path = path;
	long long size;
	GP_TRY(file_fopen_read(path, &cf->f, &size));
	uint64_t file_bytes = (uint64_t)size;
	if (file_bytes < 8) {
		rc = gp_error(GP_EFORMAT, "'%s' is not a safetensors file (%llu bytes, shorter "
			      "than the 8-byte header length)", path, (unsigned long long)file_bytes);
		goto close_file;
	}
	if (fread(&header_bytes, 8, 1, cf->f) != 1) {
		rc = gp_error(GP_EIO, "cannot read '%s': %s", path, strerror(errno));
		goto close_file;
	}
	if (header_bytes > file_bytes - 8) {
		rc = gp_error(GP_EFORMAT, "'%s' is not a safetensors file (header length %llu "
			      "past end of file)", path, (unsigned long long)header_bytes);
		goto close_file;
	}
	if (header_bytes > CKPT_HEADER_MAX_BYTES) {
		rc = gp_error(GP_EFORMAT, "'%s' is not a safetensors file (header length %llu "
			      "over the 100 MiB limit)", path, (unsigned long long)header_bytes);
		goto close_file;
	}
	cf->data_start = 8 + header_bytes;
	cf->data_bytes = file_bytes - cf->data_start;

	text = malloc(header_bytes + 1);
	if (!text) {
		rc = gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
		goto close_file;
	}
	if (fread(text, 1, header_bytes, cf->f) != header_bytes) {
		rc = gp_error(GP_EIO, "cannot read '%s': %s", path, strerror(errno));
		goto free_text;
	}
	cf->header = json_loadb(text, header_bytes, JSON_REJECT_DUPLICATES, &jerr);
	if (!cf->header) {
		rc = gp_error(GP_EFORMAT, "'%s': header is not JSON (%s, at byte %d)", path,
			      jerr.text, jerr.position);
		goto free_text;
	}
	if (!json_is_object(cf->header)) {
		rc = gp_error(GP_EFORMAT, "'%s': header is not a JSON object", path);
		goto free_text;
	}

	cf->tensors = calloc(json_object_size(cf->header) + 1, sizeof(*cf->tensors));
	if (!cf->tensors) {
		rc = gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
		goto free_text;
	}
	const char *key;
	json_t *val;
	json_object_foreach(cf->header, key, val) {
		if (!strcmp(key, "__metadata__"))
			rc = metadata_check(cf, val);
		else
			rc = tensor_parse(cf, key, val, &cf->tensors[cf->n_tensors++]);
		if (rc)
			goto free_text;
	}
	rc = offsets_check(cf);
	if (rc)
		goto free_text;
	free(text);
	return 0;

free_text:
	free(text);
close_file:
	file_close(cf);
	return rc;
}

/* --- loading into a net ------------------------------------------------------------------ */

static float f16_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	uint32_t bits;
	float f;

	if (exp == 0x1f)
		bits = sign | 0x7f800000u | man << 13;
	else if (exp)
		bits = sign | (exp + 112) << 23 | man << 13;
	else /* zero or subnormal: man * 2^-24, exact in float */
		return sign ? -ldexpf((float)man, -24) : ldexpf((float)man, -24);
	memcpy(&f, &bits, 4);
	return f;
}

static void floats_convert(float *dst, const unsigned char *src, size_t n, enum st_dtype dt)
{
	for (size_t i = 0; i < n; i++) {
		switch (dt) {
		case ST_F64: {
			double d;
			memcpy(&d, src + 8 * i, 8);
			dst[i] = (float)d;
			break;
		}
		case ST_F16: {
			uint16_t h;
			memcpy(&h, src + 2 * i, 2);
			dst[i] = f16_to_float(h);
			break;
		}
		case ST_BF16: {
			uint16_t h;
			uint32_t bits;
			memcpy(&h, src + 2 * i, 2);
			bits = (uint32_t)h << 16;
			memcpy(&dst[i], &bits, 4);
			break;
		}
		default:
			memcpy(&dst[i], src + 4 * i, 4);
			break;
		}
	}
}

static int64_t counter_convert(const unsigned char *src, enum st_dtype dt)
{
	if (dt == ST_I32) {
		int32_t v;
		memcpy(&v, src, 4);
		return v;
	}
	int64_t v;
	memcpy(&v, src, 8);
	return v;
}

/* Like load_state_dict(strict=True): pair every net entry with the file entry of the
 * same name, and report the first missing and first unexpected key with the counts.
 * Fills tensor_of[i] for each state entry. Quadratic, but nets have a few hundred keys. */
static int keys_match(const struct ckpt_file *cf, const struct net *net, int *tensor_of)
{
	char *used = calloc(cf->n_tensors + 1, 1);
	const char *first_missing = NULL, *first_unexpected = NULL;
	int n_missing = 0, n_unexpected = 0;

	if (!used)
		return gp_error(GP_ENOMEM, "out of memory reading '%s'", cf->path);
	for (int i = 0; i < net->n_state; i++) {
		tensor_of[i] = -1;
		for (int j = 0; j < cf->n_tensors && tensor_of[i] < 0; j++)
			if (!strcmp(net->state[i].name, cf->tensors[j].name))
				tensor_of[i] = j, used[j] = 1;
		if (tensor_of[i] < 0 && !n_missing++)
			first_missing = net->state[i].name;
	}
	for (int j = 0; j < cf->n_tensors; j++)
		if (!used[j] && !n_unexpected++)
			first_unexpected = cf->tensors[j].name;
	free(used);
	if (!n_missing && !n_unexpected)
		return 0;

	char missing[GP_NAME_MAX + 64] = "", unexpected[GP_NAME_MAX + 64] = "";
	if (n_missing)
		snprintf(missing, sizeof(missing), "%d missing key%s (first '%.*s')", n_missing,
			 n_missing > 1 ? "s" : "", GP_NAME_MAX + 24, first_missing);
	if (n_unexpected)
		snprintf(unexpected, sizeof(unexpected), "%d unexpected key%s (first '%.*s')",
			 n_unexpected, n_unexpected > 1 ? "s" : "", GP_NAME_MAX + 24,
			 first_unexpected);
	return gp_error(GP_EFORMAT, "'%s' does not match the %s net: %s%s%s", cf->path,
			net->model, missing, n_missing && n_unexpected ? ", " : "", unexpected);
}

/* Shape and dtype of each pair, against what the net holds there. */
static int entries_check(const struct ckpt_file *cf, const struct net *net,
			 const int *tensor_of)
{
	char file_shape[CKPT_SHAPE_STR], net_shape[CKPT_SHAPE_STR];

	for (int i = 0; i < net->n_state; i++) {
		const struct state_entry *e = &net->state[i];
		const struct ckpt_tensor *t = &cf->tensors[tensor_of[i]];
		int same = t->ndim == e->ndim;

		for (int d = 0; same && d < e->ndim; d++)
			same = t->dims[d] == e->dims[d];
		if (!same)
			return gp_error(GP_EFORMAT, "'%s': shape mismatch for '%s': %s in the file, "
				       "%s in the net", cf->path, e->name,
				       shape_format(file_shape, t->dims, t->ndim),
				       shape_format(net_shape, e->dims, e->ndim));
		if (e->kind == STATE_COUNTER && t->dtype != ST_I64 && t->dtype != ST_I32)
			return gp_error(GP_EFORMAT, "'%s': '%s' has dtype %s, expected I64 or I32 "
				       "for a counter", cf->path, e->name, st_dtypes[t->dtype].name);
		if (e->kind != STATE_COUNTER && t->dtype != ST_F32 && t->dtype != ST_F64 &&
		    t->dtype != ST_F16 && t->dtype != ST_BF16)
			return gp_error(GP_EFORMAT, "'%s': '%s' has dtype %s, expected F32, F64, F16 "
				       "or BF16", cf->path, e->name, st_dtypes[t->dtype].name);
	}
	return 0;
}

/* Copy n floats of src into a new array (NULL when n is 0). */
static int floats_dup(const float *src, size_t n, float **out)
{
	*out = NULL;
	if (!n)
		return 0;
	*out = malloc(n * sizeof(float));
	if (!*out)
		return gp_error(GP_ENOMEM, "out of memory loading a checkpoint");
	memcpy(*out, src, n * sizeof(float));
	return 0;
}

int checkpoint_load(struct net *net, const char *path)
{
	struct ckpt_file cf;
	int *tensor_of = NULL;
	float *params = NULL, *running = NULL;
	int64_t *counters = NULL;
	unsigned char *buf = NULL;
	int rc;

	GP_TRY(net_check(net));
	GP_TRY(file_open(&cf, path));
	/* "+ 1" everywhere: a net or file without entries must not look like no memory. */
	tensor_of = malloc((net->n_state + 1) * sizeof(*tensor_of));
	if (!tensor_of) {
		rc = gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
		goto close_file;
	}
	rc = keys_match(&cf, net, tensor_of);
	if (!rc)
		rc = entries_check(&cf, net, tensor_of);
	if (rc)
		goto free_temps;

	/* Load into copies, so that a read error leaves the net as it was. */
	uint64_t max_bytes = 1;
	for (int j = 0; j < cf.n_tensors; j++)
		if (cf.tensors[j].end - cf.tensors[j].begin > max_bytes)
			max_bytes = cf.tensors[j].end - cf.tensors[j].begin;
	rc = floats_dup(net->host_params, net->params_count, &params);
	if (!rc)
		rc = floats_dup(net->host_running, net->running_count, &running);
	if (rc)
		goto free_temps;
	counters = malloc((net->n_state + 1) * sizeof(*counters));
	buf = malloc(max_bytes);
	if (!counters || !buf) {
		rc = gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
		goto free_temps;
	}
	for (int i = 0; i < net->n_state; i++) {
		const struct state_entry *e = &net->state[i];
		const struct ckpt_tensor *t = &cf.tensors[tensor_of[i]];
		size_t bytes = t->end - t->begin;

		if (fseeko(cf.f, (off_t)(cf.data_start + t->begin), SEEK_SET) ||
		    fread(buf, 1, bytes, cf.f) != bytes) {
			rc = gp_error(GP_EIO, "cannot read '%s' from '%s' (file changed?)", e->name,
				      path);
			goto free_temps;
		}
		if (e->kind == STATE_COUNTER)
			counters[i] = counter_convert(buf, t->dtype);
		else
			floats_convert((e->kind == STATE_PARAM ? params : running) + e->offset, buf,
				       e->numel, t->dtype);
	}

	if (params)
		memcpy(net->host_params, params, net->params_count * sizeof(float));
	if (running)
		memcpy(net->host_running, running, net->running_count * sizeof(float));
	for (int i = 0; i < net->n_state; i++)
		if (net->state[i].kind == STATE_COUNTER)
			net->nodes[net->state[i].node].bn_batches_tracked = counters[i];

free_temps:
	free(buf);
	free(counters);
	free(running);
	free(params);
	free(tensor_of);
close_file:
	file_close(&cf);
	return rc;
}

int checkpoint_list(const char *path, FILE *out)
{
	struct ckpt_file cf;
	char shape[CKPT_SHAPE_STR];

	GP_TRY(file_open(&cf, path));
	for (int j = 0; j < cf.n_tensors; j++) {
		const struct ckpt_tensor *t = &cf.tensors[j];
		fprintf(out, "%-48s %-5s %s\n", t->name, st_dtypes[t->dtype].name,
			shape_format(shape, t->dims, t->ndim));
	}
	file_close(&cf);
	return 0;
}

/* --- tensors that are not a net's -------------------------------------------------------- */

static const enum st_dtype blob_st[] = { [CKPT_F32] = ST_F32, [CKPT_F64] = ST_F64, [CKPT_I64] = ST_I64 };

static uint64_t blob_bytes(const struct ckpt_blob *b)
{
	uint64_t n = 1;
	for (int d = 0; d < b->ndim; d++)
		n *= (uint64_t)b->dims[d];
	return n * st_dtypes[blob_st[b->dtype]].bytes;
}

int checkpoint_write_tensors(const char *path, const struct ckpt_blob *t, int n,
			     const char *const *meta, int n_meta)
{
	json_t *root = json_object(), *md = json_object();
	char *json = NULL;
	struct atomic_file af;
	uint64_t offset = 0;
	int rc = 0;
	if (!root || !md) {
		json_decref(md);
		rc = gp_error(GP_ENOMEM, "out of memory writing '%s'", path);
		goto out;
	}
	for (int i = 0; i < n_meta; i++)
		json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1]));
	json_object_set_new(root, "__metadata__", md);
	for (int i = 0; i < n; i++) {
		uint64_t end = offset + blob_bytes(&t[i]);
		json_t *shape = json_array();
		for (int d = 0; d < t[i].ndim; d++)
			json_array_append_new(shape, json_integer(t[i].dims[d]));
		json_object_set_new(root, t[i].name,
				    json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtypes[blob_st[t[i].dtype]].name,
					      "shape", shape, "data_offsets", (json_int_t)offset, (json_int_t)end));
		offset = end;
	}
	json = json_dumps(root, JSON_COMPACT);
	if (!json) {
		rc = gp_error(GP_ENOMEM, "out of memory writing '%s'", path);
		goto out;
	}
	if ((rc = atomic_file_open(&af, path)) < 0)
		goto out;
	size_t json_bytes = strlen(json), pad_bytes = (8 - json_bytes % 8) % 8;
	uint64_t header_bytes = json_bytes + pad_bytes;
	int bad = fwrite(&header_bytes, 8, 1, af.f) != 1 || fwrite(json, 1, json_bytes, af.f) != json_bytes ||
		  fwrite("       ", 1, pad_bytes, af.f) != pad_bytes;
	for (int i = 0; i < n && !bad; i++) {
		size_t bytes = (size_t)blob_bytes(&t[i]);
		bad = bytes && fwrite(t[i].data, 1, bytes, af.f) != bytes;
	}
	if (bad) {
		rc = gp_error(GP_EIO, "cannot write '%s': %s", path, strerror(errno));
		atomic_file_abort(&af);
		goto out;
	}
	rc = atomic_file_commit(&af);
out:
	free(json);
	json_decref(root);
	return rc;
}

int checkpoint_read_tensors(const char *path, struct ckpt_blob *t, int n,
			    int (*meta)(void *user, const char *key, const char *value), void *user)
{
	struct ckpt_file cf;
	char shape[CKPT_SHAPE_STR], want[CKPT_SHAPE_STR];
	int rc = 0;
	GP_TRY(file_open(&cf, path));
	json_t *md = json_object_get(cf.header, "__metadata__");
	const char *key;
	json_t *val;
	if (meta && md)
		json_object_foreach(md, key, val)
			if ((rc = meta(user, key, json_string_value(val))) < 0)
				goto out;
	for (int i = 0; i < n; i++) {
		const struct ckpt_tensor *f = NULL;
		for (int j = 0; j < cf.n_tensors && !f; j++)
			if (!strcmp(cf.tensors[j].name, t[i].name))
				f = &cf.tensors[j];
		if (!f) {
			rc = gp_error(GP_EFORMAT, "'%s' has no '%s'", path, t[i].name);
			goto out;
		}
		int any = t[i].dims[0] < 0, same = f->dtype == blob_st[t[i].dtype] && f->ndim == t[i].ndim;
		for (int d = any; same && d < t[i].ndim; d++)
			same = f->dims[d] == t[i].dims[d];
		if (!same) {
			rc = gp_error(GP_EFORMAT, "'%s': '%s' is %s %s, expected %s %s", path, t[i].name,
				      st_dtypes[f->dtype].name, shape_format(shape, f->dims, f->ndim),
				      st_dtypes[blob_st[t[i].dtype]].name, shape_format(want, t[i].dims, t[i].ndim));
			goto out;
		}
		size_t bytes = (size_t)(f->end - f->begin);
		if (any) {
			t[i].dims[0] = f->dims[0];
			if (!(t[i].data = malloc(bytes ? bytes : 1))) {
				rc = gp_error(GP_ENOMEM, "out of memory reading '%s'", path);
				goto out;
			}
		}
		if (fseeko(cf.f, (off_t)(cf.data_start + f->begin), SEEK_SET) ||
		    (bytes && fread(t[i].data, 1, bytes, cf.f) != bytes)) {
			rc = gp_error(GP_EIO, "cannot read '%s' from '%s' (file changed?)", t[i].name, path);
			goto out;
		}
	}
out:
	file_close(&cf);
	return rc;
}
