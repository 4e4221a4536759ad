/* Chrome trace files in the schema of PyTorch's profiler (Kineto), so Perfetto,
 * chrome://tracing, TensorBoard's profiler plugin and Holistic Trace Analysis read
 * what `gpuperf profile` writes, and `gpuperf analyze` reads it back. */
#ifndef GP_CHROME_TRACE_H
#define GP_CHROME_TRACE_H

/* The range name TensorBoard's profiler plugin takes as data loading (torch's
 * DataLoader iterator); the writer adds one per step that waited for its batch. */
extern const char CHROME_TRACE_DATALOADER[];

#include <stddef.h>

#include "core/trace.h"

/* Write t to path atomically (a temporary file renamed into place). */
int chrome_trace_write(const struct trace *t, const char *path);
/* Write dir/profiler_trace.json and the same trace as
 * dir/profiler_logs/<host>_<pid>.<unix_ms>.pt.trace.json (where TensorBoard and HTA
 * look); the second path goes to log_path when it is not NULL. */
int chrome_trace_write_dir(const struct trace *t, const char *dir, char *log_path,
			   size_t log_path_cap);
/* Load a trace written by chrome_trace_write (or by torch.profiler) into out, which
 * this initializes; on error out is left empty. */
int chrome_trace_read(const char *path, struct trace *out);

#endif
