/* The loader: the same seed gives the same bytes whatever the worker count, bad
 * files are replaced and counted, shutdown with batches out is clean, and the
 * dataset command writes images the loader reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "test.h"

#define BAD_DIR "tests/data/bad"

/* A tiny ImageFolder: 2 classes x 10 JPEGs of 40 x 30. */
static const char *folder_make(void)
{
	const char *root = test_tmpdir();
	char dir[512], path[600];
	uint8_t rgb[40 * 30 * 3];
	for (int c = 0; c < 2; c++) {
		snprintf(dir, sizeof(dir), "%s/class_%d", root, c);
		CHECK(mkdir(dir, 0755) == 0);
		for (int i = 0; i < 10; i++) {
			for (int p = 0; p < 40 * 30; p++) {
				rgb[3 * p] = (uint8_t)(p % 40 * 6 + i);
				rgb[3 * p + 1] = (uint8_t)(p / 40 * 8 + 100 * c);
				rgb[3 * p + 2] = (uint8_t)(i * 20);
			}
			uint8_t *jpeg;
			size_t len;
			CHECK_EQ_INT(image_encode_jpeg(rgb, 40, 30, 90, &jpeg, &len), 0);
			snprintf(path, sizeof(path), "%s/img_%02d.jpg", dir, i);
			FILE *f = fopen(path, "wb");
			CHECK(f && fwrite(jpeg, 1, len, f) == len);
			if (f)
				fclose(f);
			image_jpeg_free(jpeg);
		}
	}
	return root;
}

/* Batches 0..n-1 of a loader, copied out (x then labels, per batch). */
struct run {
	float *x;
	int32_t labels[64];
	int n[16], epoch[16], index[16];
};

static int loader_collect_from(const char *spec, int workers, int prefetch, int batches,
			       uint64_t seed, long start, struct run *r, struct loader_stats *st)
{
	struct dataset *ds;
	struct loader *l;
	struct loader_config cfg = { .batch = 4, .workers = workers, .prefetch = prefetch,
				     .size = 16, .train = 1, .seed = seed, .start_batch = start };
	size_t floats = 4 * 3 * 16 * 16;
	GP_TRY(dataset_open(spec, 1, 16, &ds));
	int rc = loader_create(ds, &cfg, &l);
	if (rc < 0)
		goto out_ds;
	r->x = calloc(floats * batches, sizeof(float));
	for (int i = 0; i < batches && rc == 0; i++) {
		struct batch *b;
		rc = loader_next(l, &b);
		if (rc < 0)
			break;
		memcpy(r->x + floats * i, b->x, sizeof(float) * 3 * 16 * 16 * b->n);
		memcpy(r->labels + 4 * i, b->labels, sizeof(int32_t) * b->n);
		r->n[i] = b->n;
		r->epoch[i] = b->epoch;
		r->index[i] = b->index;
		CHECK(b->wait_ms >= 0);
		loader_release(l, b);
	}
	loader_get_stats(l, st);
	loader_destroy(l);
out_ds:
	dataset_close(ds);
	return rc;
}

static int loader_collect(const char *spec, int workers, int prefetch, int batches,
			  uint64_t seed, struct run *r, struct loader_stats *st)
{
	return loader_collect_from(spec, workers, prefetch, batches, seed, 0, r, st);
}

/* A loader started at batch 6 (epoch 1, batch 1) with threads delivers what one
 * started at 0 delivers from its seventh batch on: the same order, the same crops. */
TEST(data_loader_starts_at_a_batch_as_if_it_had_run)
{
	const char *root = folder_make();
	struct run whole = { 0 }, part = { 0 };
	struct loader_stats st;
	size_t floats = 4 * 3 * 16 * 16;
	CHECK_EQ_INT(loader_collect(root, 0, 2, 9, 7, &whole, &st), 0);
	CHECK_EQ_INT(loader_collect_from(root, 2, 2, 3, 7, 6, &part, &st), 0);
	if (!test_failed()) {
		CHECK(!memcmp(whole.x + 6 * floats, part.x, sizeof(float) * 3 * floats));
		CHECK(!memcmp(whole.labels + 24, part.labels, sizeof(int32_t) * 12));
		for (int i = 0; i < 3; i++) {
			CHECK_EQ_INT(part.epoch[i], (6 + i) / 5);
			CHECK_EQ_INT(part.index[i], (6 + i) % 5);
		}
		/* the second epoch's crops differ from the first's: the start is not ignored */
		CHECK(memcmp(whole.x + 1 * floats, part.x, sizeof(float) * floats) != 0);
	}
	free(whole.x);
	free(part.x);
}

TEST(data_loader_same_bytes_for_any_worker_count)
{
	const char *root = folder_make();
	/* 20 images, batch 4: 5 batches per epoch; 8 batches cross into epoch 1. */
	struct run runs[3] = { 0 };
	struct loader_stats st[3];
	const int workers[3] = { 0, 1, 3 }, prefetch[3] = { 2, 1, 2 };
	for (int k = 0; k < 3; k++)
		CHECK_EQ_INT(loader_collect(root, workers[k], prefetch[k], 8, 42, &runs[k], &st[k]), 0);
	if (test_failed())
		goto out_free;
	for (int k = 1; k < 3; k++) {
		CHECK_MSG(!memcmp(runs[0].x, runs[k].x, sizeof(float) * 8 * 4 * 3 * 16 * 16),
			  "workers %d gives other pixels than workers 0", workers[k]);
		CHECK(!memcmp(runs[0].labels, runs[k].labels, sizeof(runs[0].labels)));
		CHECK(!memcmp(runs[0].index, runs[k].index, sizeof(runs[0].index)));
		CHECK_EQ_INT(st[k].images, 32);
		CHECK_NEAR(st[k].decoded_pixels, st[0].decoded_pixels, 0);
	}
	for (int i = 0; i < 8; i++) {
		CHECK_EQ_INT(runs[0].n[i], 4);
		CHECK_EQ_INT(runs[0].epoch[i], i / 5);
		CHECK_EQ_INT(runs[0].index[i], i % 5);
	}
	/* An epoch holds each class 10 times, in a shuffled order. */
	int per_class[2] = { 0, 0 }, sorted = 1;
	for (int i = 0; i < 20; i++) {
		per_class[runs[0].labels[i]]++;
		sorted &= i == 0 || runs[0].labels[i] >= runs[0].labels[i - 1];
	}
	CHECK(per_class[0] == 10 && per_class[1] == 10);
	CHECK(!sorted);
	/* Another seed gives another order and other crops. */
	struct run other = { 0 };
	struct loader_stats ost;
	CHECK_EQ_INT(loader_collect(root, 2, 1, 1, 43, &other, &ost), 0);
	CHECK(memcmp(other.x, runs[0].x, sizeof(float) * 4 * 3 * 16 * 16) != 0);
	free(other.x);
out_free:
	for (int k = 0; k < 3; k++)
		free(runs[k].x);
}

/* Data parallelism: shard r of 2 at batch 2 holds, batch by batch, the samples of the
 * unsharded loader's batch of 4 at positions r, r + 2 (DistributedSampler's stride),
 * with the same crops; an epoch of a shard is half an epoch. */
TEST(data_loader_shards_split_each_global_batch)
{
	const char *root = folder_make();
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open(root, 1, 16, &ds), 0);
	if (test_failed())
		return;
	struct loader *all, *sh[2];
	struct loader_config c4 = { .batch = 4, .prefetch = 2, .size = 16, .train = 1,
				    .drop_last = 1, .seed = 5 };
	CHECK_EQ_INT(loader_create(ds, &c4, &all), 0);
	for (int r = 0; r < 2; r++) {
		struct loader_config c2 = c4;
		c2.batch = 2;
		c2.shard = r;
		c2.shards = 2;
		c2.workers = r; /* any worker count gives the same bytes */
		CHECK_EQ_INT(loader_create(ds, &c2, &sh[r]), 0);
		CHECK_EQ_INT(loader_batches_per_epoch(sh[r]), 5);
	}
	size_t img = 3 * 16 * 16;
	for (int k = 0; k < 7 && !test_failed(); k++) { /* into the second epoch */
		struct batch *a, *b[2];
		CHECK_EQ_INT(loader_next(all, &a), 0);
		for (int r = 0; r < 2; r++)
			CHECK_EQ_INT(loader_next(sh[r], &b[r]), 0);
		if (test_failed())
			break;
		for (int r = 0; r < 2; r++)
			for (int i = 0; i < 2; i++) {
				int j = 2 * i + r;
				CHECK_EQ_INT(b[r]->labels[i], a->labels[j]);
				CHECK(!memcmp(b[r]->x + img * i, a->x + img * j, img * sizeof(float)));
			}
		loader_release(all, a);
		for (int r = 0; r < 2; r++)
			loader_release(sh[r], b[r]);
	}
	/* a shard that does not exist */
	struct loader *bad = NULL;
	struct loader_config c3 = c4;
	c3.shard = 2;
	c3.shards = 2;
	CHECK(loader_create(ds, &c3, &bad) == GP_EINVAL);
	loader_destroy(all);
	for (int r = 0; r < 2; r++)
		loader_destroy(sh[r]);
	dataset_close(ds);
}

TEST(data_loader_skips_bad_files)
{
	/* tests/data/bad: 6 good JPEGs, a truncated one and a text file, 2 classes. */
	struct run a = { 0 }, b = { 0 };
	struct loader_stats sa, sb;
	CHECK_EQ_INT(loader_collect(BAD_DIR, 0, 1, 4, 42, &a, &sa), 0);
	CHECK_EQ_INT(loader_collect(BAD_DIR, 2, 2, 4, 42, &b, &sb), 0);
	if (test_failed())
		goto out_free;
	for (int i = 0; i < 4; i++)
		CHECK_EQ_INT(a.n[i], 4); /* replaced, so batches stay full */
	CHECK_EQ_INT(sa.images, 16);
	/* Two epochs, each meets both bad files at least once. */
	CHECK(sa.skipped_corrupt >= 4);
	CHECK_EQ_INT(sb.skipped_corrupt, sa.skipped_corrupt);
	CHECK(!memcmp(a.x, b.x, sizeof(float) * 4 * 4 * 3 * 16 * 16));
	CHECK(!memcmp(a.labels, b.labels, sizeof(a.labels)));
	/* The command line warns once per file. */
	char cmd[512], out[8192];
	snprintf(cmd, sizeof(cmd), "%s loader --data " BAD_DIR " --batch 4 --workers 0,2 "
		 "--batches 6 --size 16", test_bin());
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	int warnings = 0;
	for (const char *p = out; (p = strstr(p, "warning: skipping")); p++)
		warnings++;
	CHECK_EQ_INT(warnings, 4); /* 2 files, once per loader (two worker counts) */
	CHECK(strstr(out, "truncated.jpg': Premature end of JPEG file"));
	CHECK(strstr(out, "notes.jpg': Not a JPEG file"));
out_free:
	free(a.x);
	free(b.x);
}

static long allocs, frees;
static void *count_alloc(size_t n) { allocs++; return malloc(n); }
static void count_free(void *p) { frees++; free(p); }

TEST(data_loader_shutdown_with_batches_out)
{
	struct dataset *ds;
	struct loader *l;
	struct batch *b1, *b2;
	CHECK_EQ_INT(dataset_open("synthetic:40:4", 1, 8, &ds), 0);
	if (test_failed())
		return;
	allocs = frees = 0;
	loader_set_host_allocator(count_alloc, count_free);
	struct loader_config cfg = { .batch = 8, .workers = 2, .prefetch = 1, .size = 8,
				     .train = 1, .seed = 1 };
	CHECK_EQ_INT(loader_create(ds, &cfg, &l), 0);
	loader_set_host_allocator(malloc, free);
	if (test_failed())
		goto out_ds;
	CHECK_EQ_INT(allocs, 4); /* 2 slots x (pixels + labels) */
	CHECK_EQ_INT(loader_next(l, &b1), 0);
	CHECK_EQ_INT(loader_next(l, &b2), 0);
	CHECK_EQ_INT(b2->index, 1);
	/* Both buffers are out: asking for a third is an error, not a hang. */
	struct batch *b3;
	CHECK_EQ_INT(loader_next(l, &b3), GP_EINVAL);
	loader_release(l, b1);
	loader_destroy(l); /* b2 still out, workers busy or waiting */
	CHECK_EQ_INT(frees, 4);

	cfg.workers = 0;
	cfg.drop_last = 1;
	cfg.batch = 16; /* 40 images: 2 full batches per epoch */
	CHECK_EQ_INT(loader_create(ds, &cfg, &l), 0);
	CHECK_EQ_INT(loader_batches_per_epoch(l), 2);
	CHECK_EQ_INT(loader_next(l, &b1), 0);
	CHECK_EQ_INT(b1->n, 16);
	loader_destroy(l);
	cfg.drop_last = 0;
	cfg.batch = 64;
	CHECK_EQ_INT(loader_create(ds, &cfg, &l), 0);
	CHECK_EQ_INT(loader_next(l, &b1), 0);
	CHECK_EQ_INT(b1->n, 40); /* the partial batch is kept */
	loader_destroy(l);
	cfg.size = 9;
	CHECK_EQ_INT(loader_create(ds, &cfg, &l), GP_EINVAL);
out_ds:
	dataset_close(ds);
}

TEST(data_dataset_make_writes_jpegs)
{
	const char *dir = test_tmpdir();
	char cmd[600], out[4096];
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s/ds --classes 3 --images 7 "
		 "--size 40x30 --seed 3 --quality 80", test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	CHECK_MSG(strstr(out, "wrote 7 images in 3 classes"), "output: %s", out);
	snprintf(cmd, sizeof(cmd), "%s/ds", dir);
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open(cmd, 0, 24, &ds), 0);
	if (test_failed())
		return;
	CHECK_EQ_INT(dataset_count(ds), 7);
	CHECK_EQ_INT(dataset_classes(ds), 3);
	CHECK(!strcmp(dataset_class_name(ds, 2), "class_002"));
	struct image_ctx ctx;
	CHECK_EQ_INT(image_ctx_init(&ctx), 0);
	float x[3 * 24 * 24];
	/* Image j goes to class j % 3: class_000 holds 0, 3, 6, class_001 1, 4, ... */
	const int want_labels[7] = { 0, 0, 0, 1, 1, 2, 2 };
	for (int i = 0; i < 7; i++) {
		struct sample_cost cost;
		int32_t label;
		CHECK_EQ_INT(dataset_load(ds, &ctx, i, 0, x, &label, &cost), 0);
		CHECK_NEAR(cost.full_pixels, 40 * 30, 0);
		/* Textured, not flat: pixels spread. */
		double lo = 1e9, hi = -1e9;
		for (int p = 0; p < 3 * 24 * 24; p++) {
			lo = x[p] < lo ? x[p] : lo;
			hi = x[p] > hi ? x[p] : hi;
		}
		CHECK_MSG(hi - lo > 1.0, "image %d is flat (%g..%g)", i, lo, hi);
		CHECK_EQ_INT(label, want_labels[i]);
	}
	image_ctx_free(&ctx);
	dataset_close(ds);
	/* Same seed, same bytes; a bad option is one clear error. */
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s/ds2 --classes 3 --images 7 "
		 "--size 40x30 --seed 3 --quality 80 >/dev/null 2>&1 && cmp %s/ds/class_001/img_0000004.jpg "
		 "%s/ds2/class_001/img_0000004.jpg", test_bin(), dir, dir, dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 0);
	snprintf(cmd, sizeof(cmd), "%s dataset make --out %s/ds3 --size 40", test_bin(), dir);
	CHECK_EQ_INT(test_run(cmd, out, sizeof(out)), 2);
	CHECK(strstr(out, "is not WxH"));
}
