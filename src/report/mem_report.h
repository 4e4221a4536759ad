/* The memory timeline of a profile (nn/mem_timeline.h) in the result, the report and
 * a chart: live bytes by category along the step's plan steps, stacked, with the
 * peak marked, and the largest tensors alive at the peak. `analyze` reads it back
 * from the result, since a trace holds no plan. */
#ifndef GP_MEM_REPORT_H
#define GP_MEM_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "nn/mem_timeline.h"

/* New reference, NULL when out of memory. */
json_t *mem_timeline_to_json(const struct mem_timeline *tl);
/* Read what mem_timeline_to_json wrote; GP_EFORMAT naming the field when it is not. */
int mem_timeline_from_json(json_t *j, struct mem_timeline *out);
/* A deep copy. */
int mem_timeline_copy(const struct mem_timeline *src, struct mem_timeline *dst);

/* The peak and the largest tensors there, for the console. */
void mem_timeline_print(const struct mem_timeline *tl, FILE *f);
/* The same, with a table of live bytes by category at up to 24 plan steps (the
 * loss, the peak and the optimizer among them), as markdown. */
void mem_timeline_markdown(const struct mem_timeline *tl, FILE *f);
/* memory_timeline.png: stacked areas by category along the plan steps. */
int mem_timeline_chart(const struct mem_timeline *tl, const char *model, int batch,
		       const char *path);

#endif
