/* Self-contained HTML: one file with its CSS inline and charts as inline SVG drawn
 * here (text stays text, no script, no network), for `diff --html` and `bench`'s
 * report.html. */
#ifndef GP_HTML_H
#define GP_HTML_H

#include <stdio.h>

/* s with & < > " ' as entities. */
void html_escape(FILE *f, const char *s);
/* The doctype, head (title, charset, the inline style sheet) and <body>. */
void html_begin(FILE *f, const char *title);
void html_end(FILE *f);

/* One bar of a chart; highlight draws it in the accent colour. */
struct html_bar {
	const char *label;
	double value;
	int highlight;
};

/* A horizontal bar chart as an inline <svg> in a <figure>: one bar per item with its
 * value written at its end (format: printf for a double, "%.0f" when NULL), a title,
 * the unit on the axis and a caption naming the file the figures came from (source,
 * may be NULL). Non-finite values draw no bar and read "n/a". n may be 0. */
void html_svg_bars(FILE *f, const char *title, const char *unit, const char *format,
		   const struct html_bar *bars, int n, const char *source);

#endif
