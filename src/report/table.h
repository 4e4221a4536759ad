/* Console tables: columns with a title and an alignment, rows of printf-formatted
 * cells, printed aligned under a header rule, and the same table as CSV. */
#ifndef GP_TABLE_H
#define GP_TABLE_H

#include <stdio.h>

#include "core/error.h"

#define TABLE_MAX_COLS 32

enum table_align { TABLE_LEFT = 0, TABLE_RIGHT };

struct table {
	int n_cols;
	char *titles[TABLE_MAX_COLS];
	enum table_align align[TABLE_MAX_COLS];
	char **cells; /* row-major, n_rows * n_cols */
	int n_rows, cap_rows;
};

void table_init(struct table *t);
void table_free(struct table *t);
/* Columns are added before the first row. */
int table_add_col(struct table *t, const char *title, enum table_align align);
/* One row; fmt formats all cells at once with a tab between cells, e.g.
 * table_add_row(t, "%d\t%.1f\t%s", batch, step_ms, "ok"). The cell count must match
 * the column count. */
int table_add_row(struct table *t, const char *fmt, ...) GP_PRINTF(2, 3);
int table_print(const struct table *t, FILE *f);
/* RFC 4180 CSV (CRLF line ends, fields with , " CR or LF quoted), written atomically. */
int table_write_csv(const struct table *t, const char *path);
/* table_write_csv to dir/name, leaving the path it wrote in path (cap bytes). */
int table_write_csv_in(const struct table *t, const char *dir, const char *name, char *path,
		       size_t cap);

#endif
