/* Charts are written as SVG here rather than through cairo's SVG surface: cairo
 * draws text as glyph outlines whose ids ("glyph0-1") repeat in every file, so two
 * of its charts inlined in one page overwrite each other's letters; SVG text from
 * here stays selectable and small. */
#include "report/html.h"

#include <math.h>

void html_escape(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&#39;", f); break;
		default: fputc(*s, f);
		}
	}
}

static const char html_style[] =
	"body{font-family:'DejaVu Sans',Arial,sans-serif;max-width:1100px;margin:2em auto;"
	"padding:0 1em;color:#222;line-height:1.4}\n"
	"h1{font-size:1.6em;border-bottom:2px solid #1f77b4}h2{font-size:1.3em;margin-top:2em;"
	"border-bottom:1px solid #ccc}h3{font-size:1.1em}\n"
	"table{border-collapse:collapse;margin:.8em 0;font-size:.9em}\n"
	"th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}"
	"th{background:#f0f4f8}td:first-child,th:first-child{text-align:left}\n"
	".summary{background:#f6f9fc;border:1px solid #cfe0f0;padding:.5em 1.2em;border-radius:4px}\n"
	".source{color:#777;font-size:.8em}.bad{color:#b00020;font-weight:bold}"
	".good{color:#1b7f2a;font-weight:bold}.note{color:#555;font-style:italic}\n"
	"figure{margin:1em 0}figcaption{color:#555;font-size:.85em}\n"
	"pre{background:#f4f4f4;padding:.5em;overflow-x:auto;font-size:.85em}\n";

void html_begin(FILE *f, const char *title)
{
	fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
	html_escape(f, title);
	fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", html_style);
}

void html_end(FILE *f)
{
	fputs("</body>\n</html>\n", f);
}

#define BAR_W 720
#define BAR_LABEL_W 230
#define BAR_ROW_H 22
#define BAR_VALUE_W 90

void html_svg_bars(FILE *f, const char *title, const char *unit, const char *format,
		   const struct html_bar *bars, int n, const char *source)
{
	double max = 0;
	for (int i = 0; i < n; i++)
		if (isfinite(bars[i].value) && bars[i].value > max)
			max = bars[i].value;
	int h = 40 + n * BAR_ROW_H + 24, plot_w = BAR_W - BAR_LABEL_W - BAR_VALUE_W;
	fputs("<figure>\n", f);
	fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		   "viewBox=\"0 0 %d %d\" role=\"img\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n",
		BAR_W, h, BAR_W, h);
	fputs("<title>", f);
	html_escape(f, title);
	fputs("</title>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n", f);
	fputs("<text x=\"8\" y=\"20\" font-size=\"14\" font-weight=\"bold\">", f);
	html_escape(f, title);
	fputs("</text>\n", f);
	for (int i = 0; i < n; i++) {
		double v = bars[i].value;
		int y = 34 + i * BAR_ROW_H;
		double w = isfinite(v) && max > 0 && v > 0 ? v / max * plot_w : 0;
		char val[64];
		if (isfinite(v))
			snprintf(val, sizeof(val), format ? format : "%.0f", v);
		else
			snprintf(val, sizeof(val), "n/a");
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"end\">",
			BAR_LABEL_W - 6, y + 15);
		html_escape(f, bars[i].label);
		fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>\n",
			BAR_LABEL_W, y + 3, w, BAR_ROW_H - 6,
			bars[i].highlight ? "#ff7f0e" : "#1f77b4");
		fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"12\">", BAR_LABEL_W + w + 4, y + 15);
		html_escape(f, val);
		fputs("</text>\n", f);
	}
	int axis_y = 34 + n * BAR_ROW_H + 4;
	fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#999\"/>\n",
		BAR_LABEL_W, axis_y, BAR_LABEL_W + plot_w, axis_y);
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555\">", BAR_LABEL_W,
		axis_y + 15);
	html_escape(f, unit);
	fputs("</text>\n</svg>\n", f);
	if (source) {
		fputs("<figcaption class=\"source\">from ", f);
		html_escape(f, source);
		fputs("</figcaption>\n", f);
	}
	fputs("</figure>\n", f);
}
