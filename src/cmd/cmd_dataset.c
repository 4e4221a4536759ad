/* gpuperf dataset make: a synthetic ImageFolder of real JPEGs whose texture
 * (oriented stripes, colours, shapes) depends on the class, so decoding costs
 * what real photos cost and a model can tell the classes apart; --difficulty
 * draws glyphs to find instead (data/glyphs.h), for runs that must learn. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmds.h"
#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "data/glyphs.h"
#include "data/image.h"
#include "report/result.h"

struct make_job {
	const char *out_dir;
	int classes, images, w, h, quality, threads;
	int difficulty; /* 0: class textures; 1..3: glyphs to find (data/glyphs.h) */
	double val_fraction; /* > 0: out_dir/train and out_dir/val */
	uint64_t seed;
	atomic_int next, done;
	atomic_llong bytes;
	atomic_int err; /* first error code; its message goes to err_msg */
	char err_msg[512];
	pthread_mutex_t err_mu;
};

/* mkdir -p: make path and any missing parents. */
static int dir_make(const char *path)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p)
			continue;
		char c = *p;
		*p = 0;
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return gp_error(GP_EIO, "cannot create folder '%s': %s", buf,
					strerror(errno));
		if (!c)
			return 0;
		*p = c;
	}
}

static uint8_t clamp_u8(double v)
{
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5);
}

/* Class c: stripes at a class angle and frequency in a class colour, a second
 * weaker grating, a few discs and boxes, and per-pixel noise; image-specific
 * phases, jitter and shape positions come from rng. */
static void texture_draw(uint8_t *rgb, int w, int h, int c, int classes, struct rng *r)
{
	double angle = M_PI * c / classes + 0.1 * (rng_uniform(r) - 0.5);
	double freq = 0.03 + 0.02 * (c % 5) + 0.004 * rng_uniform(r);
	double angle2 = angle + M_PI / 3 + 0.7 * (c % 3), freq2 = 0.011 + 0.005 * (c % 4);
	double ph1 = 2 * M_PI * rng_uniform(r), ph2 = 2 * M_PI * rng_uniform(r);
	double hue = 2 * M_PI * c / classes;
	double col[3] = { 128 + 100 * cos(hue), 128 + 100 * cos(hue - 2.1),
			  128 + 100 * cos(hue + 2.1) };
	double ca = cos(angle), sa = sin(angle), cb = cos(angle2), sb = sin(angle2);
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			double s1 = sin(freq * 2 * M_PI * (x * ca + y * sa) + ph1);
			double s2 = sin(freq2 * 2 * M_PI * (x * cb + y * sb) + ph2);
			double g = 0.55 + 0.3 * s1 + 0.15 * s2;
			uint8_t *p = rgb + ((size_t)y * w + x) * 3;
			for (int k = 0; k < 3; k++)
				p[k] = clamp_u8(col[k] * g + 40 * s2 + 12 * (rng_uniform(r) - 0.5));
		}
	int shapes = 3 + c % 4;
	for (int s = 0; s < shapes; s++) {
		int cx = (int)rng_below(r, (uint32_t)w), cy = (int)rng_below(r, (uint32_t)h);
		int rad = 4 + (int)rng_below(r, (uint32_t)(w < h ? w : h) / 6 + 1);
		int disc = (s + c) % 2;
		uint8_t fill[3] = { clamp_u8(255 - col[0]), clamp_u8(255 - col[1]),
				    clamp_u8(255 - col[2]) };
		for (int y = cy - rad; y <= cy + rad; y++)
			for (int x = cx - rad; x <= cx + rad; x++) {
				if (x < 0 || y < 0 || x >= w || y >= h)
					continue;
				if (disc && (x - cx) * (x - cx) + (y - cy) * (y - cy) > rad * rad)
					continue;
				memcpy(rgb + ((size_t)y * w + x) * 3, fill, 3);
			}
	}
}

/* How many of class c's images go to val/: its share, rounded, at least one when
 * there is a share at all (a class absent from val/ would shift the labels). */
static int class_images(const struct make_job *j, int c)
{
	return j->images / j->classes + (c < j->images % j->classes);
}

static int class_val_images(const struct make_job *j, int c)
{
	if (j->val_fraction <= 0)
		return 0;
	int n = (int)lround(j->val_fraction * class_images(j, c));
	return n < 1 ? 1 : n;
}

static int image_write(struct make_job *j, int i, uint8_t *rgb)
{
	struct rng r;
	int c = i % j->classes;
	rng_seed(&r, j->seed, (uint64_t)i);
	if (j->difficulty > 0)
		glyph_image_draw(rgb, j->w, j->h, c, j->classes, j->difficulty, &r);
	else
		texture_draw(rgb, j->w, j->h, c, j->classes, &r);
	uint8_t *jpeg;
	size_t len;
	GP_TRY(image_encode_jpeg(rgb, j->w, j->h, j->quality, &jpeg, &len));
	char path[4096];
	/* a class's first images (i / classes counts them) go to val/ */
	if (j->val_fraction > 0)
		snprintf(path, sizeof(path), "%s/%s/class_%03d/img_%07d.jpg", j->out_dir,
			 i / j->classes < class_val_images(j, c) ? "val" : "train", c, i);
	else
		snprintf(path, sizeof(path), "%s/class_%03d/img_%07d.jpg", j->out_dir, c, i);
	int rc = atomic_file_write(path, jpeg, len);
	if (rc == 0)
		atomic_fetch_add(&j->bytes, (long long)len);
	image_jpeg_free(jpeg);
	return rc;
}

static void *make_worker(void *arg)
{
	struct make_job *j = arg;
	uint8_t *rgb = malloc((size_t)j->w * j->h * 3);
	int rc = rgb ? 0 : gp_error(GP_ENOMEM, "out of memory for a %dx%d image", j->w, j->h);
	while (rc == 0 && !atomic_load(&j->err)) {
		int i = atomic_fetch_add(&j->next, 1);
		if (i >= j->images)
			break;
		rc = image_write(j, i, rgb);
		atomic_fetch_add(&j->done, 1);
	}
	if (rc < 0) {
		pthread_mutex_lock(&j->err_mu);
		if (!atomic_load(&j->err)) {
			snprintf(j->err_msg, sizeof(j->err_msg), "%s", gp_errmsg());
			atomic_store(&j->err, rc);
		}
		pthread_mutex_unlock(&j->err_mu);
	}
	free(rgb);
	return NULL;
}

static int dataset_make(struct make_job *j)
{
	char path[4096];
	for (int c = 0; c < j->classes; c++)
		for (int s = 0; s < (j->val_fraction > 0 ? 2 : 1); s++) {
			if (j->val_fraction > 0)
				snprintf(path, sizeof(path), "%s/%s/class_%03d", j->out_dir, s ? "val" : "train", c);
			else
				snprintf(path, sizeof(path), "%s/class_%03d", j->out_dir, c);
			GP_TRY(dir_make(path));
		}
	pthread_t tids[64];
	int started = 0;
	double t0 = gp_now_s();
	pthread_mutex_init(&j->err_mu, NULL);
	for (; started < j->threads; started++)
		if (pthread_create(&tids[started], NULL, make_worker, j) != 0)
			break;
	if (started == 0) {
		pthread_mutex_destroy(&j->err_mu);
		return gp_error(GP_ENOMEM, "cannot start a thread");
	}
	/* Progress on one line while the workers run, redrawn every quarter second;
	 * the short naps keep a small job from waiting on the display. */
	double shown = 0;
	while (atomic_load(&j->done) < j->images && !atomic_load(&j->err)) {
		if (gp_now_s() - shown >= 0.25) {
			fprintf(stderr, "\rmaking images: %d/%d", atomic_load(&j->done), j->images);
			shown = gp_now_s();
		}
		usleep(10000);
	}
	for (int t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	pthread_mutex_destroy(&j->err_mu);
	fprintf(stderr, "\rmaking images: %d/%d\n", atomic_load(&j->done), j->images);
	if (atomic_load(&j->err))
		return gp_error(atomic_load(&j->err), "%s", j->err_msg);
	double bytes = (double)atomic_load(&j->bytes);
	printf("wrote %d images in %d classes to %s: %.1f MB (%.1f KB per image) in %.2f s\n",
	       j->images, j->classes, j->out_dir, bytes / 1e6, bytes / 1e3 / j->images,
	       gp_now_s() - t0);
	if (j->val_fraction > 0) {
		int val = 0;
		for (int c = 0; c < j->classes; c++)
			val += class_val_images(j, c);
		printf("split: %d images in %s/train, %d in %s/val\n", j->images - val, j->out_dir, val,
		       j->out_dir);
	}
	return 0;
}

int cmd_dataset(int argc, char **argv)
{
	const char *out = NULL, *size = "500x375";
	int classes = 10, images = 100, quality = 90, difficulty = 0, help = 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu > 0 ? (ncpu < 64 ? (int)ncpu : 64) : 1;
	long long seed = 1;
	double val_fraction = 0;
	const struct opt opts[] = {
		{ "out", OPT_PATH, &out, "folder to write (created)", 0 },
		OPT_CLASSES(&classes, "classes (default 10)"),
		{ "images", OPT_INT, &images, "images in all (default 100)", 1, 10000000 },
		{ "size", OPT_STR, &size, "WxH (default 500x375)", 0 },
		OPT_SEED(&seed, "random seed (default 1)"),
		{ "quality", OPT_INT, &quality, "JPEG quality 1..100 (default 90)", 1, 100 },
		{ "difficulty", OPT_INT, &difficulty,
		  "0: class-coloured textures (default, told apart at a glance); 1..3: a "
		  "glyph to find, random pose and colours, clutter and distractors from 2 on",
		  0, GLYPH_DIFFICULTY_MAX },
		{ "val-fraction", OPT_DOUBLE, &val_fraction, "share of each class written to DIR/val, the rest to "
		  "DIR/train (default 0: one ImageFolder)", .min_d = 0, .max_d = 1, .range = OPT_MIN_INCL | OPT_MAX_EXCL },
		{ "threads", OPT_INT, &threads, "threads (default: all cores, at most 64)", 1, 64 },
		OPT_HELP(&help),
		OPT_END(),
	};
	const char *usage = "gpuperf dataset make --out DIR --classes C --images N "
			    "[--size WxH] [--seed S] [--quality Q] [--difficulty 0..3] "
			    "[--val-fraction F]";
	if (argc < 2 || strcmp(argv[1], "make") != 0) {
		if (argc >= 2 && !strcmp(argv[1], "--help")) {
			args_print_help(usage, opts);
			return 0;
		}
		if (argc >= 2 && argv[1][0] != '-')
			return gp_error(GP_EINVAL, "unknown dataset command '%s' (usage: %s)",
					argv[1], usage);
		return gp_error(GP_EINVAL, "usage: %s", usage);
	}
	GP_TRY(args_parse(argc, argv, 2, opts));
	if (help) {
		args_print_help(usage, opts);
		return 0;
	}
	int w, h;
	char extra;
	if (!out)
		return gp_error(GP_EINVAL, "--out DIR is required");
	if (sscanf(size, "%dx%d%c", &w, &h, &extra) != 2 || w < 1 || h < 1 || w > 16384 ||
	    h > 16384)
		return gp_error(GP_EINVAL, "--size: '%s' is not WxH (like 500x375)", size);
	if (difficulty > 0 && classes > GLYPH_CLASSES_MAX)
		return gp_error(GP_EINVAL, "--difficulty %d draws at most %d classes (got --classes %d)",
				difficulty, GLYPH_CLASSES_MAX, classes);
	struct make_job j = {
		.out_dir = out, .classes = classes, .images = images, .w = w, .h = h,
		.quality = quality, .threads = threads < 64 ? threads : 64,
		.seed = (uint64_t)seed, .difficulty = difficulty,
		.val_fraction = val_fraction,
	};
	/* both halves need every class, or their labels would not line up */
	for (int c = 0; val_fraction > 0 && c < classes; c++)
		if (class_images(&j, c) - class_val_images(&j, c) < 1)
			return gp_error(GP_EINVAL, "--val-fraction %g of %d images in %d classes leaves class %d "
					"no training image (give more --images)", val_fraction, images, classes, c);
	GP_TRY(path_dir_prepare(out));
	return dataset_make(&j);
}
