#include "data/image.h"

#include <cairo.h>
#include <errno.h>
#include <setjmp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
/* after stdio.h, which it needs */
#include <jpeglib.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/error.h"
#include "core/file.h"

int image_ctx_init(struct image_ctx *c)
{
	memset(c, 0, sizeof(*c));
	c->tj = tjInitDecompress();
	if (!c->tj)
		return gp_error(GP_ENOMEM, "cannot create a TurboJPEG decompressor: %s",
				tjGetErrorStr2(NULL));
	return 0;
}

struct jpeg_state;
static void jpeg_state_free(struct jpeg_state *s);

void image_ctx_free(struct image_ctx *c)
{
	if (c->tj)
		tjDestroy(c->tj);
	jpeg_state_free(c->jpeg);
	free(c->file);
	free(c->pix);
	free(c->tmp);
	free(c->coef);
	memset(c, 0, sizeof(*c));
}

/* Grow *buf to at least need bytes (by doubling, so a stream of images settles). */
static int buffer_reserve(void **buf, size_t *cap_bytes, size_t need)
{
	if (need <= *cap_bytes)
		return 0;
	size_t cap = *cap_bytes ? *cap_bytes : 4096;
	while (cap < need)
		cap *= 2;
	void *p = realloc(*buf, cap);
	if (!p)
		return gp_error(GP_ENOMEM, "out of memory (%zu bytes for an image)", cap);
	*buf = p;
	*cap_bytes = cap;
	return 0;
}

int image_read_file(struct image_ctx *c, const char *path, size_t *len_bytes)
{
	int rc = 0;
	long long len;
	FILE *f;
	GP_TRY(file_fopen_read(path, &f, &len));
	rc = buffer_reserve((void **)&c->file, &c->file_cap_bytes, (size_t)len + 1);
	if (rc < 0)
		goto out_close;
	if (fread(c->file, 1, (size_t)len, f) != (size_t)len) {
		rc = gp_error(GP_EIO, "cannot read '%s'", path);
		goto out_close;
	}
	*len_bytes = (size_t)len;
out_close:
	fclose(f);
	return rc;
}

/* Record TurboJPEG's message, then replace the handle: after a failed header
 * read, libjpeg-turbo 2.1 leaves the handle in a state where the next header
 * call "succeeds" without reporting a size. */
static int tj_fail(struct image_ctx *c)
{
	int rc = gp_error(GP_EFORMAT, "%s", tjGetErrorStr2(c->tj));
	tjhandle fresh = tjInitDecompress();
	if (!fresh)
		return gp_error(GP_ENOMEM, "cannot create a TurboJPEG decompressor: %s",
				tjGetErrorStr2(NULL));
	tjDestroy(c->tj);
	c->tj = fresh;
	return rc;
}

static const uint8_t png_magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };

static uint32_t read_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Refused before decoding, so that a small file that unpacks to gigabytes costs
 * only its header. */
static int image_size_check(int w, int h)
{
	if ((long long)w * h > IMAGE_MAX_PIXELS)
		return gp_error(GP_EFORMAT, "image of %dx%d pixels is over the limit of %lld "
				"(a decompression bomb?)", w, h, (long long)IMAGE_MAX_PIXELS);
	return 0;
}

int image_header(struct image_ctx *c, const uint8_t *data, size_t len_bytes,
		 enum image_kind *kind, int *w, int *h)
{
	/* The IHDR chunk always comes first in a PNG: width and height at bytes 16..23. */
	if (len_bytes >= 24 && !memcmp(data, png_magic, 8)) {
		*kind = IMAGE_PNG;
		*w = (int)read_be32(data + 16);
		*h = (int)read_be32(data + 20);
		if (*w <= 0 || *h <= 0)
			return gp_error(GP_EFORMAT, "PNG with a bad size");
		return image_size_check(*w, *h);
	}
	int subsamp, colorspace;
	*w = *h = 0;
	if (tjDecompressHeader3(c->tj, data, (unsigned long)len_bytes, w, h, &subsamp,
				&colorspace) < 0)
		return tj_fail(c);
	if (*w <= 0 || *h <= 0)
		return gp_error(GP_EFORMAT, "JPEG header without an image size");
	*kind = IMAGE_JPEG;
	return image_size_check(*w, *h);
}

void image_pick_scale(int w, int h, double need_w, double need_h, int *scaled_w,
		      int *scaled_h)
{
	int n;
	tjscalingfactor *sf = tjGetScalingFactors(&n);
	*scaled_w = w;
	*scaled_h = h;
	for (int i = 0; sf && i < n; i++) {
		if (sf[i].num > sf[i].denom)
			continue;
		int sw = TJSCALED(w, sf[i]), sh = TJSCALED(h, sf[i]);
		/* A hair of tolerance so that an exact fit is not lost to rounding. */
		if (sw >= need_w - 1e-9 && sh >= need_h - 1e-9 &&
		    (double)sw * sh < (double)*scaled_w * *scaled_h) {
			*scaled_w = sw;
			*scaled_h = sh;
		}
	}
}

struct png_reader {
	const uint8_t *data;
	size_t len, pos;
};

static cairo_status_t png_read(void *closure, unsigned char *out, unsigned int len)
{
	struct png_reader *r = closure;
	if (r->len - r->pos < len)
		return CAIRO_STATUS_READ_ERROR;
	memcpy(out, r->data + r->pos, len);
	r->pos += len;
	return CAIRO_STATUS_SUCCESS;
}

/* cairo gives premultiplied native-endian ARGB; like PIL's convert("RGB") we keep
 * the colour and drop the alpha, so the colour is un-premultiplied. */
static int decode_png(struct image_ctx *c, const uint8_t *data, size_t len_bytes,
		      struct image *out)
{
	int rc = 0;
	struct png_reader r = { data, len_bytes, 0 };
	cairo_surface_t *s = cairo_image_surface_create_from_png_stream(png_read, &r);
	cairo_surface_t *argb = NULL;
	if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
		rc = gp_error(GP_EFORMAT, "%s",
			      cairo_status_to_string(cairo_surface_status(s)));
		goto out_surface;
	}
	cairo_format_t fmt = cairo_image_surface_get_format(s);
	int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
	if (fmt != CAIRO_FORMAT_ARGB32 && fmt != CAIRO_FORMAT_RGB24) {
		/* 16-bit or grey PNGs come in other formats: convert through a paint. */
		argb = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h);
		cairo_t *cr = cairo_create(argb);
		cairo_set_operator(cr, CAIRO_OPERATOR_SOURCE);
		cairo_set_source_surface(cr, s, 0, 0);
		cairo_paint(cr);
		cairo_destroy(cr);
		cairo_surface_flush(argb);
		fmt = CAIRO_FORMAT_ARGB32;
	}
	cairo_surface_t *src = argb ? argb : s;
	rc = buffer_reserve((void **)&c->pix, &c->pix_cap_bytes, (size_t)w * h * 3);
	if (rc < 0)
		goto out_argb;
	const uint8_t *base = cairo_image_surface_get_data(src);
	int stride = cairo_image_surface_get_stride(src);
	for (int y = 0; y < h; y++) {
		const uint32_t *row = (const uint32_t *)(base + (size_t)y * stride);
		uint8_t *o = c->pix + (size_t)y * w * 3;
		for (int x = 0; x < w; x++) {
			uint32_t p = row[x];
			unsigned a = fmt == CAIRO_FORMAT_RGB24 ? 255 : p >> 24;
			unsigned rgb[3] = { (p >> 16) & 255, (p >> 8) & 255, p & 255 };
			for (int k = 0; k < 3; k++)
				o[3 * x + k] = (uint8_t)(a == 255 ? rgb[k]
						: a == 0 ? 0 : (rgb[k] * 255 + a / 2) / a);
		}
	}
	out->pix = c->pix;
	out->w = w;
	out->h = h;
out_argb:
	if (argb)
		cairo_surface_destroy(argb);
out_surface:
	cairo_surface_destroy(s);
	return rc;
}

int image_decode(struct image_ctx *c, const uint8_t *data, size_t len_bytes,
		 enum image_kind kind, int scaled_w, int scaled_h, struct image *out)
{
	if (kind == IMAGE_PNG)
		return decode_png(c, data, len_bytes, out);
	GP_TRY(buffer_reserve((void **)&c->pix, &c->pix_cap_bytes,
			      (size_t)scaled_w * scaled_h * 3));
	/* Any libjpeg warning fails the call too: a truncated file only warns
	 * ("Premature end of JPEG file") and would otherwise give a grey bottom. */
	if (tjDecompress2(c->tj, data, (unsigned long)len_bytes, c->pix, scaled_w, 0,
			  scaled_h, TJPF_RGB, 0) < 0)
		return tj_fail(c);
	out->pix = c->pix;
	out->w = scaled_w;
	out->h = scaled_h;
	return 0;
}

/* libjpeg's own API for the region decode (TurboJPEG 2.1 has no cropping call):
 * one decompressor per thread, errors by longjmp, and any warning fatal as
 * tjDecompress2's return value makes it. */
struct jpeg_state {
	struct jpeg_decompress_struct d;
	struct jpeg_error_mgr err;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
};

static void jpeg_state_free(struct jpeg_state *s)
{
	if (!s)
		return;
	jpeg_destroy_decompress(&s->d);
	free(s);
}

static void jpeg_fail_exit(j_common_ptr ci)
{
	struct jpeg_state *s = (struct jpeg_state *)ci->client_data;
	(*ci->err->format_message)(ci, s->msg);
	longjmp(s->jb, 1);
}

/* A warning (a truncated file: "Premature end of JPEG file") fails the decode as
 * it fails tjDecompress2, with the same message. Trace messages are dropped. */
static void jpeg_fail_warning(j_common_ptr ci, int level)
{
	if (level < 0)
		jpeg_fail_exit(ci);
}

static int jpeg_state_get(struct image_ctx *c, struct jpeg_state **out)
{
	if (!c->jpeg) {
		struct jpeg_state *s = calloc(1, sizeof(struct jpeg_state));
		if (!s)
			return gp_error(GP_ENOMEM, "out of memory for a JPEG decompressor");
		s->d.err = jpeg_std_error(&s->err);
		s->err.error_exit = jpeg_fail_exit;
		s->err.emit_message = jpeg_fail_warning;
		s->d.client_data = s;
		jpeg_create_decompress(&s->d);
		c->jpeg = s;
	}
	*out = c->jpeg;
	return 0;
}

/* Pixels around the region that are decoded and thrown away: the fancy chroma
 * upsampling treats the first and last decoded column and row as edges, so a
 * region's border differs from the same pixels in a full decode (by up to 1 pixel
 * at 4:2:0 in practice; 0 fails test data_region_decode_matches_full, 2 passes);
 * 8 leaves room for any chroma layout and scale. */
#define REGION_MARGIN 8

int image_decode_region(struct image_ctx *c, const uint8_t *data, size_t len_bytes,
			int scaled_w, int scaled_h, const int want[4], struct image *out,
			int *off_x, int *off_y)
{
	struct jpeg_state *got = NULL;
	GP_TRY(jpeg_state_get(c, &got));
	struct jpeg_state *volatile s = got; /* read again after a longjmp */
	/* The scaling factor tjDecompress2 would take for scaled_w x scaled_h: the
	 * first (largest) in TurboJPEG's list whose size fits. */
	int n;
	tjscalingfactor *sf = tjGetScalingFactors(&n);
	if (setjmp(s->jb)) {
		jpeg_abort_decompress(&s->d);
		return gp_error(GP_EFORMAT, "%s", s->msg);
	}
	jpeg_mem_src(&s->d, data, (unsigned long)len_bytes);
	jpeg_read_header(&s->d, TRUE);
	int i = 0, w = (int)s->d.image_width, h = (int)s->d.image_height;
	while (sf && i < n && (TJSCALED(w, sf[i]) > scaled_w || TJSCALED(h, sf[i]) > scaled_h))
		i++;
	if (!sf || i == n || TJSCALED(w, sf[i]) != scaled_w || TJSCALED(h, sf[i]) != scaled_h) {
		jpeg_abort_decompress(&s->d);
		return gp_error(GP_EINVAL, "no TurboJPEG scale gives %dx%d from %dx%d", scaled_w,
				scaled_h, w, h);
	}
	/* What tjDecompress2(..., TJPF_RGB, 0) sets: RGB out, the scale; the accurate
	 * integer DCT and fancy upsampling are libjpeg's defaults. */
	s->d.out_color_space = JCS_EXT_RGB;
	s->d.scale_num = (unsigned)sf[i].num;
	s->d.scale_denom = (unsigned)sf[i].denom;
	jpeg_start_decompress(&s->d);
	int x0 = want[0] - REGION_MARGIN, y0 = want[1] - REGION_MARGIN;
	int x1 = want[2] + REGION_MARGIN, y1 = want[3] + REGION_MARGIN;
	x0 = x0 < 0 ? 0 : x0;
	y0 = y0 < 0 ? 0 : y0;
	x1 = x1 > scaled_w ? scaled_w : x1;
	y1 = y1 > scaled_h ? scaled_h : y1;
	JDIMENSION cx = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
	if (cx > 0 || (int)cw < scaled_w)
		jpeg_crop_scanline(&s->d, &cx, &cw); /* cx moves left to an iMCU edge */
	size_t row_bytes = (size_t)s->d.output_width * 3;
	if (buffer_reserve((void **)&c->pix, &c->pix_cap_bytes,
			   row_bytes * (y1 - y0 + 1)) < 0) {
		jpeg_abort_decompress(&s->d);
		return -1;
	}
	/* Skipped rows are still entropy-decoded (a sequential JPEG has no other way
	 * through), so a broken file fails here as it fails a full decode. */
	if (y0 > 0)
		jpeg_skip_scanlines(&s->d, (JDIMENSION)y0);
	while ((int)s->d.output_scanline < y1) {
		JSAMPROW row = c->pix + row_bytes * (s->d.output_scanline - y0);
		jpeg_read_scanlines(&s->d, &row, 1);
	}
	/* Skipping to the very end would mark the image done without parsing the rest
	 * (libjpeg-turbo's shortcut), and a truncated file would pass: skip to the last
	 * row and decode that one into the spare row. */
	if (s->d.output_scanline < s->d.output_height) {
		jpeg_skip_scanlines(&s->d, s->d.output_height - 1 - s->d.output_scanline);
		JSAMPROW row = c->pix + row_bytes * (y1 - y0);
		jpeg_read_scanlines(&s->d, &row, 1);
	}
	jpeg_finish_decompress(&s->d);
	out->pix = c->pix;
	out->w = (int)s->d.output_width;
	out->h = y1 - y0;
	*off_x = (int)cx;
	*off_y = y0;
	return 0;
}

void image_resample_reach(const struct resample_box *b, int out_w, int out_h, int reach[4])
{
	/* A tap sits within the filter's support (the scale, at least 1) of the box,
	 * and inside the window; one pixel more each side covers the rounding. */
	double sx = (b->x1 - b->x0) / out_w, sy = (b->y1 - b->y0) / out_h;
	double px = sx > 1 ? sx : 1, py = sy > 1 ? sy : 1;
	int x0 = (int)floor(b->x0 - px) - 1, y0 = (int)floor(b->y0 - py) - 1;
	int x1 = (int)ceil(b->x1 + px) + 1, y1 = (int)ceil(b->y1 + py) + 1;
	reach[0] = x0 < b->wx0 ? b->wx0 : x0;
	reach[1] = y0 < b->wy0 ? b->wy0 : y0;
	reach[2] = x1 > b->wx1 ? b->wx1 : x1;
	reach[3] = y1 > b->wy1 ? b->wy1 : y1;
}

/* One axis of PIL's resampling coefficients (precompute_coeffs with the bilinear
 * filter): output i reads in[lo[i] .. lo[i] + cnt[i]) with weights w[i * k ..]. */
struct axis_coeffs {
	int *lo, *cnt;
	float *w;
	int k;
};

static double triangle(double x)
{
	x = fabs(x);
	return x < 1.0 ? 1.0 - x : 0.0;
}

static double axis_scale(double in0, double in1, int out_size)
{
	return (in1 - in0) / out_size;
}

/* Taps per output: the bilinear filter's support is 1, widened by the shrink factor. */
static int axis_taps(double scale)
{
	return (int)ceil(scale > 1.0 ? scale : 1.0) * 2 + 1;
}

/* Fill a (lo, cnt: 2 * out_size ints; w: out_size * a->k floats, a->k set). */
static void axis_coeffs_fill(double in0, double in1, int in_size, int out_size,
			     struct axis_coeffs *a)
{
	double scale = axis_scale(in0, in1, out_size);
	double filterscale = scale > 1.0 ? scale : 1.0;
	double support = filterscale;
	for (int i = 0; i < out_size; i++) {
		double center = in0 + (i + 0.5) * scale, sum = 0;
		int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
		if (lo < 0)
			lo = 0;
		if (hi > in_size)
			hi = in_size;
		if (hi <= lo) /* a box outside the window: take its nearest pixel */
			hi = (lo = lo < in_size ? lo : in_size - 1) + 1;
		float *w = a->w + (size_t)i * a->k;
		for (int x = lo; x < hi; x++)
			sum += triangle((x - center + 0.5) / filterscale);
		for (int x = lo; x < hi; x++)
			w[x - lo] = (float)(sum > 0 ? triangle((x - center + 0.5) / filterscale) / sum
					     : 1.0 / (hi - lo));
		a->lo[i] = lo;
		a->cnt[i] = hi - lo;
	}
}

/* Four floats, loaded and stored unaligned. The passes below work on them lane by
 * lane with the same multiplies and adds, in the same order, as a scalar loop would
 * (no FMA: C11 mode keeps -ffp-contract off), so the pixels are the scalar ones bit
 * for bit (test data_resample_matches_scalar_reference); only the instruction count
 * drops. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p)
{
	v4f v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void store4(float *p, v4f v)
{
	memcpy(p, &v, sizeof(v));
}

/* Bytes to floats, 16 at a time; n a multiple of 16. (GCC lowers a generic vector
 * conversion to one scalar conversion per byte, which cost a third of the resampler.) */
static void bytes_to_floats(const uint8_t *src, size_t n, float *dst)
{
#if defined(__SSE2__)
	const __m128i z = _mm_setzero_si128();
	for (size_t i = 0; i < n; i += 16) {
		__m128i b = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i lo = _mm_unpacklo_epi8(b, z), hi = _mm_unpackhi_epi8(b, z);
		_mm_storeu_ps(dst + i, _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)));
		_mm_storeu_ps(dst + i + 4, _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)));
		_mm_storeu_ps(dst + i + 8, _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)));
		_mm_storeu_ps(dst + i + 12, _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)));
	}
#else
	for (size_t i = 0; i < n; i++)
		dst[i] = src[i];
#endif
}

int image_resample_chw(struct image_ctx *c, const struct image *img,
		       const struct resample_box *b, int out_w, int out_h, int flip,
		       const float mean[3], const float std[3], float *out)
{
	struct axis_coeffs ax, ay;
	int win_w = b->wx1 - b->wx0, win_h = b->wy1 - b->wy0;
	ax.k = axis_taps(axis_scale(b->x0 - b->wx0, b->x1 - b->wx0, out_w));
	ay.k = axis_taps(axis_scale(b->y0 - b->wy0, b->y1 - b->wy0, out_h));
	/* Coefficients live in the per-thread context: no allocation per image. */
	size_t coef_bytes = sizeof(int) * 2 * ((size_t)out_w + out_h) +
			    sizeof(float) * ((size_t)out_w * ax.k + (size_t)out_h * ay.k);
	GP_TRY(buffer_reserve((void **)&c->coef, &c->coef_cap_bytes, coef_bytes));
	ax.w = (float *)c->coef;
	ay.w = ax.w + (size_t)out_w * ax.k;
	ax.lo = (int *)(ay.w + (size_t)out_h * ay.k);
	ax.cnt = ax.lo + out_w;
	ay.lo = ax.cnt + out_w;
	ay.cnt = ay.lo + out_h;
	axis_coeffs_fill(b->x0 - b->wx0, b->x1 - b->wx0, win_w, out_w, &ax);
	axis_coeffs_fill(b->y0 - b->wy0, b->y1 - b->wy0, win_h, out_h, &ay);
	/* Rows of the window that some output row reads, filtered horizontally first. */
	int row0 = ay.lo[0], row1 = ay.lo[out_h - 1] + ay.cnt[out_h - 1];
	for (int y = 0; y < out_h; y++) {
		row0 = ay.lo[y] < row0 ? ay.lo[y] : row0;
		row1 = ay.lo[y] + ay.cnt[y] > row1 ? ay.lo[y] + ay.cnt[y] : row1;
	}
	/* Columns of the window that some output column reads. */
	int col0 = ax.lo[0], col1 = ax.lo[0] + ax.cnt[0];
	for (int x = 0; x < out_w; x++) {
		col0 = ax.lo[x] < col0 ? ax.lo[x] : col0;
		col1 = ax.lo[x] + ax.cnt[x] > col1 ? ax.lo[x] + ax.cnt[x] : col1;
	}
	/* img may be a region of the picture (image_decode_region), with the window
	 * reaching past it: only what is read must be inside. */
	if (b->wx0 + col0 < 0 || b->wx0 + col1 > img->w || b->wy0 + row0 < 0 ||
	    b->wy0 + row1 > img->h)
		return gp_error(GP_EINVAL, "resampling reads outside the %dx%d decoded image",
				img->w, img->h);
	/* tmp holds the filtered rows (RGB interleaved, padded to whole vectors), then
	 * one source row as floats (padded to 16 plus the 4th lane of the last pixel's
	 * load), then one output row's accumulators. */
	size_t row_floats = (size_t)out_w * 3, stride = (row_floats + 3) / 4 * 4 + 4;
	size_t src_bytes = (size_t)(col1 - col0) * 3, src_floats = (src_bytes + 15) / 16 * 16 + 16;
	GP_TRY(buffer_reserve((void **)&c->tmp, &c->tmp_cap_bytes,
			      sizeof(float) * (stride * (row1 - row0 + 1) + src_floats)));
	float *fsrc = c->tmp + stride * (row1 - row0), *acc = fsrc + src_floats;
	/* The byte loads of the last row may run past the decoded image: copy the row's
	 * tail into a padded buffer instead of reading beyond it. */
	uint8_t tail[32];
	size_t body = src_bytes / 16 * 16;
	for (int r = row0; r < row1; r++) {
		const uint8_t *src = img->pix + ((ptrdiff_t)(b->wy0 + r) * img->w + b->wx0 + col0) * 3;
		float *t = c->tmp + (size_t)(r - row0) * stride;
		bytes_to_floats(src, body, fsrc);
		memset(tail, 0, sizeof(tail));
		memcpy(tail, src + body, src_bytes - body);
		bytes_to_floats(tail, 16, fsrc + body);
		for (int x = 0; x < out_w; x++) {
			const float *w = ax.w + (size_t)x * ax.k;
			const float *s = fsrc + (size_t)(ax.lo[x] - col0) * 3;
			v4f a = { 0, 0, 0, 0 };
			for (int k = 0; k < ax.cnt[x]; k++)
				a += w[k] * load4(s + 3 * k);
			store4(t + 3 * x, a);
		}
	}
	float scale[3], shift[3];
	for (int ch = 0; ch < 3; ch++) {
		scale[ch] = 1.0f / (255.0f * std[ch]);
		shift[ch] = -mean[ch] / std[ch];
	}
	size_t plane = (size_t)out_w * out_h;
	for (int y = 0; y < out_h; y++) {
		const float *w = ay.w + (size_t)y * ay.k;
		memset(acc, 0, sizeof(float) * stride);
		for (int k = 0; k < ay.cnt[y]; k++) {
			const float *t = c->tmp + (size_t)(ay.lo[y] + k - row0) * stride;
			float wk = w[k];
			for (size_t i = 0; i < row_floats; i += 4)
				store4(acc + i, load4(acc + i) + wk * load4(t + i));
		}
		float *o0 = out + (size_t)y * out_w, *o1 = o0 + plane, *o2 = o1 + plane;
		int x = 0;
#if defined(__SSE2__)
		/* Four pixels at a time: split R, G, B with shuffles, normalize each
		 * (the same multiply and add per value), store four in a row. */
		for (; x + 4 <= out_w; x += 4) {
			__m128 a = _mm_loadu_ps(acc + 3 * x), bb = _mm_loadu_ps(acc + 3 * x + 4);
			__m128 cc = _mm_loadu_ps(acc + 3 * x + 8);
			__m128 r = _mm_shuffle_ps(_mm_shuffle_ps(a, a, _MM_SHUFFLE(3, 3, 0, 0)),
						  _mm_shuffle_ps(bb, cc, _MM_SHUFFLE(1, 1, 2, 2)),
						  _MM_SHUFFLE(2, 0, 2, 0));
			__m128 g = _mm_shuffle_ps(_mm_shuffle_ps(a, bb, _MM_SHUFFLE(0, 0, 1, 1)),
						  _mm_shuffle_ps(bb, cc, _MM_SHUFFLE(2, 2, 3, 3)),
						  _MM_SHUFFLE(2, 0, 2, 0));
			__m128 bl = _mm_shuffle_ps(_mm_shuffle_ps(a, bb, _MM_SHUFFLE(1, 1, 2, 2)),
						   _mm_shuffle_ps(cc, cc, _MM_SHUFFLE(3, 3, 0, 0)),
						   _MM_SHUFFLE(2, 0, 2, 0));
			r = _mm_add_ps(_mm_mul_ps(r, _mm_set1_ps(scale[0])), _mm_set1_ps(shift[0]));
			g = _mm_add_ps(_mm_mul_ps(g, _mm_set1_ps(scale[1])), _mm_set1_ps(shift[1]));
			bl = _mm_add_ps(_mm_mul_ps(bl, _mm_set1_ps(scale[2])), _mm_set1_ps(shift[2]));
			if (flip) {
				int ox = out_w - 4 - x;
				_mm_storeu_ps(o0 + ox, _mm_shuffle_ps(r, r, _MM_SHUFFLE(0, 1, 2, 3)));
				_mm_storeu_ps(o1 + ox, _mm_shuffle_ps(g, g, _MM_SHUFFLE(0, 1, 2, 3)));
				_mm_storeu_ps(o2 + ox, _mm_shuffle_ps(bl, bl, _MM_SHUFFLE(0, 1, 2, 3)));
			} else {
				_mm_storeu_ps(o0 + x, r);
				_mm_storeu_ps(o1 + x, g);
				_mm_storeu_ps(o2 + x, bl);
			}
		}
#endif
		for (; x < out_w; x++) {
			int ox = flip ? out_w - 1 - x : x;
			o0[ox] = acc[3 * x] * scale[0] + shift[0];
			o1[ox] = acc[3 * x + 1] * scale[1] + shift[1];
			o2[ox] = acc[3 * x + 2] * scale[2] + shift[2];
		}
	}
	return 0;
}

int image_encode_jpeg(const uint8_t *rgb, int w, int h, int quality, uint8_t **jpeg,
		      size_t *len_bytes)
{
	int rc = 0;
	tjhandle tj = tjInitCompress();
	if (!tj)
		return gp_error(GP_ENOMEM, "cannot create a TurboJPEG compressor: %s",
				tjGetErrorStr2(NULL));
	unsigned char *buf = NULL;
	unsigned long len = 0;
	if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &buf, &len, TJSAMP_420, quality, 0) < 0) {
		rc = gp_error(GP_EFORMAT, "JPEG compression failed: %s", tjGetErrorStr2(tj));
		tjFree(buf);
		goto out_tj;
	}
	*jpeg = buf;
	*len_bytes = len;
out_tj:
	tjDestroy(tj);
	return rc;
}

void image_jpeg_free(uint8_t *jpeg)
{
	tjFree(jpeg);
}
