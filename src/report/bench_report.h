/* The report of a bench run folder: report.html (one self-contained page: inline CSS
 * and SVG charts, no script, no network) and report.md, drawn from bench.json and
 * the results of its stages; each figure names the JSON it came from. */
#ifndef GP_BENCH_REPORT_H
#define GP_BENCH_REPORT_H

/* Write <dir>/report.html and <dir>/report.md (atomically) from <dir>/bench.json. */
int bench_report_write(const char *dir);
/* The PyTorch yardstick's JSON lines (<dir>/<stage>/torch.jsonl) as a result
 * ("command": "torch", measurements.runs) at <dir>/<result_rel>. */
int bench_torch_to_result(const char *dir, const char *result_rel, int argc, char **argv);
/* Is dir a bench run folder (holds bench.json)? */
int bench_dir_is(const char *dir);

#endif
