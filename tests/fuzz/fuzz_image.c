/* Image decode (ImageFolder datasets): a JPEG or PNG file through imagefolder_load,
 * as the loader reads each sample: header, scaled decode, crop, resample, normalize.
 * A hash of the input picks the training augmentation or the eval transform. */
#include "fuzz.h"

#include <string.h>

#include "core/error.h"
#include "data/dataset_impl.h"
#include "data/image.h"

#define FUZZ_IMAGE_SIZE 24
/* libFuzzer counts one allocation past its limit (2 GiB) as a crash; the loader has
 * no pixel cap of its own, so larger images are left out here. */
#define FUZZ_MAX_PIXELS (4096L * 4096L)

static struct image_ctx ctx;
static float out[3 * FUZZ_IMAGE_SIZE * FUZZ_IMAGE_SIZE];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	if (image_ctx_init(&ctx) < 0)
		fuzz_die("cannot create a TurboJPEG decompressor");
	return 0;
}

static uint64_t fnv1a(const uint8_t *data, size_t size)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 1099511628211ull;
	return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *path = (char *)fuzz_input_file(data, size);
	uint64_t seed = fnv1a(data, size);
	struct dataset ds = {
		.kind = DATASET_FOLDER, .train = (int)(seed & 1), .size = FUZZ_IMAGE_SIZE,
		.count = 1, .classes = 1, .scaled_decode = (int)(seed >> 1 & 1), .paths = &path,
	};
	struct sample_cost cost;
	enum image_kind kind;
	int w, h;

	if (image_header(&ctx, data, size, &kind, &w, &h) == 0 &&
	    (long)w * h <= FUZZ_MAX_PIXELS)
		imagefolder_load(&ds, &ctx, 0, seed, out, &cost);
	gp_error_clear();
	return 0;
}
