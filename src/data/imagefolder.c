/* ImageFolder as torchvision builds it: class = sub-folder of the root, classes in
 * sorted order give the labels, each class's files found by a sorted recursive
 * walk. Only .jpg, .jpeg and .png (any case) count as images. */
#include "data/dataset_impl.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/sort.h"
#include "core/timeutil.h"

#define WALK_DEPTH_MAX 32

struct file_entry {
	char *path;
	size_t dir_len; /* bytes of path that name its folder */
};

struct file_list {
	struct file_entry *v;
	int n, cap;
};

static int has_image_ext(const char *name)
{
	const char *dot = strrchr(name, '.');
	return dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") ||
		       !strcasecmp(dot, ".png"));
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static char *path_join(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	char *p = malloc(la + lb + 2);
	if (p) {
		memcpy(p, a, la);
		p[la] = '/';
		memcpy(p + la + 1, b, lb + 1);
	}
	return p;
}

static int file_list_push(struct file_list *l, char *path, size_t dir_len)
{
	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 256;
		struct file_entry *v = realloc(l->v, sizeof(*v) * cap);
		if (!v)
			return gp_error(GP_ENOMEM, "out of memory listing images");
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = (struct file_entry){ path, dir_len };
	return 0;
}

/* Add the images under dir (recursively, following links like os.walk with
 * followlinks=True, to a bounded depth). */
static int walk_images(const char *dir, int depth, struct file_list *l)
{
	if (depth > WALK_DEPTH_MAX)
		return 0;
	DIR *d = opendir(dir);
	if (!d)
		return gp_error(GP_EIO, "cannot open folder '%s': %s", dir, strerror(errno));
	int rc = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *p = path_join(dir, e->d_name);
		if (!p) {
			rc = gp_error(GP_ENOMEM, "out of memory listing images");
			break;
		}
		if (is_dir(p)) {
			rc = walk_images(p, depth + 1, l);
			free(p);
		} else if (has_image_ext(e->d_name)) {
			rc = file_list_push(l, p, strlen(dir));
			if (rc < 0)
				free(p);
		} else {
			free(p);
		}
		if (rc < 0)
			break;
	}
	closedir(d);
	return rc;
}

/* os.walk's roots sorted as strings, then file names sorted within each root. */
static int file_entry_cmp(const void *pa, const void *pb)
{
	const struct file_entry *a = pa, *b = pb;
	size_t n = a->dir_len < b->dir_len ? a->dir_len : b->dir_len;
	int c = memcmp(a->path, b->path, n);
	if (c)
		return c;
	if (a->dir_len != b->dir_len)
		return a->dir_len < b->dir_len ? -1 : 1;
	return strcmp(a->path + a->dir_len, b->path + b->dir_len);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the sub-folders of root into ds->class_names. */
static int find_classes(struct dataset *ds, const char *root)
{
	DIR *d = opendir(root);
	if (!d)
		return gp_error(GP_EIO, "cannot open dataset folder '%s': %s", root,
				strerror(errno));
	int rc = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *p = path_join(root, e->d_name);
		if (!p) {
			rc = gp_error(GP_ENOMEM, "out of memory listing classes");
			break;
		}
		int dir = is_dir(p);
		free(p);
		if (!dir)
			continue;
		if (ds->classes == cap) {
			cap = cap ? cap * 2 : 64;
			char **v = realloc(ds->class_names, sizeof(*v) * cap);
			if (!v) {
				rc = gp_error(GP_ENOMEM, "out of memory listing classes");
				break;
			}
			ds->class_names = v;
		}
		ds->class_names[ds->classes] = strdup(e->d_name);
		if (!ds->class_names[ds->classes]) {
			rc = gp_error(GP_ENOMEM, "out of memory listing classes");
			break;
		}
		ds->classes++;
	}
	closedir(d);
	if (rc < 0)
		return rc;
	if (ds->classes == 0)
		return gp_error(GP_EFORMAT, "dataset folder '%s' has no class sub-folders", root);
	gp_qsort(ds->class_names, ds->classes, sizeof(char *), str_cmp);
	return 0;
}

/* A folder holding train/ and val/ is a dataset split in two (ImageNet's layout),
 * not two classes named "train" and "val": the split that ds reads becomes the
 * root, with one note line the first time. *split is NULL for a plain ImageFolder,
 * else the root to use (freed by the caller). */
static int split_root(const struct dataset *ds, const char *root, char **split)
{
	static int noted;
	*split = NULL;
	char *train = path_join(root, "train"), *val = path_join(root, "val");
	int rc = 0;
	if (!train || !val) {
		rc = gp_error(GP_ENOMEM, "out of memory");
	} else if (is_dir(train) && is_dir(val)) {
		*split = ds->train ? train : val;
		if (!noted)
			fprintf(stderr, "note: '%s' holds train/ and val/: %s '%s'\n", root,
				ds->train ? "training on" : "evaluating on", *split);
		noted = 1;
	}
	if (*split != train)
		free(train);
	if (*split != val)
		free(val);
	return rc;
}

int imagefolder_has_split(const char *root)
{
	char *train = path_join(root, "train"), *val = path_join(root, "val");
	int yes = train && val && is_dir(train) && is_dir(val);
	free(train);
	free(val);
	return yes;
}

int imagefolder_open(struct dataset *ds, const char *dir)
{
	struct stat st;
	if (stat(dir, &st) != 0)
		return gp_error(GP_ENOTFOUND, "dataset folder '%s' does not exist", dir);
	if (!S_ISDIR(st.st_mode))
		return gp_error(GP_EINVAL, "dataset '%s' is not a folder (nor 'synthetic' "
				"or 'cifar10:DIR')", dir);
	ds->kind = DATASET_FOLDER;
	char *split;
	GP_TRY(split_root(ds, dir, &split));
	const char *root = split ? split : dir;
	int rc = find_classes(ds, root);
	if (rc < 0) {
		free(split);
		return rc;
	}
	struct file_list all = { 0 };
	int32_t *labels = NULL;
	for (int c = 0; c < ds->classes; c++) {
		int first = all.n;
		char *dir = path_join(root, ds->class_names[c]);
		if (!dir) {
			rc = gp_error(GP_ENOMEM, "out of memory listing images");
			goto out_list;
		}
		rc = walk_images(dir, 0, &all);
		if (rc == 0 && all.n == first)
			rc = gp_error(GP_EFORMAT, "class folder '%s' has no images "
				      "(.jpg, .jpeg, .png)", dir);
		free(dir);
		if (rc < 0)
			goto out_list;
		gp_qsort(all.v + first, all.n - first, sizeof(*all.v), file_entry_cmp);
		int32_t *l = realloc(labels, sizeof(*l) * all.n);
		if (!l) {
			rc = gp_error(GP_ENOMEM, "out of memory listing images");
			goto out_list;
		}
		labels = l;
		for (int i = first; i < all.n; i++)
			labels[i] = c;
	}
	ds->paths = malloc(sizeof(char *) * all.n);
	if (!ds->paths) {
		rc = gp_error(GP_ENOMEM, "out of memory listing images");
		goto out_list;
	}
	for (int i = 0; i < all.n; i++)
		ds->paths[i] = all.v[i].path;
	ds->count = all.n;
	ds->labels = labels;
	free(all.v);
	free(split);
	return 0;
out_list:
	for (int i = 0; i < all.n; i++)
		free(all.v[i].path);
	free(all.v);
	free(labels);
	free(split);
	return rc;
}

/* Read, decode at the smallest scale the crop allows and only the region the
 * resample reads, then crop, resize, flip and normalize in one resampling pass. */
int imagefolder_load(const struct dataset *ds, struct image_ctx *ctx, int index,
		     uint64_t seed, float *out, struct sample_cost *cost)
{
	double t0 = gp_now_ms();
	size_t len;
	enum image_kind kind;
	int w, h, flip = 0;
	GP_TRY(image_read_file(ctx, ds->paths[index], &len));
	GP_TRY(image_header(ctx, ctx->file, len, &kind, &w, &h));

	struct sample_geometry g;
	sample_geometry_make(ds->train, ds->size, seed, w, h, &g);
	struct resample_box box = g.box;
	flip = g.flip;
	int sw = w, sh = h;
	if (kind == IMAGE_JPEG && ds->scaled_decode)
		image_pick_scale(w, h, g.need_w, g.need_h, &sw, &sh);
	if (sw != w || sh != h) {
		struct resample_box full = box;
		resample_box_scale(&full, w, h, sw, sh, &box);
	}
	struct image img;
	if (kind == IMAGE_JPEG) {
		/* Decode only the rows and columns the resample reads; the box moves with
		 * the region by whole pixels, which leaves its coefficients bit-identical. */
		int reach[4], ox, oy;
		image_resample_reach(&box, ds->size, ds->size, reach);
		GP_TRY(image_decode_region(ctx, ctx->file, len, sw, sh, reach, &img, &ox, &oy));
		box.x0 -= ox;
		box.x1 -= ox;
		box.wx0 -= ox;
		box.wx1 -= ox;
		box.y0 -= oy;
		box.y1 -= oy;
		box.wy0 -= oy;
		box.wy1 -= oy;
	} else {
		GP_TRY(image_decode(ctx, ctx->file, len, kind, sw, sh, &img));
	}
	cost->decode_ms = gp_now_ms() - t0;
	/* The decode scale's pixels (the "decode gain"), not the region's. */
	cost->decoded_pixels = kind == IMAGE_JPEG ? (double)sw * sh : (double)img.w * img.h;
	cost->full_pixels = (double)w * h;
	return image_resample_chw(ctx, &img, &box, ds->size, ds->size, flip,
				  imagenet_mean, imagenet_std, out);
}
