/* What the two halves of the hostile battery share: a case (struct hcase), written in
 * hostile_cases.c, and the runner in test_hostile.c that plays every case and judges
 * how it ends. */
#ifndef GP_TESTS_HOSTILE_H
#define GP_TESTS_HOSTILE_H

#include <stddef.h>

enum {
	H_CHANGES = 1, /* may change files that were there before it (--overwrite, kill) */
	H_LINES = 2,   /* other lines beside the error line (an error after work began; for
			* exit 0, an error the menu shows and goes on from) */
};

struct hcase {
	const char *name;
	/* gpuperf's arguments; or, after "!", a shell line ($G is gpuperf, $F the
	 * fixtures: ds/ an ImageFolder, w.safetensors, train.json, trace/, bad/) */
	const char *cmd;
	int rc;           /* 0, 1, 2; 128 + N: killed by signal N */
	const char *line; /* the error line holds this; for exit 0, the output does */
	const char *setup; /* shell, in the case's folder before it; exit 77 skips */
	const char *after; /* shell, in the case's folder after it: must exit 0 */
	int flags;
	const char *known; /* a known failure, left with this reason */
};

/* Tiny runs: each training case takes milliseconds. */
#define TR "train --model simple_cnn --device cpu --size 32 --batch 2 --classes 10 --steps 1 "

/* Every case in the order the battery runs them: the table, then each numeric option
 * at its three bad values; NULL when out of memory. hostile_cases_free frees it. */
struct hcase *hostile_cases(size_t *n);
void hostile_cases_free(struct hcase *all, size_t n);

#endif
