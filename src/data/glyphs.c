/* Glyph images for `dataset make --difficulty N` (glyphs.h says what a class is). */
#include "data/glyphs.h"

#include <math.h>
#include <stdlib.h>

enum { SHAPES = 6, FILLS = 4, MARKS = 5 };

/* The shape alone, in the glyph's frame. Under a free rotation a square and a
 * diamond are one shape, so the six are chosen to stay apart at any angle. */
static int shape_covers(int shape, double u, double v, double r)
{
	switch (shape) {
	case 0: return r <= 0.95;                                   /* disc */
	case 1: return fabs(u) <= 0.8 && fabs(v) <= 0.8;            /* square */
	case 2: return v >= -0.85 && v <= 0.75 && fabs(u) <= (v + 0.85) * 0.55; /* triangle */
	case 3: return (fabs(u) <= 0.3 && fabs(v) <= 0.95) ||
		       (fabs(v) <= 0.3 && fabs(u) <= 0.95);         /* cross */
	case 4: return r >= 0.55 && r <= 0.95;                      /* ring */
	default: return r <= 0.95 && v >= -0.1;                     /* half-disc */
	}
}

static int fill_second(int fill, double u, double v, double r)
{
	switch (fill) {
	case 0: return 0;                                               /* solid */
	case 1: return (int)floor((u + 1) * 3.5) & 1;                   /* stripes */
	case 2: return ((int)floor((u + 1) * 3) + (int)floor((v + 1) * 3)) & 1; /* checks */
	default: return ((int)floor(r * 5) + 1) & 1;                    /* bands */
	}
}

int glyph_covers(int c, double u, double v, int *second)
{
	int shape = c % SHAPES, fill = c / SHAPES % FILLS, mark = c / (SHAPES * FILLS) % MARKS;
	double r = sqrt(u * u + v * v);
	*second = 1;
	/* marks: the centre dot is drawn over the shape (a ring gets one too, and
	 * the bands' centre is the other colour for a shorter radius); slots cut it
	 * right through (a short one would miss the ring), as do the two holes (dots
	 * of the second colour would vanish in stripes) */
	if (mark == 1 && r < 0.35)
		return 1;
	if (mark == 4 && ((u - 0.5) * (u - 0.5) + v * v < 0.0576 ||
			  (u + 0.5) * (u + 0.5) + v * v < 0.0576))
		return 0;
	if (mark == 2 && fabs(v) < 0.13)
		return 0;
	if (mark == 3 && (fabs(v) < 0.11 || fabs(u) < 0.11))
		return 0;
	if (!shape_covers(shape, u, v, r))
		return 0;
	*second = fill_second(fill, u, v, r);
	return 1;
}

static uint8_t clamp_u8(double v)
{
	return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5);
}

/* A colour of random hue around lightness level: tab-like, never grey. */
static void color_pick(struct rng *r, double level, double out[3])
{
	double hue = 2 * M_PI * rng_uniform(r);
	out[0] = level + 70 * cos(hue);
	out[1] = level + 70 * cos(hue - 2.1);
	out[2] = level + 70 * cos(hue + 2.1);
}

/* Glyph c of radius rad (pixels) at a random place, aspect and angle, its two
 * colours contrasting in lightness (which is dark is random). */
static void glyph_draw(uint8_t *rgb, int w, int h, int c, double rad, struct rng *r)
{
	double margin = 0.6 * rad;
	double cx = w > 2 * margin ? margin + (w - 2 * margin) * rng_uniform(r) : w / 2.0;
	double cy = h > 2 * margin ? margin + (h - 2 * margin) * rng_uniform(r) : h / 2.0;
	double aspect = exp(0.22 * (2 * rng_uniform(r) - 1)); /* 0.8 .. 1.25 */
	double ang = 2 * M_PI * rng_uniform(r), ca = cos(ang), sa = sin(ang);
	double sx = rad * aspect, sy = rad / aspect;
	int dark_first = rng_uniform(r) < 0.5;
	double col[2][3];
	color_pick(r, dark_first ? 70 : 185, col[0]);
	color_pick(r, dark_first ? 185 : 70, col[1]);
	double reach = 1.42 * (sx > sy ? sx : sy);
	int x0 = (int)floor(cx - reach), x1 = (int)ceil(cx + reach);
	int y0 = (int)floor(cy - reach), y1 = (int)ceil(cy + reach);
	for (int y = y0 < 0 ? 0 : y0; y < (y1 > h ? h : y1); y++)
		for (int x = x0 < 0 ? 0 : x0; x < (x1 > w ? w : x1); x++) {
			double dx = x + 0.5 - cx, dy = y + 0.5 - cy;
			double u = (dx * ca + dy * sa) / sx, v = (-dx * sa + dy * ca) / sy;
			int second;
			if (fabs(u) > 1 || fabs(v) > 1 || !glyph_covers(c, u, v, &second))
				continue;
			uint8_t *p = rgb + ((size_t)y * w + x) * 3;
			for (int k = 0; k < 3; k++)
				p[k] = clamp_u8(col[second][k]);
		}
}

/* A class other than c (c itself when there is only one). */
static int other_class(int c, int classes, struct rng *r)
{
	if (classes < 2)
		return c;
	return (c + 1 + (int)rng_below(r, (uint32_t)(classes - 1))) % classes;
}

void glyph_image_draw(uint8_t *rgb, int w, int h, int c, int classes, int difficulty,
		      struct rng *r)
{
	int d = difficulty < 1 ? 1 : difficulty > GLYPH_DIFFICULTY_MAX ? GLYPH_DIFFICULTY_MAX
								       : difficulty;
	double unit = (w < h ? w : h) / 2.0;
	/* background: a gradient between two random colours, and from level 2 a
	 * grating of random frequency and angle (clutter that is no class's) */
	double bg[2][3];
	color_pick(r, 80 + 90 * rng_uniform(r), bg[0]);
	color_pick(r, 80 + 90 * rng_uniform(r), bg[1]);
	double ga = 2 * M_PI * rng_uniform(r), gx = cos(ga), gy = sin(ga);
	double ta = 2 * M_PI * rng_uniform(r), tx = cos(ta), ty = sin(ta);
	double tf = 2 * M_PI * (0.03 + 0.09 * rng_uniform(r)), tph = 2 * M_PI * rng_uniform(r);
	double tamp = d >= 2 ? 20 + 20 * rng_uniform(r) : 0;
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			double t = 0.5 + 0.5 * ((x - w / 2.0) * gx + (y - h / 2.0) * gy) / unit;
			t = t < 0 ? 0 : t > 1 ? 1 : t;
			double g = tamp * sin(tf * (x * tx + y * ty) + tph);
			uint8_t *p = rgb + ((size_t)y * w + x) * 3;
			for (int k = 0; k < 3; k++)
				p[k] = clamp_u8(bg[0][k] + (bg[1][k] - bg[0][k]) * t + g);
		}
	static const double rad_lo[] = { 0, 0.45, 0.35, 0.30 }, rad_hi[] = { 0, 0.80, 0.65, 0.55 };
	static const int dis_lo[] = { 0, 0, 2, 4 }, dis_n[] = { 1, 1, 3, 4 };
	static const double noise_sd[] = { 0, 6, 12, 20 };
	double rad = unit * (rad_lo[d] + (rad_hi[d] - rad_lo[d]) * rng_uniform(r));
	int distractors = dis_lo[d] + (int)rng_below(r, (uint32_t)dis_n[d]);
	int over = d >= 3 ? distractors / 2 : 0; /* drawn after the class's glyph */
	for (int i = 0; i < distractors; i++) {
		if (i == distractors - over)
			glyph_draw(rgb, w, h, c, rad, r);
		double hi = d >= 3 ? 0.75 * rad : 0.35 * unit;
		double lo = 0.15 * unit < hi ? 0.15 * unit : hi;
		glyph_draw(rgb, w, h, other_class(c, classes, r), lo + (hi - lo) * rng_uniform(r), r);
	}
	if (over == 0)
		glyph_draw(rgb, w, h, c, rad, r);
	for (size_t i = 0; i < (size_t)w * h * 3; i++)
		rgb[i] = clamp_u8(rgb[i] + noise_sd[d] * rng_normal(r));
}
