#include "nn/mem_timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sort.h"

static const char *const cat_names[MTL_NCAT] = {
	"weights", "gradients", "optimizer", "input", "activations", "activation_gradients",
	"workspace",
};

const char *mem_tl_cat_name(int cat)
{
	return cat >= 0 && cat < MTL_NCAT ? cat_names[cat] : "?";
}

/* What each planned tensor is: its category and a description by the node that
 * owns it. Aliases take their root's memory and are skipped by the caller. */
struct tl_owner {
	int cat;
	int node;
	const char *kind;
};

static void owner_set(struct tl_owner *o, int t, int cat, int node, const char *kind)
{
	if (t >= 0 && o[t].cat < 0)
		o[t] = (struct tl_owner){ cat, node, kind };
}

static int tensor_cmp_desc(const void *a, const void *b)
{
	const struct mem_tl_tensor *x = a, *y = b;
	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return strcmp(x->what, y->what);
}

static void point_label(const struct net *net, int step, char *buf, size_t cap)
{
	int n = net->n_nodes;
	char label[GP_NAME_MAX + 16];
	if (step == n)
		snprintf(buf, cap, "loss");
	else if (step > 2 * n)
		snprintf(buf, cap, "optimizer");
	else if (step < n)
		snprintf(buf, cap, "%s", net_node_label(net, step, label, sizeof(label)));
	else
		snprintf(buf, cap, "%s.backward", net_node_label(net, 2 * n - step, label, sizeof(label)));
}

int net_mem_timeline(const struct net *net, struct mem_timeline *out)
{
	memset(out, 0, sizeof(*out));
	int n = net->n_nodes;
	if (!net->tensors || n < 2)
		return gp_error(GP_EINVAL, "memory timeline: the net has no memory plan");
	struct tl_owner *own = malloc(((size_t)net->n_tensors + 1) * sizeof(*own));
	/* forward of nodes 1..n-1, the loss, backward of n-1..1, the optimizer */
	int n_points = 2 * n;
	out->points = calloc((size_t)n_points, sizeof(*out->points));
	if (!own || !out->points) {
		free(own);
		mem_timeline_free(out);
		return gp_error(GP_ENOMEM, "memory timeline: out of memory");
	}
	for (int t = 0; t < net->n_tensors; t++)
		own[t].cat = -1;
	for (int i = 0; i < n; i++) {
		const struct node *nd = &net->nodes[i];
		owner_set(own, nd->t_y, MTL_ACTIV, i, "output of");
		owner_set(own, nd->t_saved, MTL_ACTIV, i, "saved by");
		owner_set(own, nd->t_re, MTL_ACTIV, i, "recomputed output of");
		owner_set(own, nd->t_dy, MTL_ACT_GRADS, i, "gradient of");
		if (net->scratch) {
			const struct scratch_req *r = &net->scratch[i];
			owner_set(own, r->t_fwd, MTL_WORKSPACE, i, "forward workspace of");
			owner_set(own, r->t_bwd, MTL_WORKSPACE, i, "backward workspace of");
			owner_set(own, r->t_side, MTL_WORKSPACE, i, "weight-gradient workspace of");
			owner_set(own, r->t_keep, MTL_ACTIV, i, "reserve space of");
		}
	}
	const struct mem_plan *p = &net->plan;
	out->plan_total_bytes = p->total_bytes;
	out->arena_bytes = p->arena_bytes;
	for (int k = 0; k < n_points; k++) {
		struct mem_tl_point *pt = &out->points[k];
		pt->plan_step = k + 1 <= 2 * n - 1 ? k + 1 : 2 * n + 1;
		point_label(net, pt->plan_step, pt->label, sizeof(pt->label));
		pt->bytes[MTL_WEIGHTS] = p->weights_bytes;
		pt->bytes[MTL_GRADS] = p->grads_bytes;
		pt->bytes[MTL_OPTIM] = p->optim_bytes;
		pt->bytes[MTL_INPUT] = p->other_bytes;
		pt->bytes[MTL_WORKSPACE] = p->workspace_bytes;
		for (int t = 0; t < net->n_tensors; t++) {
			const struct plan_tensor *pt_t = &net->tensors[t];
			if (pt_t->alias_of >= 0 || pt_t->first_step > pt->plan_step ||
			    pt_t->last_step < pt->plan_step)
				continue;
			pt->bytes[own[t].cat >= 0 ? own[t].cat : MTL_ACTIV] += pt_t->bytes;
		}
		for (int c = 0; c < MTL_NCAT; c++)
			pt->total += pt->bytes[c];
		if (pt->total > out->points[out->peak].total)
			out->peak = k;
	}
	out->n_points = n_points;

	/* the largest tensors alive at the peak */
	int step = out->points[out->peak].plan_step, m = 0;
	struct mem_tl_tensor *all = malloc(((size_t)net->n_tensors + 1) * sizeof(*all));
	if (!all) {
		free(own);
		mem_timeline_free(out);
		return gp_error(GP_ENOMEM, "memory timeline: out of memory");
	}
	for (int t = 0; t < net->n_tensors; t++) {
		const struct plan_tensor *pt_t = &net->tensors[t];
		if (pt_t->alias_of >= 0 || pt_t->first_step > step || pt_t->last_step < step)
			continue;
		char label[GP_NAME_MAX + 16] = "?";
		if (own[t].cat >= 0)
			net_node_label(net, own[t].node, label, sizeof(label));
		struct mem_tl_tensor *x = &all[m++];
		snprintf(x->what, sizeof(x->what), "%s %s", own[t].cat >= 0 ? own[t].kind : "tensor",
			 label);
		x->cat = own[t].cat >= 0 ? own[t].cat : MTL_ACTIV;
		x->bytes = pt_t->bytes;
		x->first_step = pt_t->first_step;
		x->last_step = pt_t->last_step;
	}
	gp_qsort(all, (size_t)m, sizeof(*all), tensor_cmp_desc);
	out->n_top = m < MEM_TL_TOP ? m : MEM_TL_TOP;
	memcpy(out->top, all, (size_t)out->n_top * sizeof(*all));
	free(all);
	free(own);
	return 0;
}

void mem_timeline_free(struct mem_timeline *tl)
{
	free(tl->points);
	memset(tl, 0, sizeof(*tl));
}
