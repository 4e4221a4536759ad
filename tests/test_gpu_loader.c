/* The GPU loader (data/gpu_loader.h) on the CPU stand-in for nvJPEG
 * (loader_standin.h), against the CPU loader: order, crops, replacements of corrupt
 * files, counts, the decode thread and its buffers, resuming, errors, launched
 * batches and data-parallel shards. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/tuning.h"
#include "data/dataset.h"
#include "data/gpu_loader.h"
#include "data/loader.h"
#include "loader_standin.h"
#include "test.h"

/* With the CPU stand-in, the GPU loader's batches are the CPU loader's, bit for bit
 * (both decode at full size here): the same order, geometry, replacements of the
 * truncated JPEG and the text file in tests/data/bad, labels and counts. */
TEST(gpu_loader_order_and_replacements_match_cpu_loader)
{
	for (int train = 1; train >= 0; train--) {
		struct both_loaders bl;
		if (both_open(&bl, train, 42, 0) < 0) {
			both_close(&bl);
			return;
		}
		for (int b = 0; !test_failed() && b < 6; b++) {
			struct batch *cb;
			struct gpu_batch gb;
			if (both_next(&bl, &cb, &gb) < 0)
				break;
			CHECK_EQ_INT(gb.n, cb->n);
			check_same_batch(&gb, cb, b);
			loader_release(bl.cl, cb);
		}
		struct loader_stats cs, gs;
		struct gpu_decode_stats ds_st;
		loader_get_stats(bl.cl, &cs);
		gpu_loader_get_stats(bl.gl, &gs, &ds_st);
		CHECK_EQ_INT(gs.images, cs.images);
		CHECK_EQ_INT(gs.skipped_corrupt, cs.skipped_corrupt);
		CHECK(cs.skipped_corrupt >= 2);
		CHECK(!strcmp(gpu_loader_backend(bl.gl), "caller's"));
		both_close(&bl);
	}
}

/* The decode thread runs ahead of the caller: a held batch must stay as it was while
 * the thread writes the next ones (into the other buffers, never the held one), and
 * the counts are those of the delivered batches only. Each batch is checked against
 * the CPU loader after the thread has had time to decode ahead. */
TEST(gpu_loader_thread_keeps_held_batch_and_counts_delivered)
{
	enum { FLOATS = 4 * 3 * 16 * 16 };
	struct both_loaders bl;
	if (both_open(&bl, 1, 7, 0) < 0) {
		both_close(&bl);
		return;
	}
	static float copy[FLOATS];
	void *prev = NULL;
	long images = 0;
	for (int b = 0; !test_failed() && b < 8; b++) {
		struct batch *cb;
		struct gpu_batch gb;
		if (both_next(&bl, &cb, &gb) < 0)
			break;
		CHECK_MSG(gb.x != prev, "batch %d: in the buffer of the batch before", b);
		prev = gb.x;
		memcpy(copy, gb.x, sizeof(copy));
		struct timespec nap = { 0, 30 * 1000 * 1000 }; /* the thread decodes b + 1 */
		nanosleep(&nap, NULL);
		CHECK_MSG(!memcmp(copy, gb.x, sizeof(float) * 3 * 16 * 16 * gb.n),
			  "batch %d: overwritten while held", b);
		check_same_batch(&gb, cb, b);
		images += gb.n;
		struct loader_stats cs, gs;
		struct gpu_decode_stats dst;
		loader_get_stats(bl.cl, &cs);
		gpu_loader_get_stats(bl.gl, &gs, &dst);
		CHECK_MSG(gs.images == images, "batch %d: %ld images counted, %ld delivered", b,
			  gs.images, images);
		CHECK_EQ_INT(gs.skipped_corrupt, cs.skipped_corrupt);
		loader_release(bl.cl, cb);
	}
	both_close(&bl);
}

/* GPUPERF_DECODE_BUFFERS=N: while the caller holds a batch, the thread decodes the
 * next N - 1 and then waits (N full runs, no more); the batches are the CPU loader's
 * whatever N. Out-of-range values take the default. */
TEST(gpu_loader_thread_runs_buffers_less_one_ahead)
{
	static const char *const vals[] = { "2", "3", "4", "9" };
	static const int want[] = { 2, 3, 4, TUNING_DECODE_BUFFERS_DEFAULT };
	for (int v = 0; v < 4 && !test_failed(); v++) {
		setenv("GPUPERF_DECODE_BUFFERS", vals[v], 1);
		tuning_reload();
		struct both_loaders bl;
		if (both_open(&bl, 1, 3, 0) == 0)
			CHECK_EQ_INT(gpu_loader_outputs(bl.gl), want[v]);
		for (int b = 0; !test_failed() && b < 6; b++) {
			struct batch *cb;
			struct gpu_batch gb;
			if (both_next(&bl, &cb, &gb) < 0)
				break;
			if (b == 0) { /* held: the thread fills the other buffers and stops */
				struct timespec nap = { 0, 150 * 1000 * 1000 };
				nanosleep(&nap, NULL);
				CHECK_MSG(bl.cd.full_runs == want[v], "%s buffers: %d batches decoded "
					  "while the first is held", vals[v], bl.cd.full_runs);
			}
			check_same_batch(&gb, cb, b);
			loader_release(bl.cl, cb);
		}
		both_close(&bl);
	}
	unsetenv("GPUPERF_DECODE_BUFFERS");
	tuning_reload();
}

/* A resumed run starts at the batch it asks for, whatever the thread decoded ahead in
 * the run before: batches 3.. of a loader started at 3 are the CPU loader's. */
TEST(gpu_loader_thread_resumes_at_start_batch)
{
	struct both_loaders bl;
	if (both_open(&bl, 1, 42, 3) < 0) {
		both_close(&bl);
		return;
	}
	for (int b = 0; !test_failed() && b < 4; b++) {
		struct batch *cb;
		struct gpu_batch gb;
		if (both_next(&bl, &cb, &gb) < 0)
			break;
		CHECK_EQ_INT(gb.epoch * 2 + gb.index, 3 + b);
		check_same_batch(&gb, cb, 3 + b);
		loader_release(bl.cl, cb);
	}
	both_close(&bl);
}

/* A failure of the decoder (a CUDA error on the GPU) in the thread comes back at the
 * batch it was making, not before: batches 0 and 1 arrive, batch 2 is the error, and
 * so is every call after; destroy then joins the stopped thread. */
TEST(gpu_loader_thread_error_reaches_its_batch)
{
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open("tests/data/bad", 0, 16, &ds), 0);
	if (test_failed())
		return;
	dataset_set_scaled_decode(ds, 0);
	struct cpu_decoder cd;
	CHECK_EQ_INT(cpu_decoder_init(&cd, 4, 16), 0);
	cd.fail_batch = 2;
	struct gpu_loader_decoder ops = cpu_decoder_ops(&cd);
	struct gpu_loader_config gc = { .batch = 4, .size = 16, .train = 0, .seed = 42 };
	struct gpu_loader *gl = NULL;
	CHECK_MSG(gpu_loader_create_with(ds, &gc, &ops, 1, &gl) == 0, "%s", gp_errmsg());
	struct gpu_batch gb;
	for (int b = 0; !test_failed() && b < 2; b++) {
		CHECK_MSG(gpu_loader_next(gl, &gb) == 0, "batch %d: %s", b, gp_errmsg());
		CHECK_EQ_INT(gb.index, b);
	}
	for (int again = 0; !test_failed() && again < 2; again++) {
		CHECK_EQ_INT(gpu_loader_next(gl, &gb), GP_EDEVICE);
		CHECK_MSG(strstr(gp_errmsg(), "injected failure at batch 2"), "got '%s'",
			  gp_errmsg());
	}
	struct loader_stats gs;
	struct gpu_decode_stats dst;
	gpu_loader_get_stats(gl, &gs, &dst);
	CHECK_EQ_INT(gs.images, 8);
	gpu_loader_destroy(gl);
	cpu_decoder_free(&cd);
	dataset_close(ds);
}

/* Data parallelism: rank r of 2 through the GPU loader (CPU stand-in) reads the
 * samples, crops and replacements of the CPU loader's shard r, batch after batch over
 * three epochs; a shard outside the ranks, or a shard too small for a batch, is one
 * clear line. */
TEST(gpu_loader_shards_as_cpu_loader)
{
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open("tests/data/bad", 1, 16, &ds), 0);
	if (test_failed())
		return;
	dataset_set_scaled_decode(ds, 0);
	for (int rank = 0; rank < 2 && !test_failed(); rank++) {
		struct cpu_decoder cd;
		CHECK_EQ_INT(cpu_decoder_init(&cd, 2, 16), 0);
		struct gpu_loader_decoder ops = cpu_decoder_ops(&cd);
		struct loader_config lc = { .batch = 2, .workers = 0, .prefetch = 1, .size = 16,
					    .train = 1, .drop_last = 1, .seed = 5, .shard = rank,
					    .shards = 2 };
		struct gpu_loader_config gc = { .batch = 2, .size = 16, .train = 1, .drop_last = 1,
						.seed = 5, .shard = rank, .shards = 2 };
		struct loader *cl = NULL;
		struct gpu_loader *gl = NULL;
		CHECK_MSG(loader_create(ds, &lc, &cl) == 0, "%s", gp_errmsg());
		CHECK_MSG(gpu_loader_create_with(ds, &gc, &ops, 1, &gl) == 0, "%s", gp_errmsg());
		if (!test_failed()) {
			CHECK_EQ_INT(gpu_loader_batches_per_epoch(gl), loader_batches_per_epoch(cl));
			CHECK_EQ_INT(gpu_loader_batches_per_epoch(gl), 2);
		}
		for (int b = 0; !test_failed() && b < 6; b++) {
			struct batch *cb;
			struct gpu_batch gb;
			CHECK_MSG(loader_next(cl, &cb) == 0, "%s", gp_errmsg());
			CHECK_MSG(gpu_loader_next(gl, &gb) == 0, "%s", gp_errmsg());
			if (test_failed())
				break;
			CHECK_EQ_INT(gb.n, cb->n);
			check_same_batch(&gb, cb, b);
			loader_release(cl, cb);
		}
		gpu_loader_destroy(gl);
		loader_destroy(cl);
		cpu_decoder_free(&cd);
	}
	struct cpu_decoder cd;
	CHECK_EQ_INT(cpu_decoder_init(&cd, 5, 16), 0);
	struct gpu_loader_decoder ops = cpu_decoder_ops(&cd);
	struct gpu_loader *gl = NULL;
	struct gpu_loader_config bad = { .batch = 2, .size = 16, .train = 1, .drop_last = 1,
					 .shard = 2, .shards = 2 };
	CHECK_EQ_INT(gpu_loader_create_with(ds, &bad, &ops, 1, &gl), GP_EINVAL);
	CHECK(strstr(gp_errmsg(), "shard 2 of 2") != NULL);
	bad = (struct gpu_loader_config){ .batch = 5, .size = 16, .train = 1, .drop_last = 1,
					  .shard = 1, .shards = 2 };
	CHECK_EQ_INT(gpu_loader_create_with(ds, &bad, &ops, 1, &gl), GP_EINVAL);
	CHECK(strstr(gp_errmsg(), "4 images make no full batch of 5 on each rank") != NULL);
	CHECK(gl == NULL);
	cpu_decoder_free(&cd);
	dataset_close(ds);
}

/* A decoder that launches (gpu_decoder_launch's way: the pixels there once waited
 * for): gpu_loader_next waits for each batch's buffer before it returns, once a batch,
 * so the batches are still the CPU loader's, replacements included; a failed wait is
 * that batch's error, and the next call's (it waited for ever before: its slot had
 * gone back to the decode thread for a later batch). */
TEST(gpu_loader_waits_for_launched_batches)
{
	for (int fail = -1; fail <= 2 && !test_failed(); fail += 3) {
		struct both_loaders bl;
		if (both_open(&bl, 1, 42, 0) < 0) {
			both_close(&bl);
			return;
		}
		gpu_loader_destroy(bl.gl); /* again, with the launching stand-in */
		bl.gl = NULL;
		bl.cd.launch = 1;
		bl.cd.fail_wait = fail;
		struct gpu_loader_decoder ops = cpu_decoder_ops(&bl.cd);
		ops.wait = cpu_decoder_wait;
		struct gpu_loader_config gc = { .batch = 4, .size = 16, .train = 1, .seed = 42 };
		CHECK_MSG(gpu_loader_create_with(bl.ds, &gc, &ops, 1, &bl.gl) == 0, "%s", gp_errmsg());
		for (int b = 0; !test_failed() && b < 6; b++) {
			struct batch *cb;
			struct gpu_batch gb;
			CHECK_MSG(loader_next(bl.cl, &cb) == 0, "%s", gp_errmsg());
			int rc = gpu_loader_next(bl.gl, &gb);
			if (b == fail) {
				CHECK_EQ_INT(rc, GP_EDEVICE);
				CHECK(strstr(gp_errmsg(), "injected failure of wait") != NULL);
				CHECK_EQ_INT(gpu_loader_next(bl.gl, &gb), GP_EDEVICE);
				CHECK(strstr(gp_errmsg(), "injected failure of wait") != NULL);
				loader_release(bl.cl, cb);
				break;
			}
			CHECK_MSG(rc == 0, "%s", gp_errmsg());
			if (!test_failed())
				check_same_batch(&gb, cb, b);
			CHECK_EQ_INT(bl.cd.waits, b + 1);
			loader_release(bl.cl, cb);
		}
		both_close(&bl);
	}
}

/* destroy joins the thread wherever it is: never started, decoding ahead right after
 * the first batch, or waiting for a buffer to come back mid-epoch. ASan finds what
 * such an exit would leak. */
TEST(gpu_loader_thread_destroy_at_any_point)
{
	struct dataset *ds;
	CHECK_EQ_INT(dataset_open("tests/data/bad", 1, 16, &ds), 0);
	if (test_failed())
		return;
	dataset_set_scaled_decode(ds, 0);
	for (int batches = 0; !test_failed() && batches < 4; batches++) {
		struct cpu_decoder cd;
		CHECK_EQ_INT(cpu_decoder_init(&cd, 4, 16), 0);
		struct gpu_loader_decoder ops = cpu_decoder_ops(&cd);
		struct gpu_loader_config gc = { .batch = 4, .size = 16, .train = 1, .seed = 3 };
		struct gpu_loader *gl = NULL;
		CHECK_MSG(gpu_loader_create_with(ds, &gc, &ops, 1, &gl) == 0, "%s", gp_errmsg());
		for (int b = 0; !test_failed() && b < batches; b++) {
			struct gpu_batch gb;
			CHECK_MSG(gpu_loader_next(gl, &gb) == 0, "%s", gp_errmsg());
		}
		if (batches == 3) {
			struct timespec nap = { 0, 20 * 1000 * 1000 }; /* blocked on a buffer */
			nanosleep(&nap, NULL);
		}
		gpu_loader_destroy(gl);
		cpu_decoder_free(&cd);
	}
	dataset_close(ds);
}

/* Two decoders (the loader's default on the JPEG engines), each with its own thread
 * taking every other batch: the batches are still the CPU loader's in order over
 * three epochs, from batch 0 and from a resumed batch 3, and both decoders work; a
 * failure of the second decoder's second batch (batch 3) comes back at batch 3, after
 * batches 0 to 2, and at every call after, wherever the first decoder is by then. */
TEST(gpu_loader_two_decoders_match_cpu_loader)
{
	for (long start = 0; start <= 3 && !test_failed(); start += 3) {
		struct both_loaders bl;
		if (both_open(&bl, 1, 42, start) < 0) {
			both_close(&bl);
			return;
		}
		gpu_loader_destroy(bl.gl); /* again, with two stand-ins */
		bl.gl = NULL;
		struct cpu_decoder second;
		CHECK_EQ_INT(cpu_decoder_init(&second, 4, 16), 0);
		struct gpu_loader_decoder ops[2] = { cpu_decoder_ops(&bl.cd),
						     cpu_decoder_ops(&second) };
		struct gpu_loader_config gc = { .batch = 4, .size = 16, .train = 1, .seed = 42,
						.start_batch = start };
		CHECK_MSG(gpu_loader_create_with(bl.ds, &gc, ops, 2, &bl.gl) == 0, "%s",
			  gp_errmsg());
		if (!test_failed()) {
			CHECK_EQ_INT(gpu_loader_decoders(bl.gl), 2);
			CHECK_EQ_INT(gpu_loader_outputs(bl.gl) % 2, 0);
		}
		for (int b = 0; !test_failed() && b < 6; b++) {
			struct batch *cb;
			struct gpu_batch gb;
			if (both_next(&bl, &cb, &gb) < 0)
				break;
			CHECK_EQ_INT(gb.epoch * 2 + gb.index, start + b);
			check_same_batch(&gb, cb, (int)start + b);
			loader_release(bl.cl, cb);
		}
		gpu_loader_destroy(bl.gl); /* its threads joined: the counts are still */
		bl.gl = NULL;
		CHECK_MSG(bl.cd.full_runs >= 3 && second.full_runs >= 3,
			  "runs per decoder: %d and %d", bl.cd.full_runs, second.full_runs);
		both_close(&bl);
		cpu_decoder_free(&second);
	}

	struct dataset *ds;
	CHECK_EQ_INT(dataset_open("tests/data/bad", 0, 16, &ds), 0);
	if (test_failed())
		return;
	dataset_set_scaled_decode(ds, 0);
	struct cpu_decoder cd[2];
	CHECK_EQ_INT(cpu_decoder_init(&cd[0], 4, 16), 0);
	CHECK_EQ_INT(cpu_decoder_init(&cd[1], 4, 16), 0);
	cd[1].fail_batch = 1;
	struct gpu_loader_decoder ops[2] = { cpu_decoder_ops(&cd[0]), cpu_decoder_ops(&cd[1]) };
	struct gpu_loader_config gc = { .batch = 4, .size = 16, .train = 0, .seed = 42 };
	struct gpu_loader *gl = NULL;
	CHECK_MSG(gpu_loader_create_with(ds, &gc, ops, 2, &gl) == 0, "%s", gp_errmsg());
	struct gpu_batch gb;
	for (int b = 0; !test_failed() && b < 3; b++) {
		CHECK_MSG(gpu_loader_next(gl, &gb) == 0, "batch %d: %s", b, gp_errmsg());
		CHECK_EQ_INT(gb.epoch * 2 + gb.index, b);
	}
	for (int again = 0; !test_failed() && again < 2; again++) {
		CHECK_EQ_INT(gpu_loader_next(gl, &gb), GP_EDEVICE);
		CHECK_MSG(strstr(gp_errmsg(), "injected failure at batch 1"), "got '%s'",
			  gp_errmsg());
	}
	CHECK_EQ_INT(gpu_loader_create_with(ds, &gc, ops, 3, &gl), GP_EINVAL);
	gpu_loader_destroy(gl);
	cpu_decoder_free(&cd[0]);
	cpu_decoder_free(&cd[1]);
	dataset_close(ds);
}
