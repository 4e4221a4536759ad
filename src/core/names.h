/* A concept's names (models, precisions, devices, layouts) are kept in one table each;
 * a table is read through a function that gives its i-th name, NULL past the last.
 * These helpers derive the messages, help texts and look-ups from such a function, so
 * no list of names is ever written out twice. */
#ifndef GP_NAMES_H
#define GP_NAMES_H

#include <stddef.h>

/* The names joined into buf: sep between them, last before the final one ("a, b or c"
 * with ", " and " or "; "a | b | c" with " | " twice). Returns buf. */
const char *names_join(char *buf, size_t cap, const char *(*name_at)(int i), const char *sep,
		       const char *last);
/* The index of s among the names, or -1. */
int names_find(const char *(*name_at)(int i), const char *s);

#endif
