/* Console tables and their CSV twin. */
#include "report/table.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "report/result.h"

void table_init(struct table *t)
{
	memset(t, 0, sizeof(*t));
}

void table_free(struct table *t)
{
	for (int i = 0; i < t->n_cols; i++)
		free(t->titles[i]);
	for (int i = 0; i < t->n_rows * t->n_cols; i++)
		free(t->cells[i]);
	free(t->cells);
	table_init(t);
}

int table_add_col(struct table *t, const char *title, enum table_align align)
{
	if (t->n_rows > 0)
		return gp_error(GP_EINVAL, "table column '%s' added after the first row", title);
	if (t->n_cols == TABLE_MAX_COLS)
		return gp_error(GP_EINVAL, "a table has at most %d columns", TABLE_MAX_COLS);
	t->titles[t->n_cols] = strdup(title);
	if (!t->titles[t->n_cols])
		return gp_error(GP_ENOMEM, "no memory for a table column");
	t->align[t->n_cols++] = align;
	return 0;
}

int table_add_row(struct table *t, const char *fmt, ...)
{
	char *line = NULL;
	va_list ap;
	int rc = 0;

	va_start(ap, fmt);
	int len = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (len < 0)
		return gp_error(GP_ENOMEM, "no memory for a table row");
	int n = 1;
	for (char *p = line; *p; p++)
		n += *p == '\t';
	if (n != t->n_cols) {
		rc = gp_error(GP_EINVAL, "table row has %d cells for %d columns", n, t->n_cols);
		goto free_line;
	}
	if (t->n_rows == t->cap_rows) {
		int cap = t->cap_rows ? t->cap_rows * 2 : 16;
		char **grown = realloc(t->cells, (size_t)cap * t->n_cols * sizeof(*grown));
		if (!grown) {
			rc = gp_error(GP_ENOMEM, "no memory for %d table rows", cap);
			goto free_line;
		}
		t->cells = grown;
		t->cap_rows = cap;
	}
	char **row = t->cells + (size_t)t->n_rows * t->n_cols;
	char *cell = line;
	for (int c = 0; c < n; c++) {
		char *tab = strchr(cell, '\t');
		size_t cell_len = tab ? (size_t)(tab - cell) : strlen(cell);
		row[c] = strndup(cell, cell_len);
		if (!row[c]) {
			while (c-- > 0)
				free(row[c]);
			rc = gp_error(GP_ENOMEM, "no memory for a table cell");
			goto free_line;
		}
		cell += cell_len + 1;
	}
	t->n_rows++;
free_line:
	free(line);
	return rc;
}

/* Width on a terminal: UTF-8 continuation bytes take no column ("µs", "×"). */
static int text_width(const char *s)
{
	int w = 0;
	for (; *s; s++)
		w += ((unsigned char)*s & 0xC0) != 0x80;
	return w;
}

static void print_cell(FILE *f, const char *s, int width, enum table_align align, int last)
{
	int pad = width - text_width(s);
	if (align == TABLE_RIGHT)
		fprintf(f, "%*s%s", pad, "", s);
	else if (last)
		fputs(s, f);
	else
		fprintf(f, "%s%*s", s, pad, "");
}

int table_print(const struct table *t, FILE *f)
{
	int width[TABLE_MAX_COLS], total = 0;
	for (int c = 0; c < t->n_cols; c++) {
		width[c] = text_width(t->titles[c]);
		for (int r = 0; r < t->n_rows; r++) {
			int w = text_width(t->cells[(size_t)r * t->n_cols + c]);
			if (w > width[c])
				width[c] = w;
		}
		total += width[c] + (c ? 2 : 0);
	}
	for (int c = 0; c < t->n_cols; c++) {
		fputs(c ? "  " : "", f);
		print_cell(f, t->titles[c], width[c], t->align[c], c == t->n_cols - 1);
	}
	fputc('\n', f);
	for (int i = 0; i < total; i++)
		fputc('-', f);
	fputc('\n', f);
	for (int r = 0; r < t->n_rows; r++) {
		for (int c = 0; c < t->n_cols; c++) {
			fputs(c ? "  " : "", f);
			print_cell(f, t->cells[(size_t)r * t->n_cols + c], width[c], t->align[c],
				   c == t->n_cols - 1);
		}
		fputc('\n', f);
	}
	return ferror(f) ? gp_error(GP_EIO, "cannot print a table") : 0;
}

static void csv_field(FILE *f, const char *s)
{
	if (!strpbrk(s, ",\"\r\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

int table_write_csv(const struct table *t, const char *path)
{
	struct atomic_file af;
	GP_TRY(atomic_file_open(&af, path));
	for (int r = -1; r < t->n_rows; r++) {
		for (int c = 0; c < t->n_cols; c++) {
			if (c)
				fputc(',', af.f);
			csv_field(af.f, r < 0 ? t->titles[c] : t->cells[(size_t)r * t->n_cols + c]);
		}
		fputs("\r\n", af.f);
	}
	return atomic_file_commit(&af);
}

int table_write_csv_in(const struct table *t, const char *dir, const char *name, char *path,
		       size_t cap)
{
	if (snprintf(path, cap, "%s/%s", dir, name) >= (int)cap)
		return gp_error(GP_EINVAL, "CSV path too long in '%.64s...'", dir);
	return table_write_csv(t, path);
}
