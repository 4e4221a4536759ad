/* Charts on cairo: one drawing routine for every surface (PNG, SVG, PDF), with
 * sizes in pixels (points for PDF). */
#include "report/chart.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>

#include "core/error.h"
#include "report/result.h"

#define FONT "sans-serif"
#define FIG_TITLE_PX 40.0
#define MARGIN_LEFT_PX 74.0
#define MARGIN_RIGHT_PX 24.0
#define MARGIN_TOP_PX 34.0
#define MARGIN_BOTTOM_PX 54.0
#define MAX_TICKS 32
/* Values beyond this magnitude (and NaN, infinities) are left out of a chart, like
 * gaps: no measurement comes near it, and axis arithmetic on such values (ranges,
 * headroom, powers of two) overflows double. */
#define CHART_VALUE_MAX 1e100

struct chart_line {
	double *x, *y;
	int n;
	struct chart_line_style style;
	char label[CHART_LABEL_MAX];
};

struct chart_hline {
	double y;
	struct chart_color color;
	int dashed;
	char label[CHART_LABEL_MAX];
};

struct chart_point {
	double x, y;
	struct chart_color color;
	char label[CHART_LABEL_MAX];
};

struct chart_bars {
	int n_bars, n_stacks;
	char bar_labels[CHART_MAX_BARS][CHART_LABEL_MAX];
	char stack_labels[CHART_MAX_STACKS][CHART_LABEL_MAX];
	struct chart_color colors[CHART_MAX_STACKS];
	double values[CHART_MAX_BARS * CHART_MAX_STACKS];
};

struct chart_panel {
	char title[CHART_LABEL_MAX], x_label[CHART_LABEL_MAX], y_label[CHART_LABEL_MAX];
	enum chart_scale x_scale;
	int x_fixed, y_fixed;
	double x_lo, x_hi, y_lo, y_hi;
	struct chart_line lines[CHART_MAX_LINES];
	int n_lines;
	struct chart_hline hlines[CHART_MAX_HLINES];
	int n_hlines;
	struct chart_point points[CHART_MAX_POINTS];
	int n_points;
	struct chart_bars *bars;
};

struct chart_figure {
	int rows, cols;
	double width_px, height_px;
	char title[CHART_LABEL_MAX];
	struct chart_panel panels[];
};

/* Where a panel's plot area lies and how data maps onto it. */
struct plot_frame {
	double left, top, width, height;
	double x_lo, x_hi, y_lo, y_hi;
	enum chart_scale x_scale;
};

/* fontconfig, under cairo's toy font API, keeps its configuration for the life of
 * the process by design; LeakSanitizer (make test-san) calls this hook to know. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libfontconfig.so\n";
}

struct chart_color chart_palette(int i)
{
	static const struct chart_color colors[] = {
		CHART_BLUE, CHART_ORANGE, CHART_GREEN, CHART_RED,   CHART_PURPLE,
		CHART_BROWN, CHART_PINK, CHART_GREY,  CHART_OLIVE, CHART_CYAN,
	};
	int n = sizeof(colors) / sizeof(colors[0]);
	return colors[((i % n) + n) % n];
}

static void label_copy(char *dst, const char *src)
{
	snprintf(dst, CHART_LABEL_MAX, "%s", src ? src : "");
}

struct chart_figure *chart_figure_new(int rows, int cols, int width_px, int height_px,
				      const char *title)
{
	if (rows < 1 || cols < 1 || rows * cols > CHART_MAX_PANELS)
		return NULL;
	struct chart_figure *fig =
		calloc(1, sizeof(*fig) + (size_t)rows * cols * sizeof(struct chart_panel));
	if (!fig)
		return NULL;
	fig->rows = rows;
	fig->cols = cols;
	label_copy(fig->title, title);
	fig->width_px = width_px > 0 ? width_px : 640.0 * cols;
	fig->height_px = height_px > 0 ? height_px
				       : 420.0 * rows + (fig->title[0] ? FIG_TITLE_PX : 0);
	return fig;
}

void chart_figure_free(struct chart_figure *fig)
{
	if (!fig)
		return;
	for (int i = 0; i < fig->rows * fig->cols; i++) {
		struct chart_panel *p = &fig->panels[i];
		for (int k = 0; k < p->n_lines; k++) {
			free(p->lines[k].x);
			free(p->lines[k].y);
		}
		free(p->bars);
	}
	free(fig);
}

struct chart_panel *chart_figure_panel(struct chart_figure *fig, int i)
{
	return i >= 0 && i < fig->rows * fig->cols ? &fig->panels[i] : NULL;
}

void chart_panel_set_title(struct chart_panel *p, const char *title)
{
	label_copy(p->title, title);
}

void chart_panel_set_labels(struct chart_panel *p, const char *x_label, const char *y_label)
{
	label_copy(p->x_label, x_label);
	label_copy(p->y_label, y_label);
}

void chart_panel_set_x_scale(struct chart_panel *p, enum chart_scale scale)
{
	p->x_scale = scale;
}

void chart_panel_set_x_range(struct chart_panel *p, double lo, double hi)
{
	p->x_fixed = 1;
	p->x_lo = lo;
	p->x_hi = hi;
}

void chart_panel_set_y_range(struct chart_panel *p, double lo, double hi)
{
	p->y_fixed = 1;
	p->y_lo = lo;
	p->y_hi = hi;
}

int chart_panel_add_line(struct chart_panel *p, const double *x, const double *y, int n,
			 struct chart_line_style style, const char *label)
{
	if (p->n_lines == CHART_MAX_LINES)
		return gp_error(GP_EINVAL, "a chart panel holds at most %d lines", CHART_MAX_LINES);
	if (n < 0)
		return gp_error(GP_EINVAL, "line '%s' has %d points", label ? label : "", n);
	struct chart_line *l = &p->lines[p->n_lines];
	l->x = malloc((n ? n : 1) * sizeof(double));
	l->y = malloc((n ? n : 1) * sizeof(double));
	if (!l->x || !l->y) {
		free(l->x);
		free(l->y);
		return gp_error(GP_ENOMEM, "no memory for a chart line of %d points", n);
	}
	if (n) {
		memcpy(l->x, x, n * sizeof(double));
		memcpy(l->y, y, n * sizeof(double));
	}
	l->n = n;
	l->style = style;
	if (l->style.width_px <= 0)
		l->style.width_px = 2;
	label_copy(l->label, label);
	p->n_lines++;
	return 0;
}

int chart_panel_add_hline(struct chart_panel *p, double y, struct chart_color color,
			  int dashed, const char *label)
{
	if (p->n_hlines == CHART_MAX_HLINES)
		return gp_error(GP_EINVAL, "a chart panel holds at most %d reference lines",
				CHART_MAX_HLINES);
	struct chart_hline *h = &p->hlines[p->n_hlines++];
	h->y = y;
	h->color = color;
	h->dashed = dashed;
	label_copy(h->label, label);
	return 0;
}

int chart_panel_add_point(struct chart_panel *p, double x, double y, struct chart_color color,
			  const char *label)
{
	if (p->n_points == CHART_MAX_POINTS)
		return gp_error(GP_EINVAL, "a chart panel holds at most %d marked points",
				CHART_MAX_POINTS);
	struct chart_point *m = &p->points[p->n_points++];
	m->x = x;
	m->y = y;
	m->color = color;
	label_copy(m->label, label);
	return 0;
}

int chart_panel_set_bars(struct chart_panel *p, int n_bars, const char *const *bar_labels,
			 int n_stacks, const char *const *stack_labels,
			 const struct chart_color *colors, const double *values)
{
	if (n_bars < 1 || n_bars > CHART_MAX_BARS || n_stacks < 1 || n_stacks > CHART_MAX_STACKS)
		return gp_error(GP_EINVAL, "stacked bars: %d bars of %d stages (at most %d of %d)",
				n_bars, n_stacks, CHART_MAX_BARS, CHART_MAX_STACKS);
	if (!p->bars)
		p->bars = malloc(sizeof(*p->bars));
	if (!p->bars)
		return gp_error(GP_ENOMEM, "no memory for stacked bars");
	struct chart_bars *b = p->bars;
	b->n_bars = n_bars;
	b->n_stacks = n_stacks;
	for (int i = 0; i < n_bars; i++)
		label_copy(b->bar_labels[i], bar_labels[i]);
	for (int k = 0; k < n_stacks; k++) {
		label_copy(b->stack_labels[k], stack_labels[k]);
		b->colors[k] = colors ? colors[k] : chart_palette(k);
	}
	memcpy(b->values, values, (size_t)n_bars * n_stacks * sizeof(double));
	return 0;
}

static int value_drawable(double v)
{
	return fabs(v) <= CHART_VALUE_MAX;
}

int chart_ticks_nice(double lo, double hi, int target, double *ticks, int cap, double *step)
{
	/* Whatever the bounds, the step comes out finite and positive, since callers
	 * divide by it; bounds that are not finite get no ticks. */
	*step = 1;
	if (!isfinite(lo) || !isfinite(hi))
		return 0;
	double range = hi - lo;
	if (!(range > 0))
		range = fabs(lo) > 0 ? fabs(lo) : 1;
	/* A range that overflows (bounds near +-DBL_MAX) or underflows (subnormal) would
	 * make the step infinite or zero: keep it within normal doubles. */
	double raw = fmin(fmax(range / (target > 0 ? target : 5), DBL_MIN), DBL_MAX / 20);
	double mag = pow(10, floor(log10(raw)));
	double norm = raw / mag;
	double nice = norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10;
	*step = nice * mag;
	int n = 0;
	/* Tick indices must fit a long long; past 2^53 steps they are not distinct. */
	if (!(fabs(lo / *step) < 0x1p53) || !(fabs(hi / *step) < 0x1p53))
		return 0;
	/* Count from an integer multiple so that 0.1 + 0.2 drift never shows. */
	for (long long k = (long long)ceil(lo / *step - 1e-9); n < cap; k++) {
		double v = k * *step;
		if (v > hi + *step * 1e-9)
			break;
		ticks[n++] = v == 0 ? 0 : v; /* no "-0" */
	}
	return n;
}

/* Data bounds of a panel along x (which = 0) or y (which = 1); 0 when there is none. */
static int panel_bounds(const struct chart_panel *p, int which, double *lo, double *hi)
{
	int any = 0;
	*lo = INFINITY;
	*hi = -INFINITY;
#define TAKE(v)                                                                         \
	do {                                                                            \
		double v_ = (v);                                                        \
		if (value_drawable(v_) && (which == 1 || p->x_scale != CHART_LOG2 || v_ > 0)) { \
			*lo = fmin(*lo, v_);                                            \
			*hi = fmax(*hi, v_);                                            \
			any = 1;                                                        \
		}                                                                       \
	} while (0)
	for (int i = 0; i < p->n_lines; i++)
		for (int k = 0; k < p->lines[i].n; k++)
			TAKE(which ? p->lines[i].y[k] : p->lines[i].x[k]);
	for (int i = 0; i < p->n_points; i++)
		TAKE(which ? p->points[i].y : p->points[i].x);
	if (which == 1) {
		for (int i = 0; i < p->n_hlines; i++)
			TAKE(p->hlines[i].y);
		if (p->bars) {
			for (int i = 0; i < p->bars->n_bars; i++) {
				double sum = 0;
				for (int k = 0; k < p->bars->n_stacks; k++)
					sum += p->bars->values[i * p->bars->n_stacks + k];
				TAKE(sum);
			}
		}
	}
#undef TAKE
	return any;
}

/* A fixed axis range the frame can use: drawable bounds in order (positive on a log
 * axis). Results from elsewhere may hold anything; a bad range falls back to the data. */
static int range_drawable(double lo, double hi, enum chart_scale scale)
{
	return value_drawable(lo) && value_drawable(hi) && hi > lo &&
	       (scale != CHART_LOG2 || lo > 0);
}

static void panel_frame(const struct chart_panel *p, double cell_x, double cell_y,
			double cell_w, double cell_h, struct plot_frame *fr)
{
	double lo, hi, step, ticks[MAX_TICKS];

	fr->left = cell_x + MARGIN_LEFT_PX;
	fr->top = cell_y + MARGIN_TOP_PX;
	fr->width = fmax(10, cell_w - MARGIN_LEFT_PX - MARGIN_RIGHT_PX);
	fr->height = fmax(10, cell_h - MARGIN_TOP_PX - MARGIN_BOTTOM_PX);
	fr->x_scale = p->bars ? CHART_LINEAR : p->x_scale;

	if (p->x_fixed && range_drawable(p->x_lo, p->x_hi, fr->x_scale)) {
		fr->x_lo = p->x_lo;
		fr->x_hi = p->x_hi;
	} else if (p->bars) {
		fr->x_lo = -0.6;
		fr->x_hi = p->bars->n_bars - 0.4;
	} else if (!panel_bounds(p, 0, &lo, &hi)) {
		fr->x_lo = fr->x_scale == CHART_LOG2 ? 1 : 0;
		fr->x_hi = fr->x_scale == CHART_LOG2 ? 2 : 1;
	} else if (fr->x_scale == CHART_LOG2) {
		fr->x_lo = exp2(floor(log2(lo)));
		fr->x_hi = exp2(ceil(log2(hi)));
		if (fr->x_hi <= fr->x_lo)
			fr->x_hi = fr->x_lo * 2;
	} else {
		chart_ticks_nice(lo, hi, 6, ticks, MAX_TICKS, &step);
		fr->x_lo = floor(lo / step + 1e-9) * step;
		fr->x_hi = ceil(hi / step - 1e-9) * step;
		if (fr->x_hi <= fr->x_lo)
			fr->x_hi = fr->x_lo + step;
	}

	if (p->y_fixed && range_drawable(p->y_lo, p->y_hi, CHART_LINEAR)) {
		fr->y_lo = p->y_lo;
		fr->y_hi = p->y_hi;
	} else if (!panel_bounds(p, 1, &lo, &hi)) {
		fr->y_lo = 0;
		fr->y_hi = 1;
	} else {
		/* From zero when all values are positive: bar heights and memory read
		 * honestly only against a zero baseline. Headroom keeps the top line off
		 * the frame. */
		lo = fmin(lo, 0);
		hi = hi + (hi - lo) * 0.06;
		chart_ticks_nice(lo, hi, 6, ticks, MAX_TICKS, &step);
		fr->y_lo = floor(lo / step + 1e-9) * step;
		fr->y_hi = ceil(hi / step - 1e-9) * step;
		if (fr->y_hi <= fr->y_lo)
			fr->y_hi = fr->y_lo + step;
	}
}

static double frame_px_x(const struct plot_frame *fr, double x)
{
	if (fr->x_scale == CHART_LOG2)
		return fr->left + (log2(x) - log2(fr->x_lo)) / (log2(fr->x_hi) - log2(fr->x_lo)) *
					  fr->width;
	return fr->left + (x - fr->x_lo) / (fr->x_hi - fr->x_lo) * fr->width;
}

static double frame_px_y(const struct plot_frame *fr, double y)
{
	return fr->top + fr->height - (y - fr->y_lo) / (fr->y_hi - fr->y_lo) * fr->height;
}

static int frame_has_x(const struct plot_frame *fr, double x)
{
	return value_drawable(x) && (fr->x_scale != CHART_LOG2 || x > 0);
}

static void set_color(cairo_t *cr, struct chart_color c)
{
	cairo_set_source_rgb(cr, c.r, c.g, c.b);
}

static void set_font(cairo_t *cr, double size, int bold)
{
	cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
			       bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
	cairo_set_font_size(cr, size);
}

/* Text anchored at (x, y): ax, ay = 0 left/top, 0.5 centre, 1 right/bottom. */
static void text_at(cairo_t *cr, double x, double y, const char *s, double ax, double ay)
{
	cairo_text_extents_t te;
	cairo_font_extents_t fe;
	cairo_text_extents(cr, s, &te);
	cairo_font_extents(cr, &fe);
	cairo_move_to(cr, x - ax * te.x_advance, y + fe.ascent - ay * (fe.ascent + fe.descent));
	cairo_show_text(cr, s);
}

static double text_width(cairo_t *cr, const char *s)
{
	cairo_text_extents_t te;
	cairo_text_extents(cr, s, &te);
	return te.x_advance;
}

static void format_tick(char *buf, size_t cap, double v, double step, enum chart_scale scale)
{
	if (scale == CHART_LOG2) {
		snprintf(buf, cap, v >= 1 ? "%.0f" : "%g", v);
		return;
	}
	int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
	snprintf(buf, cap, "%.*f", decimals > 6 ? 6 : decimals, v);
}

static void set_dash(cairo_t *cr, int dashed)
{
	static const double dash[] = { 7, 4 };
	cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
}

static void draw_axes(cairo_t *cr, const struct chart_panel *p, const struct plot_frame *fr)
{
	double ticks[MAX_TICKS], step;
	char buf[48];
	int n;
	double bottom = fr->top + fr->height;

	/* y ticks, grid and labels */
	set_font(cr, 11, 0);
	n = chart_ticks_nice(fr->y_lo, fr->y_hi, 6, ticks, MAX_TICKS, &step);
	for (int i = 0; i < n; i++) {
		double y = frame_px_y(fr, ticks[i]);
		cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
		cairo_set_line_width(cr, 1);
		cairo_move_to(cr, fr->left, round(y) + 0.5);
		cairo_line_to(cr, fr->left + fr->width, round(y) + 0.5);
		cairo_stroke(cr);
		cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
		format_tick(buf, sizeof(buf), ticks[i], step, CHART_LINEAR);
		text_at(cr, fr->left - 6, y, buf, 1, 0.5);
	}

	/* x ticks: categories, powers of two, or nice numbers */
	if (p->bars) {
		int every = (int)ceil(p->bars->n_bars / (fr->width / 70));
		for (int i = 0; i < p->bars->n_bars; i += every > 1 ? every : 1) {
			cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
			text_at(cr, frame_px_x(fr, i), bottom + 6, p->bars->bar_labels[i], 0.5, 0);
		}
	} else {
		if (fr->x_scale == CHART_LOG2) {
			int e_lo = (int)floor(log2(fr->x_lo)), e_hi = (int)ceil(log2(fr->x_hi));
			int every = (e_hi - e_lo) / 12 + 1;
			n = 0;
			for (int e = e_lo; e <= e_hi && n < MAX_TICKS; e += every)
				ticks[n++] = exp2(e);
			step = 1;
		} else {
			n = chart_ticks_nice(fr->x_lo, fr->x_hi, 7, ticks, MAX_TICKS, &step);
		}
		for (int i = 0; i < n; i++) {
			double x = frame_px_x(fr, ticks[i]);
			cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
			cairo_move_to(cr, round(x) + 0.5, fr->top);
			cairo_line_to(cr, round(x) + 0.5, bottom);
			cairo_stroke(cr);
			cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
			format_tick(buf, sizeof(buf), ticks[i], step, fr->x_scale);
			text_at(cr, x, bottom + 6, buf, 0.5, 0);
		}
	}

	/* frame */
	cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
	cairo_set_line_width(cr, 1);
	cairo_rectangle(cr, round(fr->left) + 0.5, round(fr->top) + 0.5, round(fr->width),
			round(fr->height));
	cairo_stroke(cr);

	/* title and axis labels */
	cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
	set_font(cr, 14, 1);
	text_at(cr, fr->left + fr->width / 2, fr->top - 8, p->title, 0.5, 1);
	set_font(cr, 12, 0);
	text_at(cr, fr->left + fr->width / 2, bottom + 26, p->x_label, 0.5, 0);
	cairo_save(cr);
	cairo_translate(cr, fr->left - MARGIN_LEFT_PX + 6, fr->top + fr->height / 2);
	cairo_rotate(cr, -M_PI / 2);
	text_at(cr, 0, 0, p->y_label, 0.5, 0);
	cairo_restore(cr);
}

static void draw_bars(cairo_t *cr, const struct chart_bars *b, const struct plot_frame *fr)
{
	double half = fmin(0.35 * fr->width / b->n_bars, 40);
	for (int i = 0; i < b->n_bars; i++) {
		double base = 0, x = frame_px_x(fr, i);
		for (int k = 0; k < b->n_stacks; k++) {
			double v = b->values[i * b->n_stacks + k];
			if (!(v > 0))
				continue;
			double y0 = frame_px_y(fr, base), y1 = frame_px_y(fr, base + v);
			set_color(cr, b->colors[k]);
			cairo_rectangle(cr, x - half, y1, 2 * half, y0 - y1);
			cairo_fill(cr);
			base += v;
		}
	}
}

/* The area between a line and y = 0 (the frame's bottom when 0 is below it), run by
 * run of drawable points. */
static void fill_under(cairo_t *cr, const struct chart_line *l, const struct plot_frame *fr)
{
	double base = frame_px_y(fr, 0);
	if (base > fr->top + fr->height)
		base = fr->top + fr->height;
	for (int k = 0; k < l->n;) {
		while (k < l->n && (!frame_has_x(fr, l->x[k]) || !value_drawable(l->y[k])))
			k++;
		if (k >= l->n)
			break;
		double x0 = frame_px_x(fr, l->x[k]), x1 = x0;
		cairo_move_to(cr, x0, base);
		for (; k < l->n && frame_has_x(fr, l->x[k]) && value_drawable(l->y[k]); k++) {
			x1 = frame_px_x(fr, l->x[k]);
			cairo_line_to(cr, x1, frame_px_y(fr, l->y[k]));
		}
		cairo_line_to(cr, x1, base);
		cairo_close_path(cr);
		cairo_fill(cr);
	}
}

static void draw_series(cairo_t *cr, const struct chart_panel *p, const struct plot_frame *fr)
{
	cairo_save(cr);
	cairo_rectangle(cr, fr->left, fr->top, fr->width, fr->height);
	cairo_clip(cr);
	if (p->bars)
		draw_bars(cr, p->bars, fr);
	cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
	for (int i = 0; i < p->n_hlines; i++) {
		const struct chart_hline *h = &p->hlines[i];
		if (!value_drawable(h->y))
			continue;
		double y = frame_px_y(fr, h->y);
		set_color(cr, h->color);
		cairo_set_line_width(cr, 1.8);
		set_dash(cr, h->dashed);
		cairo_move_to(cr, fr->left, y);
		cairo_line_to(cr, fr->left + fr->width, y);
		cairo_stroke(cr);
	}
	for (int i = 0; i < p->n_lines; i++) {
		const struct chart_line *l = &p->lines[i];
		int pen_down = 0;
		set_color(cr, l->style.color);
		if (l->style.fill)
			fill_under(cr, l, fr);
		cairo_set_line_width(cr, l->style.width_px);
		set_dash(cr, l->style.dashed);
		/* A gap (NaN, a value past CHART_VALUE_MAX, or x <= 0 on a log axis)
		 * lifts the pen. */
		for (int k = 0; k < l->n; k++) {
			if (!frame_has_x(fr, l->x[k]) || !value_drawable(l->y[k])) {
				pen_down = 0;
				continue;
			}
			double x = frame_px_x(fr, l->x[k]), y = frame_px_y(fr, l->y[k]);
			if (pen_down)
				cairo_line_to(cr, x, y);
			else
				cairo_move_to(cr, x, y);
			pen_down = 1;
		}
		cairo_stroke(cr);
		set_dash(cr, 0);
		for (int k = 0; l->style.markers && k < l->n; k++) {
			if (!frame_has_x(fr, l->x[k]) || !value_drawable(l->y[k]))
				continue;
			cairo_arc(cr, frame_px_x(fr, l->x[k]), frame_px_y(fr, l->y[k]),
				  l->style.width_px + 1.5, 0, 2 * M_PI);
			cairo_fill(cr);
		}
	}
	set_dash(cr, 0);
	cairo_restore(cr);

	/* Marked points sit above everything, their labels may leave the plot area. */
	set_font(cr, 11, 1);
	double boxes[CHART_MAX_POINTS][4]; /* labels written: x, y, width, height */
	int n_boxes = 0;
	for (int i = 0; i < p->n_points; i++) {
		const struct chart_point *m = &p->points[i];
		if (!frame_has_x(fr, m->x) || !value_drawable(m->y))
			continue;
		double x = frame_px_x(fr, m->x), y = frame_px_y(fr, m->y);
		cairo_arc(cr, x, y, 6.5, 0, 2 * M_PI);
		set_color(cr, m->color);
		cairo_fill_preserve(cr);
		cairo_set_source_rgb(cr, 1, 1, 1);
		cairo_set_line_width(cr, 1.5);
		cairo_stroke(cr);
		if (!m->label[0])
			continue;
		set_color(cr, m->color);
		/* Right of the dot and above, else left, else below: the first place that
		 * stays in the plot and covers neither another dot nor a label written
		 * before (dots of neighbouring batches sit close on a log axis). */
		double w = text_width(cr, m->label), h = 14;
		int place = 0;
		for (; place < 4; place++) {
			double bx = place & 1 ? x - 11 - w : x + 11;
			double by = place & 2 ? y + 4 : y - 4 - h;
			if (bx < fr->left || bx + w > fr->left + fr->width)
				continue;
			int hit = 0;
			for (int j = 0; j < p->n_points && !hit; j++) {
				const struct chart_point *o = &p->points[j];
				if (j == i || !frame_has_x(fr, o->x) || !isfinite(o->y))
					continue;
				double ox = frame_px_x(fr, o->x), oy = frame_px_y(fr, o->y);
				hit = ox + 6.5 > bx && ox - 6.5 < bx + w && oy + 6.5 > by &&
				      oy - 6.5 < by + h;
			}
			for (int k = 0; k < n_boxes && !hit; k++)
				hit = boxes[k][0] < bx + w && bx < boxes[k][0] + boxes[k][2] &&
				      boxes[k][1] < by + h && by < boxes[k][1] + boxes[k][3];
			if (!hit)
				break;
		}
		if (place == 4) /* nowhere free: inside the plot on the side with room */
			place = x + 12 + w > fr->left + fr->width;
		double bx = place & 1 ? x - 11 - w : x + 11, by = place & 2 ? y + 4 : y - 4 - h;
		boxes[n_boxes][0] = bx;
		boxes[n_boxes][1] = by;
		boxes[n_boxes][2] = w;
		boxes[n_boxes++][3] = h;
		text_at(cr, bx, by + h, m->label, 0, 1);
	}
}

enum legend_kind { LEGEND_LINE, LEGEND_BOX, LEGEND_DOT };

struct legend_entry {
	enum legend_kind kind;
	struct chart_color color;
	int dashed, markers;
	const char *label;
};

/* How many data points a legend box at (x, y, w, h) would cover. */
static int legend_overlap(const struct chart_panel *p, const struct plot_frame *fr, double x,
			  double y, double w, double h)
{
	int n = 0;
#define COVERS(px, py) ((px) >= x && (px) <= x + w && (py) >= y && (py) <= y + h)
	for (int i = 0; i < p->n_lines; i++)
		for (int k = 0; k < p->lines[i].n; k++) {
			if (!frame_has_x(fr, p->lines[i].x[k]) || !value_drawable(p->lines[i].y[k]))
				continue;
			double px = frame_px_x(fr, p->lines[i].x[k]);
			double py = frame_px_y(fr, p->lines[i].y[k]);
			/* a filled area covers the box wherever it reaches up into it */
			if (p->lines[i].style.fill)
				n += px >= x && px <= x + w && py <= y + h;
			else
				n += COVERS(px, py);
		}
	for (int i = 0; i < p->n_points; i++)
		if (frame_has_x(fr, p->points[i].x) && value_drawable(p->points[i].y))
			n += 4 * COVERS(frame_px_x(fr, p->points[i].x),
					frame_px_y(fr, p->points[i].y));
	for (int i = 0; i < p->n_hlines; i++) {
		double hy = frame_px_y(fr, p->hlines[i].y);
		n += 2 * (hy >= y && hy <= y + h);
	}
	if (p->bars) {
		for (int i = 0; i < p->bars->n_bars; i++) {
			double sum = 0;
			for (int k = 0; k < p->bars->n_stacks; k++)
				sum += p->bars->values[i * p->bars->n_stacks + k];
			double bx = frame_px_x(fr, i), top = frame_px_y(fr, sum);
			n += 4 * (bx >= x && bx <= x + w && top <= y + h);
		}
	}
#undef COVERS
	return n;
}

static void draw_legend(cairo_t *cr, const struct chart_panel *p, const struct plot_frame *fr)
{
	struct legend_entry e[CHART_MAX_LINES + CHART_MAX_STACKS + CHART_MAX_HLINES +
			      CHART_MAX_POINTS];
	int n = 0;
	for (int i = 0; i < p->n_lines; i++)
		if (p->lines[i].label[0])
			e[n++] = (struct legend_entry){ LEGEND_LINE, p->lines[i].style.color,
							p->lines[i].style.dashed,
							p->lines[i].style.markers, p->lines[i].label };
	for (int k = 0; p->bars && k < p->bars->n_stacks; k++)
		if (p->bars->stack_labels[k][0])
			e[n++] = (struct legend_entry){ LEGEND_BOX, p->bars->colors[k], 0, 0,
							p->bars->stack_labels[k] };
	for (int i = 0; i < p->n_hlines; i++)
		if (p->hlines[i].label[0])
			e[n++] = (struct legend_entry){ LEGEND_LINE, p->hlines[i].color,
							p->hlines[i].dashed, 0, p->hlines[i].label };
	for (int i = 0; i < p->n_points; i++)
		if (p->points[i].label[0])
			e[n++] = (struct legend_entry){ LEGEND_DOT, p->points[i].color, 0, 0,
							p->points[i].label };
	if (n == 0)
		return;

	const double row_h = 17, swatch_w = 26, pad = 7, inset = 8;
	double text_w = 0;
	set_font(cr, 11, 0);
	for (int i = 0; i < n; i++)
		text_w = fmax(text_w, text_width(cr, e[i].label));
	double w = pad + swatch_w + 6 + text_w + pad, h = pad + n * row_h + pad - 3;

	/* The corner that hides the fewest data points, top right first on ties. */
	const double corners[4][2] = {
		{ fr->left + fr->width - inset - w, fr->top + inset },
		{ fr->left + inset, fr->top + inset },
		{ fr->left + fr->width - inset - w, fr->top + fr->height - inset - h },
		{ fr->left + inset, fr->top + fr->height - inset - h },
	};
	int best = 0, best_cover = -1;
	for (int c = 0; c < 4; c++) {
		int cover = legend_overlap(p, fr, corners[c][0], corners[c][1], w, h);
		if (best_cover < 0 || cover < best_cover) {
			best = c;
			best_cover = cover;
		}
	}
	double x = corners[best][0], y = corners[best][1];
	cairo_rectangle(cr, x, y, w, h);
	cairo_set_source_rgba(cr, 1, 1, 1, 0.88);
	cairo_fill_preserve(cr);
	cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
	cairo_set_line_width(cr, 1);
	cairo_stroke(cr);
	for (int i = 0; i < n; i++) {
		double cy = y + pad + i * row_h + row_h / 2 - 2, sx = x + pad;
		set_color(cr, e[i].color);
		if (e[i].kind == LEGEND_BOX) {
			cairo_rectangle(cr, sx + 4, cy - 5, swatch_w - 8, 10);
			cairo_fill(cr);
		} else if (e[i].kind == LEGEND_DOT) {
			cairo_arc(cr, sx + swatch_w / 2, cy, 5, 0, 2 * M_PI);
			cairo_fill(cr);
		} else {
			cairo_set_line_width(cr, 2);
			set_dash(cr, e[i].dashed);
			cairo_move_to(cr, sx, cy);
			cairo_line_to(cr, sx + swatch_w, cy);
			cairo_stroke(cr);
			set_dash(cr, 0);
			if (e[i].markers) {
				cairo_arc(cr, sx + swatch_w / 2, cy, 3.5, 0, 2 * M_PI);
				cairo_fill(cr);
			}
		}
		cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
		text_at(cr, sx + swatch_w + 6, cy, e[i].label, 0, 0.5);
	}
}

static void figure_draw(cairo_t *cr, const struct chart_figure *fig)
{
	double title_h = fig->title[0] ? FIG_TITLE_PX : 0;
	double cell_w = fig->width_px / fig->cols, cell_h = (fig->height_px - title_h) / fig->rows;

	cairo_set_source_rgb(cr, 1, 1, 1);
	cairo_paint(cr);
	if (fig->title[0]) {
		cairo_set_source_rgb(cr, 0.05, 0.05, 0.05);
		set_font(cr, 17, 1);
		text_at(cr, fig->width_px / 2, title_h / 2 + 4, fig->title, 0.5, 0.5);
	}
	for (int i = 0; i < fig->rows * fig->cols; i++) {
		const struct chart_panel *p = &fig->panels[i];
		struct plot_frame fr;
		panel_frame(p, (i % fig->cols) * cell_w, title_h + (i / fig->cols) * cell_h, cell_w,
			    cell_h, &fr);
		draw_axes(cr, p, &fr);
		draw_series(cr, p, &fr);
		draw_legend(cr, p, &fr);
	}
}

static cairo_status_t stream_write(void *closure, const unsigned char *data, unsigned int len)
{
	return fwrite(data, 1, len, closure) == len ? CAIRO_STATUS_SUCCESS
						    : CAIRO_STATUS_WRITE_ERROR;
}

enum chart_format { FORMAT_PNG, FORMAT_SVG, FORMAT_PDF };

int chart_figure_save(const struct chart_figure *fig, const char *path)
{
	const char *ext = strrchr(path, '.');
	enum chart_format format;
	struct atomic_file af;
	cairo_surface_t *surface;
	cairo_status_t st;

	if (ext && !strcasecmp(ext, ".png"))
		format = FORMAT_PNG;
	else if (ext && !strcasecmp(ext, ".svg"))
		format = FORMAT_SVG;
	else if (ext && !strcasecmp(ext, ".pdf"))
		format = FORMAT_PDF;
	else
		return gp_error(GP_EINVAL, "cannot tell the chart format of '%s' (use .png, .svg or .pdf)",
				path);
	GP_TRY(atomic_file_open(&af, path));
	if (format == FORMAT_PNG)
		surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil(fig->width_px),
						     (int)ceil(fig->height_px));
	else if (format == FORMAT_SVG)
		surface = cairo_svg_surface_create_for_stream(stream_write, af.f, fig->width_px,
							      fig->height_px);
	else
		surface = cairo_pdf_surface_create_for_stream(stream_write, af.f, fig->width_px,
							      fig->height_px);
	cairo_t *cr = cairo_create(surface);
	figure_draw(cr, fig);
	st = cairo_status(cr);
	cairo_destroy(cr);
	if (st == CAIRO_STATUS_SUCCESS && format == FORMAT_PNG)
		st = cairo_surface_write_to_png_stream(surface, stream_write, af.f);
	cairo_surface_finish(surface);
	if (st == CAIRO_STATUS_SUCCESS)
		st = cairo_surface_status(surface);
	cairo_surface_destroy(surface);
	if (st != CAIRO_STATUS_SUCCESS) {
		atomic_file_abort(&af);
		return gp_error(GP_EIO, "cannot draw chart '%s': %s", path,
				cairo_status_to_string(st));
	}
	return atomic_file_commit(&af);
}
