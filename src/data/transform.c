#include "data/transform.h"

#include <math.h>

const float imagenet_mean[3] = { 0.485f, 0.456f, 0.406f };
const float imagenet_std[3] = { 0.229f, 0.224f, 0.225f };

/* splitmix64's finalizer: a bijection that spreads every input bit over the output. */
uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t sample_seed(uint64_t seed, int epoch, int index)
{
	return mix64(mix64(seed) ^ mix64(((uint64_t)(uint32_t)epoch << 32) | (uint32_t)index));
}

static double uniform_range(struct rng *r, double lo, double hi)
{
	return lo + (hi - lo) * rng_uniform(r);
}

/* Python's round(): halves go to the even neighbour, which nearbyint does in the
 * default rounding mode. */
static int py_round(double v)
{
	return (int)nearbyint(v);
}

void rrc_fallback(int width, int height, struct crop_box *out)
{
	double in_ratio = (double)width / height;
	int w = width, h = height;
	if (in_ratio < 3.0 / 4.0)
		h = py_round(w / (3.0 / 4.0));
	else if (in_ratio > 4.0 / 3.0)
		w = py_round(h * (4.0 / 3.0));
	out->w = w;
	out->h = h;
	out->y = (height - h) / 2;
	out->x = (width - w) / 2;
}

int rrc_get_params(struct rng *r, int width, int height, struct crop_box *out)
{
	double area = (double)width * height;
	double log_lo = log(3.0 / 4.0), log_hi = log(4.0 / 3.0);
	for (int attempt = 1; attempt <= 10; attempt++) {
		double target_area = area * uniform_range(r, 0.08, 1.0);
		double aspect = exp(uniform_range(r, log_lo, log_hi));
		int w = py_round(sqrt(target_area * aspect));
		int h = py_round(sqrt(target_area / aspect));
		if (w > 0 && w <= width && h > 0 && h <= height) {
			out->w = w;
			out->h = h;
			out->y = (int)rng_below(r, (uint32_t)(height - h + 1));
			out->x = (int)rng_below(r, (uint32_t)(width - w + 1));
			return attempt;
		}
	}
	rrc_fallback(width, height, out);
	return 11;
}

void resize_short_side(int width, int height, int resize_to, int *out_w, int *out_h)
{
	if (width <= height) {
		*out_w = resize_to;
		*out_h = (int)((double)resize_to * height / width);
	} else {
		*out_h = resize_to;
		*out_w = (int)((double)resize_to * width / height);
	}
}

int center_crop_offset(int in, int out)
{
	return py_round((in - out) / 2.0);
}

void eval_resample_box(int width, int height, int resize_to, int size,
		       struct resample_box *out)
{
	int rw, rh;
	resize_short_side(width, height, resize_to, &rw, &rh);
	double sx = (double)width / rw, sy = (double)height / rh;
	int left = center_crop_offset(rw, size), top = center_crop_offset(rh, size);
	/* The resize sees the whole image; the crop only picks which outputs to keep. */
	out->x0 = left * sx;
	out->x1 = (left + size) * sx;
	out->y0 = top * sy;
	out->y1 = (top + size) * sy;
	out->wx0 = 0;
	out->wy0 = 0;
	out->wx1 = width;
	out->wy1 = height;
}

void crop_resample_box(const struct crop_box *c, struct resample_box *out)
{
	out->x0 = out->wx0 = c->x;
	out->y0 = out->wy0 = c->y;
	out->x1 = out->wx1 = c->x + c->w;
	out->y1 = out->wy1 = c->y + c->h;
}

static int clamp_int(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void resample_box_scale(const struct resample_box *in, int width, int height,
			int scaled_w, int scaled_h, struct resample_box *out)
{
	double sx = (double)scaled_w / width, sy = (double)scaled_h / height;
	out->x0 = in->x0 * sx;
	out->x1 = in->x1 * sx;
	out->y0 = in->y0 * sy;
	out->y1 = in->y1 * sy;
	out->wx0 = clamp_int((int)floor(in->wx0 * sx), 0, scaled_w);
	out->wy0 = clamp_int((int)floor(in->wy0 * sy), 0, scaled_h);
	out->wx1 = clamp_int((int)ceil(in->wx1 * sx), out->wx0 + 1, scaled_w);
	out->wy1 = clamp_int((int)ceil(in->wy1 * sy), out->wy0 + 1, scaled_h);
}

void sample_geometry_make(int train, int size, uint64_t seed, int width, int height,
			  struct sample_geometry *out)
{
	out->flip = 0;
	if (train) {
		struct rng r;
		struct crop_box c;
		rng_seed(&r, seed, 0);
		rrc_get_params(&r, width, height, &c);
		out->flip = rng_uniform(&r) < 0.5;
		crop_resample_box(&c, &out->box);
		out->need_w = (double)width * size / c.w;
		out->need_h = (double)height * size / c.h;
	} else {
		int rw, rh, resize_to = eval_resize_size(size);
		resize_short_side(width, height, resize_to, &rw, &rh);
		eval_resample_box(width, height, resize_to, size, &out->box);
		out->need_w = rw;
		out->need_h = rh;
	}
}
