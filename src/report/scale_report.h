/* gpuperf scale's report from its rows, one per GPU count: the derived figures
 * (efficiency, exposed communication, the share of the all-reduce backward hides,
 * gpuperf's img/s over PyTorch DDP's), the table, the runs array of scale.json and
 * the summary line; and the PyTorch DDP yardstick's JSON line read into a row.
 * cmd/cmd_scale.c measures the rows; scaling.png is drawn from scale.json
 * (report/plots.c), so that `gpuperf plot` redraws it. */
#ifndef GP_SCALE_REPORT_H
#define GP_SCALE_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "report/mfu.h"
#include "report/table.h"

enum scale_torch_state { SCALE_TORCH_NOT_RUN = 0, SCALE_TORCH_OK, SCALE_TORCH_FAILED };

/* tools/torch_ddp.py at one GPU count. */
struct scale_torch {
	enum scale_torch_state state;
	double img_s, img_s_per_gpu, ms_per_step, peak_reserved_mib;
	double efficiency; /* against N x PyTorch's one-GPU img/s; NaN: not known */
	double ratio;      /* gpuperf's img/s / PyTorch's; NaN: not known */
	char note[256];    /* why it failed */
};

struct scale_row {
	int gpus;
	double img_s, img_s_per_gpu, ms_per_step, efficiency;
	double allreduce_ms, exposed_ms, hidden_pct; /* hidden_pct < 0: not known */
	int slowest_rank;
	double slowest_ms, fastest_ms;
	double data_wait_pct; /* of the step, waiting for data (--data); < 0: synthetic */
	json_t *train;   /* the run's measurements (a reference the caller owns) */
	struct mfu mfu;  /* their model FLOPs figures (all ranks together) */
	struct scale_torch torch;
};

/* ours / theirs, as "x torch" shows it; NaN unless both are positive and finite. */
double scale_ratio(double ours, double theirs);
/* Fill each row's efficiency, exposed communication, hidden share and, where PyTorch
 * ran, its efficiency and the ratio; rows[0] is the one-GPU run. */
void scale_rows_derive(struct scale_row *rows, int n);
/* The table's columns and rows (t initialised, empty); torch: --torch's two columns,
 * "torch img/s" and "x torch"; data: a "data wait" column (the runs read --data). */
int scale_table_fill(struct table *t, const struct scale_row *rows, int n, int on_gpu, int torch,
		     int data);
/* measurements.runs of scale.json; each row gets a "torch" object when torch. */
json_t *scale_runs_json(const struct scale_row *rows, int n, int torch);
/* One line without a newline: the largest GPU count's img/s and efficiency and, where
 * PyTorch ran, gpuperf's ratio to it at every count. */
void scale_summary(const struct scale_row *rows, int n, char *buf, size_t cap);
/* tools/torch_ddp.py's output at path (rank 0's JSON line among other lines) into t
 * for a run of world ranks: SCALE_TORCH_OK with its figures, else SCALE_TORCH_FAILED
 * and a note. Its torch version goes to version (cap bytes) when the line has one. */
void scale_torch_read(const char *path, int world, struct scale_torch *t, char *version,
		     size_t cap);

#endif
