/* Validation: a forward pass in eval mode (batch norm's running statistics, no
 * dropout) over every image of a dataset once, in the net's training precision,
 * scored on the host as torchvision's reference evaluate() scores it: plain
 * cross-entropy (no label smoothing), top-1 and top-5. */
#ifndef GP_EVALUATE_H
#define GP_EVALUATE_H

#include <stdint.h>

#include "data/dataset.h"
#include "nn/net.h"

/* Sums over the images scored so far. */
struct eval_counts {
	long images;
	double loss_sum;     /* cross-entropy, natural log */
	long top1, top5;
};

/* Is label among the k largest of row (classes logits)? Ties go to the lower index,
 * as argmax takes the first maximum; a NaN ranks above every number (torch.topk), so
 * a NaN at the label is never a hit. */
int eval_topk_hit(const float *row, int classes, int label, int k);
/* Score n rows of logits (n x classes, row-major) against labels into c. */
void eval_counts_add(struct eval_counts *c, const float *logits, const int32_t *labels, int n,
		     int classes);

struct eval_opts {
	int workers, prefetch; /* loader threads and batches in flight per thread */
	uint64_t seed;
};

struct eval_result {
	struct eval_counts counts;
	double loss, top1, top5; /* means; top-k in percent */
	double img_s, seconds;
};

/* Validate net (set up, at its batch) on ds (opened in eval mode at the net's input
 * size): batches in order, the last partial one padded with zeros to the net's batch
 * and only its real rows scored, so every image counts exactly once. */
int evaluate_net(struct net *net, struct dataset *ds, const struct eval_opts *o, struct eval_result *r);

#endif
