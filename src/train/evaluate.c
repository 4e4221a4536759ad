/* Validation over a whole dataset in eval mode, scored on the host. The logits come
 * back to the host (batch x classes floats a batch, small beside the images going
 * in), so that the CPU and CUDA backends share one scorer, top-5 included. */
#include "train/evaluate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timeutil.h"
#include "data/loader.h"

int eval_topk_hit(const float *row, int classes, int label, int k)
{
	float v = row[label];
	if (isnan(v))
		return 0;
	int ahead = 0;
	for (int c = 0; c < classes && ahead < k; c++)
		ahead += isnan(row[c]) || row[c] > v || (row[c] == v && c < label);
	return ahead < k;
}

void eval_counts_add(struct eval_counts *c, const float *logits, const int32_t *labels, int n,
		     int classes)
{
	for (int i = 0; i < n; i++) {
		const float *row = logits + (size_t)i * classes;
		double m = -INFINITY, s = 0;
		for (int k = 0; k < classes; k++)
			m = row[k] > m ? row[k] : m;
		for (int k = 0; k < classes; k++)
			s += exp((double)row[k] - m);
		/* log-sum-exp minus the label's logit; NaN logits make a NaN loss, as torch's */
		c->loss_sum += m + log(s) - row[labels[i]];
		c->top1 += eval_topk_hit(row, classes, labels[i], 1);
		c->top5 += eval_topk_hit(row, classes, labels[i], 5);
		c->images++;
	}
}

int evaluate_net(struct net *net, struct dataset *ds, const struct eval_opts *o, struct eval_result *r)
{
	memset(r, 0, sizeof(*r));
	if (dataset_size(ds) != net->in_h)
		return gp_error(GP_EINVAL, "validation images are %d pixels, the net takes %d", dataset_size(ds),
				net->in_h);
	int batch = net->batch, classes = net->classes;
	struct loader_config lc = {
		.batch = batch, .workers = o->workers, .prefetch = o->prefetch > 0 ? o->prefetch : 2,
		.size = dataset_size(ds), .train = 0, .drop_last = 0, .seed = o->seed,
	};
	struct loader *ld = NULL;
	float *logits = malloc((size_t)batch * classes * sizeof(float));
	double t0 = gp_now_s();
	int rc = logits ? loader_create(ds, &lc, &ld) :
			  gp_error(GP_ENOMEM, "no memory for %d x %d logits", batch, classes);
	int batches = rc == 0 ? loader_batches_per_epoch(ld) : 0;
	for (int i = 0; rc == 0 && i < batches; i++) {
		struct batch *b = NULL;
		if ((rc = loader_next(ld, &b)) < 0)
			break;
		/* the padding rows run through the net too, which treats every image on its
		 * own in eval mode; zeros keep them finite, and they are not scored */
		if (b->n < batch) {
			size_t floats = (size_t)3 * lc.size * lc.size;
			memset(b->x + floats * b->n, 0, floats * (batch - b->n) * sizeof(float));
			memset(b->labels + b->n, 0, (batch - b->n) * sizeof(int32_t));
		}
		if ((rc = net_set_batch_data(net, b->x, b->labels)) == 0 && (rc = net_forward(net, 0)) == 0 &&
		    (rc = net_logits_to_host(net, logits)) == 0)
			eval_counts_add(&r->counts, logits, b->labels, b->n, classes);
		loader_release(ld, b);
	}
	loader_destroy(ld);
	free(logits);
	if (rc < 0)
		return rc;
	struct eval_counts *c = &r->counts;
	r->seconds = gp_now_s() - t0;
	if (c->images) {
		r->loss = c->loss_sum / c->images;
		r->top1 = 100.0 * c->top1 / c->images;
		r->top5 = 100.0 * c->top5 / c->images;
	}
	r->img_s = r->seconds > 0 ? c->images / r->seconds : 0;
	return 0;
}
