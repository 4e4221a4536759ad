#include "core/memstat.h"
#include "core/tensor.h"

const char *mem_cat_name(enum mem_cat c)
{
	static const char *names[MEM_NCAT] = {
		"weights", "gradients", "optimizer", "activations", "workspace", "other",
	};
	return c < MEM_NCAT ? names[c] : "?";
}

void mem_stats_add(struct mem_stats *m, enum mem_cat c, size_t bytes)
{
	m->cur_bytes[c] += bytes;
	if (m->cur_bytes[c] > m->peak_bytes[c])
		m->peak_bytes[c] = m->cur_bytes[c];
	m->total_bytes += bytes;
	if (m->total_bytes > m->total_peak_bytes)
		m->total_peak_bytes = m->total_bytes;
}

void mem_stats_sub(struct mem_stats *m, enum mem_cat c, size_t bytes)
{
	m->cur_bytes[c] -= bytes;
	m->total_bytes -= bytes;
}

void mem_stats_reset_peak(struct mem_stats *m)
{
	for (int i = 0; i < MEM_NCAT; i++)
		m->peak_bytes[i] = m->cur_bytes[i];
	m->total_peak_bytes = m->total_bytes;
}

const char *dtype_name(enum gp_dtype t)
{
	switch (t) {
	case GP_F32: return "F32";
	case GP_F64: return "F64";
	case GP_F16: return "F16";
	case GP_BF16: return "BF16";
	case GP_I64: return "I64";
	case GP_I32: return "I32";
	case GP_U8: return "U8";
	}
	return "?";
}
