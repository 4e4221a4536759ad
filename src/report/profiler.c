#include "report/profiler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef GP_HAVE_CUDA
#include <cuda_runtime.h>

#include "gpu/tracer.h"
#endif

#include "core/error.h"
#include "report/analysis.h"
#include "report/chrome_trace.h"
#include "report/profile_charts.h"
#include "report/result.h"
#include "report/tb_events.h"

/* Per step: the step, four stages, a cpu_op per forward and backward layer call and
 * the optimizer; a memory event per layer call plus the optimizer. */
static size_t ranges_per_step(const struct net *net) { return 6 + 2 * (size_t)net->n_nodes; }

/* "[[64, 3, 32, 32]]": the shapes of a node's inputs, as Kineto's "Input Dims";
 * 2-D after a flatten or a linear layer. */
static void node_input_shapes(const struct net *net, int node, char *buf, size_t cap)
{
	const struct node *nd = &net->nodes[node];
	size_t len = 0;
	buf[len++] = '[';
	for (int k = 0; k < nd->n_in && len < cap; k++) {
		const struct node *src = &net->nodes[nd->in[k]];
		struct shape s = src->out;
		int flat = src->op == OP_FLATTEN || src->op == OP_LINEAR ||
			   (src->op == OP_DROPOUT && s.h == 1 && s.w == 1 &&
			    (nd->op == OP_LINEAR || nd->op == OP_DROPOUT));
		int w = flat ? snprintf(buf + len, cap - len, "%s[%d, %d]", k ? ", " : "", s.n, s.c)
			     : snprintf(buf + len, cap - len, "%s[%d, %d, %d, %d]", k ? ", " : "", s.n,
					s.c, s.h, s.w);
		len += w > 0 ? (size_t)w : 0;
	}
	if (len + 2 <= cap) {
		buf[len++] = ']';
		buf[len] = 0;
	} else {
		buf[cap - 1] = 0;
	}
}

int profiler_init(struct profiler *p, struct net *net, int first_step, int max_steps,
		  int record_shapes)
{
	memset(p, 0, sizeof(*p));
	GP_TRY(trace_init(&p->trace));
	p->net = net;
	struct trace *t = &p->trace;
	snprintf(t->meta.model, sizeof(t->meta.model), "%s", net->model);
	t->meta.batch = net->batch;
	snprintf(t->meta.precision, sizeof(t->meta.precision), "%s",
		 train_precision_name(net->precision));
	int rc = 0;
	char label[GP_NAME_MAX + 16], name[GP_NAME_MAX + 32];
	for (int i = 1; i < net->n_nodes && rc == 0; i++) {
		net_node_label(net, i, label, sizeof(label));
		snprintf(name, sizeof(name), "%s.backward", label);
		p->fwd_name[i] = trace_intern(t, label);
		p->bwd_name[i] = trace_intern(t, name);
		if (!p->fwd_name[i] || !p->bwd_name[i])
			rc = GP_ENOMEM;
		char shapes[256];
		if (record_shapes)
			node_input_shapes(net, i, shapes, sizeof(shapes));
		if (rc == 0)
			rc = trace_add_layer(t, label, op_name(net->nodes[i].op),
					     record_shapes ? shapes : NULL);
	}
	/* torch.profiler's name for the step of torch.optim.SGD or AdamW */
	const char *opt = net->optim.kind == OPTIM_ADAMW ? "Optimizer.step#AdamW.step"
							 : "Optimizer.step#SGD.step";
	p->opt_name = trace_intern(t, opt);
	if (rc == 0)
		rc = trace_add_layer(t, opt, "optimizer", NULL);
	for (int s = 0; s < 4; s++)
		if (!(p->stage_name[s] = trace_intern(t, analysis_stage_name(s))))
			rc = GP_ENOMEM;
	for (int c = 0; c < MEM_NCAT; c++)
		if (!(p->cat_name[c] = trace_intern(t, mem_cat_name(c))))
			rc = GP_ENOMEM;
	if (rc == 0 && !p->opt_name)
		rc = GP_ENOMEM;
	size_t steps = max_steps > 0 ? (size_t)max_steps : 1;
	if (rc == 0)
		rc = trace_reserve(t, steps * ranges_per_step(net), 0,
				   steps * (2 * (size_t)net->n_nodes + 1) + MEM_NCAT);
	/* trace_reserve has no count for steps: grow that array by adding and
	 * forgetting max_steps empty ones. */
	struct trace_step blank = { 0 };
	for (int s = 0; s < max_steps && rc == 0; s++)
		rc = trace_add_step(t, &blank);
	t->n_steps = 0;
	if (rc == 0) {
		char step_name[32];
		/* ProfilerStep names too, so trace_step_begin never allocates. */
		for (int s = first_step; s < first_step + max_steps && rc == 0; s++) {
			snprintf(step_name, sizeof(step_name), "ProfilerStep#%d", s);
			if (!trace_intern(t, step_name))
				rc = GP_ENOMEM;
		}
	}
	if (rc < 0) {
		trace_free(t);
		return rc == GP_ENOMEM ? gp_error(GP_ENOMEM, "profiler: out of memory") : rc;
	}
	/* the plan is the net's for this batch: its timeline is the step's memory */
	if (net->training && net->tensors) {
		rc = net_mem_timeline(net, &p->mem_tl);
		if (rc < 0) {
			trace_free(t);
			return rc;
		}
		p->have_mem_tl = 1;
	}
	return 0;
}

/* Arena bytes a node takes when it runs: in forward its output (unless it works in
 * place) and its saved tensor; in backward the input gradients it writes first. The
 * arena is allocated up front, so this, not an allocator delta, is the memory an op
 * "allocates" here. */
static int64_t node_planned_bytes(const struct net *net, int node, enum net_phase phase)
{
	const struct node *nd = &net->nodes[node];
	int64_t bytes = 0;
	if (phase == PHASE_FORWARD) {
		if (nd->t_y >= 0 && net->tensors[nd->t_y].alias_of < 0)
			bytes += (int64_t)net->tensors[nd->t_y].bytes;
		if (nd->t_saved >= 0)
			bytes += (int64_t)net->tensors[nd->t_saved].bytes;
		return bytes;
	}
	for (int k = 0; k < nd->n_in; k++) {
		const struct node *src = &net->nodes[nd->in[k]];
		if (src->t_dy >= 0 && src->last_consumer == node && net->tensors[src->t_dy].alias_of < 0)
			bytes += (int64_t)net->tensors[src->t_dy].bytes;
	}
	return bytes;
}

/* A memory event with the totals now, charged to the category that changed most
 * (activations when none did: the arena is planned up front, and then the event
 * carries the node's planned bytes). */
static void mem_sample(struct profiler *p, const char *layer, enum mem_cat fallback, int64_t planned)
{
	const struct mem_stats *m = &p->net->mem;
	int64_t delta = 0;
	int cat = fallback;
	for (int c = 0; c < MEM_NCAT; c++) {
		int64_t d = (int64_t)m->cur_bytes[c] - (int64_t)p->last_mem[c];
		if (d != 0 && (delta == 0 || (d < 0 ? -d : d) > (delta < 0 ? -delta : delta))) {
			delta = d;
			cat = c;
		}
	}
	int64_t total_delta = 0;
	for (int c = 0; c < MEM_NCAT; c++) {
		total_delta += (int64_t)m->cur_bytes[c] - (int64_t)p->last_mem[c];
		p->last_mem[c] = m->cur_bytes[c];
	}
	if (total_delta == 0)
		total_delta = planned;
	int rc = trace_add_mem(&p->trace, trace_now_ns(), (int64_t)m->total_bytes, total_delta,
			       p->cat_name[cat], layer);
	if (rc < 0 && !p->err)
		p->err = rc;
}

static void hook_begin(void *user, const struct net *net, int node, enum net_phase phase)
{
	struct profiler *p = user;
	const char *name = phase == PHASE_OPTIMIZER ? p->opt_name
			   : phase == PHASE_FORWARD ? p->fwd_name[node] : p->bwd_name[node];
	int rc = trace_range_push(&p->trace, name, "cpu_op");
	if (rc < 0 && !p->err)
		p->err = rc;
#ifdef GP_HAVE_CUDA
	if (rc == 0 && p->tracing)
		tracer_op_push(p->trace.ranges[p->trace.n_ranges - 1].external_id);
#endif
}

static void hook_end(void *user, const struct net *net, int node, enum net_phase phase)
{
	struct profiler *p = user;
#ifdef GP_HAVE_CUDA
	if (p->tracing)
		tracer_op_pop();
#endif
	int rc = trace_range_pop(&p->trace);
	if (rc < 0 && !p->err)
		p->err = rc;
	if (phase == PHASE_OPTIMIZER)
		mem_sample(p, p->opt_name, MEM_OPTIM, 0);
	else
		mem_sample(p, phase == PHASE_FORWARD ? p->fwd_name[node] : p->bwd_name[node],
			   MEM_ACTIV, node_planned_bytes(net, node, phase));
}

/* One event per category with what was allocated when recording began, so the
 * memory trend starts from the real total. */
static int mem_baseline(struct profiler *p)
{
	const struct mem_stats *m = &p->net->mem;
	int64_t total = 0, now = trace_now_ns();
	for (int c = 0; c < MEM_NCAT; c++) {
		total += (int64_t)m->cur_bytes[c];
		p->last_mem[c] = m->cur_bytes[c];
		GP_TRY(trace_add_mem(&p->trace, now, total, (int64_t)m->cur_bytes[c], p->cat_name[c],
				     NULL));
	}
	return 0;
}

int profiler_start(struct profiler *p)
{
	if (p->net->backend == BACKEND_CUDA) {
#ifdef GP_HAVE_CUDA
		GP_TRY(tracer_start(&p->trace));
		p->tracing = 1;
#else
		return gp_error(GP_ENODEV, "profiler: this build has no CUDA tracer");
#endif
	}
	p->saved_hooks = p->net->hooks;
	p->net->hooks = (struct net_hooks){ hook_begin, hook_end, p };
	p->attached = 1;
	return mem_baseline(p);
}

int profiler_step_begin(struct profiler *p, int step)
{
	return trace_step_begin(&p->trace, step);
}

int profiler_stage(struct profiler *p, enum train_stage stage, int begin)
{
	if (begin)
		return trace_range_push(&p->trace, p->stage_name[stage], "user_annotation");
	return trace_range_pop(&p->trace);
}

int profiler_step_end(struct profiler *p, int64_t data_wait_ns)
{
	return trace_step_end(&p->trace, data_wait_ns);
}

int profiler_discard(struct profiler *p)
{
	struct trace *t = &p->trace;
	if (t->depth)
		return gp_error(GP_EINVAL, "profiler: discard inside an open range");
	t->n_ranges = t->n_mem = t->n_steps = 0;
	p->keep_from_ns = trace_now_ns();
	return mem_baseline(p);
}

/* Drop CUPTI records of the warm-up steps: GPU work and runtime calls that started
 * before the kept steps. Host ranges of the warm-up are already gone. */
static void drop_before(struct trace *t, int64_t from_ns)
{
	size_t n = 0;
	for (size_t i = 0; i < t->n_gpu; i++)
		if (t->gpu[i].start_ns >= from_ns)
			t->gpu[n++] = t->gpu[i];
	t->n_gpu = n;
	n = 0;
	for (size_t i = 0; i < t->n_ranges; i++)
		if (t->ranges[i].start_ns >= from_ns)
			t->ranges[n++] = t->ranges[i];
	t->n_ranges = n;
}

int profiler_stop(struct profiler *p)
{
	int rc = 0;
	if (p->attached) {
		p->net->hooks = p->saved_hooks;
		p->attached = 0;
	}
#ifdef GP_HAVE_CUDA
	if (p->tracing) {
		p->tracing = 0;
		rc = tracer_stop();
	}
#endif
	if (rc == 0 && p->keep_from_ns)
		drop_before(&p->trace, p->keep_from_ns);
	if (rc == 0 && p->err)
		rc = gp_error_wrap(p->err, "profiler: a hook failed to record");
	return rc;
}

void profiler_free(struct profiler *p)
{
	/* The net may be gone already (an error ended training), so its hooks are left
	 * alone here; only CUPTI, which is process-wide, must be stopped. */
#ifdef GP_HAVE_CUDA
	if (p->tracing)
		tracer_stop();
#endif
	trace_free(&p->trace);
	if (p->have_mem_tl)
		mem_timeline_free(&p->mem_tl);
	memset(p, 0, sizeof(*p));
}

int profiler_device_sync(enum backend_kind backend)
{
#ifdef GP_HAVE_CUDA
	if (backend == BACKEND_CUDA) {
		cudaError_t e = cudaDeviceSynchronize();
		if (e != cudaSuccess)
			return gp_error(GP_EDEVICE, "cudaDeviceSynchronize failed at %s:%d: %s",
					__FILE__, __LINE__, cudaGetErrorString(e));
	}
#endif
	return 0;
}

/* --- outputs ------------------------------------------------------------------------ */

static long long file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* Per-step scalars for TensorBoard: step time, images per second and the largest
 * allocated total seen in the step. */
static int tb_write_steps(const struct trace *t, const char *logdir, char *path, size_t cap)
{
	struct tb_writer *w;
	GP_TRY(tb_writer_open(&w, logdir));
	snprintf(path, cap, "%s", tb_writer_path(w));
	int rc = 0;
	for (size_t i = 0; i < t->n_steps && rc == 0; i++) {
		const struct trace_step *s = &t->steps[i];
		double ms = (s->end_ns - s->start_ns) / 1e6;
		int64_t mem = 0;
		for (size_t k = 0; k < t->n_mem; k++)
			if (t->mem[k].ts_ns <= s->end_ns && t->mem[k].total_bytes > mem &&
			    (t->mem[k].ts_ns >= s->start_ns || k + 1 == t->n_mem ||
			     t->mem[k + 1].ts_ns >= s->start_ns))
				mem = t->mem[k].total_bytes;
		if ((rc = tb_add_scalar(w, "profile/step_time_ms", ms, s->step)) < 0 ||
		    (rc = tb_add_scalar(w, "profile/img_per_s",
					ms > 0 ? t->meta.batch * 1e3 / ms : 0, s->step)) < 0)
			break;
		rc = tb_add_scalar(w, "profile/memory_mib", mem / GP_MIB, s->step);
	}
	int rc2 = tb_writer_close(w);
	return rc < 0 ? rc : rc2;
}

static void report_overhead_print(FILE *f, const struct profile_overhead *ov,
				  long long trace_bytes)
{
	fprintf(f, "\n## Profiler overhead\n\n");
	if (ov->baseline_steps > 0)
		fprintf(f, "- overhead ratio: %.3fx (profiled step %.3f ms over %d steps, "
			   "unprofiled step %.3f ms over %d steps; target <= 1.02x)\n",
			ov->ratio, ov->profiled_ms, ov->profiled_steps, ov->baseline_ms,
			ov->baseline_steps);
	else
		fprintf(f, "- overhead ratio: n/a (no unprofiled steps were timed before this window; "
			   "profiled step %.3f ms over %d steps)\n", ov->profiled_ms, ov->profiled_steps);
	fprintf(f, "- trace size: %.2f MB (profiler_trace.json)\n", trace_bytes / 1e6);
}

int profile_report_write(const struct analysis *a, const char *path,
			 const struct profile_overhead *ov, long long trace_bytes)
{
	struct atomic_file af;
	GP_TRY(atomic_file_open(&af, path));
	analysis_markdown_print(a, af.f);
	if (ov)
		report_overhead_print(af.f, ov, trace_bytes);
	return atomic_file_commit(&af);
}

int profile_write_outputs(struct trace *t, const char *dir, const struct profile_overhead *ov,
			  const struct mem_timeline *tl, const char *sort, const char *command,
			  int argc, char **argv, json_t *settings)
{
	char path[4096], log_path[4096], tb_path[4096], logdir[4096];
	struct analysis a;
	json_t *res = NULL, *aj = NULL;
	int rc, rc_files = 0;
	char files_err[1024] = "";
	long long trace_bytes = 0;
	/* A file that cannot be written beside the result does not cost the result: the
	 * first such failure is kept and returned after result.json is written. */
#define FILES_TRY(call)                                                             \
	do {                                                                        \
		if (rc_files == 0 && (rc_files = (call)) < 0)                       \
			snprintf(files_err, sizeof(files_err), "%s", gp_errmsg());  \
	} while (0)
	FILES_TRY(path_mkdirs(dir));
	FILES_TRY(chrome_trace_write_dir(t, dir, log_path, sizeof(log_path)));
	snprintf(path, sizeof(path), "%s/profiler_trace.json", dir);
	if (rc_files == 0)
		trace_bytes = file_size(path);
	snprintf(logdir, sizeof(logdir), "%s/profiler_logs", dir);
	FILES_TRY(tb_write_steps(t, logdir, tb_path, sizeof(tb_path)));

	GP_TRY(analysis_run(t, &a));
	if (tl && (rc = analysis_set_mem_timeline(&a, tl)) < 0)
		goto free_analysis;
	if (sort)
		analysis_sort_ops(&a, !strcmp(sort, "gpu"));
	analysis_print(&a, stdout);
	snprintf(path, sizeof(path), "%s/profile_report.md", dir);
	FILES_TRY(profile_report_write(&a, path, ov, trace_bytes));
	aj = analysis_to_json(&a);
	if (!aj) {
		rc = gp_error(GP_ENOMEM, "cannot build the analysis summary");
		goto free_analysis;
	}
	snprintf(path, sizeof(path), "%s/analysis.json", dir);
	FILES_TRY(json_write_atomic(aj, path, JSON_INDENT(2) | JSON_REAL_PRECISION(6)));
	FILES_TRY(profile_charts_draw(&a, dir, stdout));
#undef FILES_TRY

	res = result_new(command, argc, argv);
	if (!res) {
		rc = gp_error(GP_ENOMEM, "cannot build the result");
		goto free_json;
	}
	if (settings)
		json_object_update(json_object_get(res, "settings"), settings);
	json_t *m = json_object_get(res, "measurements");
	json_object_set_new(m, "baseline_ms_per_step", result_real(ov->baseline_ms));
	json_object_set_new(m, "baseline_steps", json_integer(ov->baseline_steps));
	json_object_set_new(m, "profiled_ms_per_step", result_real(ov->profiled_ms));
	json_object_set_new(m, "profiled_steps", json_integer(ov->profiled_steps));
	json_object_set_new(m, "overhead_ratio", ov->baseline_steps > 0 ? result_real(ov->ratio)
									 : json_null());
	json_object_set_new(m, "trace_bytes", json_integer(trace_bytes));
	json_object_set_new(m, "trace_events", json_integer((json_int_t)(t->n_ranges + t->n_gpu +
									 t->n_mem)));
	json_object_set_new(m, "analysis", json_incref(aj));
	rc = result_write(res, dir, "result", path, sizeof(path));
	if (rc < 0)
		goto free_json;
	if (rc_files < 0) {
		printf("wrote %s\n", path);
		rc = gp_error(rc_files, "%s", files_err);
		goto free_json;
	}

	printf("\nprofile written to %s/\n"
	       "  trace        %s/profiler_trace.json (%.2f MB)\n"
	       "  trace (TB)   %s\n"
	       "  scalars (TB) %s\n"
	       "  report       %s/profile_report.md, %s/analysis.json\n"
	       "  charts       %s/stage_breakdown.png, %s/%s\n"
	       "  result       %s\n",
	       dir, dir, trace_bytes / 1e6, log_path, tb_path, dir, dir, dir, dir,
	       a.have_mem_tl ? "memory_timeline.png" : "memory_trend.png", path);
	if (ov->baseline_steps > 0)
		printf("overhead: profiled %.3f ms/step vs unprofiled %.3f ms/step: %.3fx\n",
		       ov->profiled_ms, ov->baseline_ms, ov->ratio);
free_json:
	json_decref(res);
	json_decref(aj);
free_analysis:
	analysis_free(&a);
	return rc;
}

/* --- the session: a train_observer with a schedule ------------------------------------ */

void profile_session_init(struct profile_session *s)
{
	memset(s, 0, sizeof(*s));
	s->cur = -1;
	s->baseline_first = -1;
}

static int window_at(const struct profile_session *s, int step)
{
	for (int i = 0; i < s->n_windows; i++) {
		const struct profile_window *w = &s->w[i];
		if (step >= w->first && step < w->first + w->warmup + w->active)
			return i;
	}
	return -1;
}

static int session_step_begin(void *user, struct net *net, int epoch, int step_in_epoch, int step)
{
	struct profile_session *s = user;
	s->step = step;
	int wi = window_at(s, step);
	if (wi >= 0 && s->cur != wi) {
		const struct profile_window *w = &s->w[wi];
		GP_TRY(profiler_init(&s->prof, net, w->first, w->warmup + w->active,
				     s->record_shapes));
		s->cur = wi;
		s->prof_sum_ms = 0;
		s->prof_n = 0;
		GP_TRY(profiler_start(&s->prof));
	}
	if (wi >= 0 && s->w[wi].warmup > 0 && step == s->w[wi].first + s->w[wi].warmup)
		GP_TRY(profiler_discard(&s->prof));
	s->recording = wi >= 0;
	s->step_t0 = trace_now_ns();
	if (s->recording)
		GP_TRY(profiler_step_begin(&s->prof, step));
	return 0;
}

static int session_stage(void *user, enum train_stage stage, int begin)
{
	struct profile_session *s = user;
	return s->recording ? profiler_stage(&s->prof, stage, begin) : 0;
}

/* The window's mean step time against the unprofiled mean, and its outputs. */
static int session_window_end(struct profile_session *s)
{
	const struct profile_window *w = &s->w[s->cur];
	int rc = profiler_stop(&s->prof);
	if (rc < 0)
		goto free_prof;
	struct profile_overhead ov = {
		.baseline_steps = s->base_n,
		.baseline_ms = s->base_n ? s->base_sum_ms / s->base_n : 0,
		.profiled_steps = s->prof_n,
		.profiled_ms = s->prof_n ? s->prof_sum_ms / s->prof_n : 0,
	};
	ov.ratio = ov.baseline_ms > 0 ? ov.profiled_ms / ov.baseline_ms : 0;
	json_t *settings = s->settings ? json_deep_copy(s->settings) : json_object();
	if (!settings) {
		rc = gp_error(GP_ENOMEM, "cannot build the settings");
		goto free_prof;
	}
	json_object_set_new(settings, "first_step", json_integer(w->first));
	json_object_set_new(settings, "warmup", json_integer(w->warmup));
	json_object_set_new(settings, "active_steps", json_integer(w->active));
	if (w->epoch >= 0)
		json_object_set_new(settings, "epoch", json_integer(w->epoch));
	rc = profile_write_outputs(&s->prof.trace, w->dir, &ov,
				   s->prof.have_mem_tl ? &s->prof.mem_tl : NULL, s->sort, s->command, s->argc,
				   s->argv, settings);
	json_decref(settings);
	if (rc == 0)
		s->windows_written++;
free_prof:
	profiler_free(&s->prof);
	s->cur = -1;
	return rc;
}

static int session_step_end(void *user, struct net *net, int64_t data_wait_ns)
{
	struct profile_session *s = user;
	/* Both the timed unprofiled steps and the recorded ones end with the device
	 * idle, so their times are comparable and the step range covers its GPU work. */
	GP_TRY(profiler_device_sync(s->backend));
	if (s->recording) {
		const struct profile_window *w = &s->w[s->cur];
		GP_TRY(profiler_step_end(&s->prof, data_wait_ns));
		double ms = (trace_now_ns() - s->step_t0) / 1e6;
		if (s->step >= w->first + w->warmup) {
			s->prof_sum_ms += ms;
			s->prof_n++;
		}
		if (s->step == w->first + w->warmup + w->active - 1)
			return session_window_end(s);
		return 0;
	}
	double ms = (trace_now_ns() - s->step_t0) / 1e6;
	int timed = s->baseline_steps < 0 ? s->step > 0
					   : s->step >= s->baseline_first &&
						     s->step < s->baseline_first + s->baseline_steps;
	if (timed) {
		s->base_sum_ms += ms;
		s->base_n++;
	}
	return 0;
}

struct train_observer profile_session_observer(struct profile_session *s)
{
	return (struct train_observer){ .step_begin = session_step_begin, .stage = session_stage,
					.step_end = session_step_end, .user = s };
}

void profile_session_free(struct profile_session *s)
{
	if (s->cur >= 0)
		profiler_free(&s->prof);
	s->cur = -1;
}
