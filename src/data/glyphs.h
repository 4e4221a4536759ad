/* Synthetic images whose class is a glyph to find, not a colour to read: the
 * pictures `gpuperf dataset make --difficulty N` draws for a training run that
 * must learn for several epochs (time to accuracy, docs/training.md).
 *
 * A class is a combination of a shape (disc, square, triangle, cross, ring,
 * half-disc), a fill pattern drawn in the glyph's own frame (solid, stripes,
 * checks, concentric bands) and a mark (none, centre dot, slot, cross slot, two
 * holes): 6 x 4 x 5 = 120 classes that stay apart whatever the pose. Nothing else
 * depends on the class: the glyph's position, size, aspect, rotation and
 * colours are random, so no pixel statistic gives the class away. Harder levels
 * add a cluttered, noisy background and smaller glyphs of other classes
 * (distractors), some of them drawn over the class's own glyph. */
#ifndef GP_DATA_GLYPHS_H
#define GP_DATA_GLYPHS_H

#include <stdint.h>

#include "core/rng.h"

#define GLYPH_CLASSES_MAX 120
#define GLYPH_DIFFICULTY_MAX 3

/* Draw an image of class c (0 <= c < classes <= GLYPH_CLASSES_MAX) into the
 * w x h RGB buffer rgb at difficulty 1..GLYPH_DIFFICULTY_MAX; everything random
 * comes from r, so one (seed, index) gives one picture:
 *   1: one glyph, random pose and colours, on a smooth random gradient, mild noise;
 *   2: a smaller glyph on a gradient with a random grating, stronger noise, and
 *      2 to 4 smaller distractor glyphs of other classes;
 *   3: smaller still, 4 to 7 distractors (up to 3/4 of its size), half of them
 *      drawn after (over) the class's glyph, and the strongest noise. */
void glyph_image_draw(uint8_t *rgb, int w, int h, int c, int classes, int difficulty,
		      struct rng *r);

/* 1 when the point (u, v) of a glyph's own frame ([-1, 1] squared) is inside
 * class c's glyph, with *second set when it takes the second colour (the fill
 * pattern's other half, or a mark). Exposed for the tests. */
int glyph_covers(int c, double u, double v, int *second);

#endif
