/* A small plotting layer on cairo: a figure is a grid of panels; a panel has a
 * title, axis labels (with units), a linear or log2 x axis with "nice" ticks, line
 * series, horizontal reference lines, marked points and stacked bars, and a legend.
 * chart_figure_save picks PNG, SVG or PDF from the file extension and writes
 * atomically. Builders copy what they are given. */
#ifndef GP_CHART_H
#define GP_CHART_H

struct chart_color {
	double r, g, b;
};

/* The tab10 palette, which reads well on white and for most colour blindness. */
#define CHART_BLUE ((struct chart_color){ 0.122, 0.467, 0.706 })
#define CHART_ORANGE ((struct chart_color){ 1.000, 0.498, 0.055 })
#define CHART_GREEN ((struct chart_color){ 0.173, 0.627, 0.173 })
#define CHART_RED ((struct chart_color){ 0.839, 0.153, 0.157 })
#define CHART_PURPLE ((struct chart_color){ 0.580, 0.404, 0.741 })
#define CHART_BROWN ((struct chart_color){ 0.549, 0.337, 0.294 })
#define CHART_PINK ((struct chart_color){ 0.890, 0.467, 0.761 })
#define CHART_GREY ((struct chart_color){ 0.498, 0.498, 0.498 })
#define CHART_OLIVE ((struct chart_color){ 0.737, 0.741, 0.133 })
#define CHART_CYAN ((struct chart_color){ 0.090, 0.745, 0.812 })

/* Colour i of the palette above (wraps around). */
struct chart_color chart_palette(int i);

enum chart_scale { CHART_LINEAR = 0, CHART_LOG2 };

struct chart_line_style {
	struct chart_color color;
	double width_px; /* 0: 2 px */
	int dashed;
	int markers;     /* a dot at every point */
	int fill;        /* fill down to y = 0 (a stacked area: the tallest first) */
};

#define CHART_MAX_PANELS 16
#define CHART_MAX_LINES 16
#define CHART_MAX_HLINES 8
#define CHART_MAX_POINTS 16
#define CHART_MAX_BARS 64
#define CHART_MAX_STACKS 10
#define CHART_LABEL_MAX 96

struct chart_figure;
struct chart_panel;

/* A figure of rows x cols panels; width/height 0 pick 640 x 420 px per panel.
 * NULL when out of memory or the grid is empty or too large. */
struct chart_figure *chart_figure_new(int rows, int cols, int width_px, int height_px,
				      const char *title);
void chart_figure_free(struct chart_figure *fig);
/* Panel i in row-major order, NULL when out of range. */
struct chart_panel *chart_figure_panel(struct chart_figure *fig, int i);

void chart_panel_set_title(struct chart_panel *p, const char *title);
/* Labels carry their units: "batch size", "memory (MiB)". */
void chart_panel_set_labels(struct chart_panel *p, const char *x_label, const char *y_label);
void chart_panel_set_x_scale(struct chart_panel *p, enum chart_scale scale);
/* Fix an axis range instead of fitting the data (utilization: 0..100). */
void chart_panel_set_x_range(struct chart_panel *p, double lo, double hi);
void chart_panel_set_y_range(struct chart_panel *p, double lo, double hi);

/* label NULL or "" keeps the item out of the legend. */
int chart_panel_add_line(struct chart_panel *p, const double *x, const double *y, int n,
			 struct chart_line_style style, const char *label);
int chart_panel_add_hline(struct chart_panel *p, double y, struct chart_color color,
			  int dashed, const char *label);
/* A marked point with its label written beside it (the out-of-memory batch). */
int chart_panel_add_point(struct chart_panel *p, double x, double y, struct chart_color color,
			  const char *label);
/* Stacked bars on a categorical x axis: bar i is labelled bar_labels[i] and stacks
 * values[i * n_stacks + k] for stage k; one set of bars per panel. */
int chart_panel_set_bars(struct chart_panel *p, int n_bars, const char *const *bar_labels,
			 int n_stacks, const char *const *stack_labels,
			 const struct chart_color *colors, const double *values);

/* Render to path; the extension (.png, .svg, .pdf) picks the format. */
int chart_figure_save(const struct chart_figure *fig, const char *path);

/* Nice tick positions for [lo, hi] with about target ticks: multiples of 1, 2 or 5
 * times a power of ten; *step gets the spacing, always finite and positive. Returns
 * the count (at most cap; none for bounds that are not finite). */
int chart_ticks_nice(double lo, double hi, int target, double *ticks, int cap, double *step);

#endif
