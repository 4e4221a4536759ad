/* qsort and bsearch that take an empty array: their base must not be NULL even when
 * there is nothing to sort or find (UBSan reports it), and an empty list's array
 * often is NULL. */
#ifndef GP_SORT_H
#define GP_SORT_H

#include <stdlib.h>

static inline void gp_qsort(void *base, size_t n, size_t size,
			    int (*cmp)(const void *, const void *))
{
	if (n > 1)
		qsort(base, n, size, cmp);
}

static inline void *gp_bsearch(const void *key, const void *base, size_t n, size_t size,
				int (*cmp)(const void *, const void *))
{
	return n ? bsearch(key, base, n, size, cmp) : NULL;
}

#endif
