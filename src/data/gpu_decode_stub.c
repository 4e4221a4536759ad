/* Without CUDA there is no GPU decoder: every entry point says so. */
#ifndef GP_HAVE_CUDA
#include "data/gpu_decode.h"

#include "core/error.h"

int gpu_decoder_create(int device, int max_batch, int size, enum gpu_batch_layout layout,
		       int outputs, struct gpu_decoder **out)
{
	return gp_error(GP_ENODEV, "this gpuperf was built without CUDA: no GPU decoding");
}

int gpu_decoder_create_opts(int device, int max_batch, int size, enum gpu_batch_layout layout,
			    int outputs, const struct gpu_decoder_opts *opts,
			    struct gpu_decoder **out)
{
	return gp_error(GP_ENODEV, "this gpuperf was built without CUDA: no GPU decoding");
}

struct gpu_decoder_opts gpu_decoder_opts_default(void)
{
	return (struct gpu_decoder_opts){ 0 };
}

int gpu_decoder_run(struct gpu_decoder *d, int output, const struct gpu_decode_item *items,
		    int n, unsigned char *failed)
{
	return gp_error(GP_ENODEV, "this gpuperf was built without CUDA: no GPU decoding");
}

int gpu_decoder_launch(struct gpu_decoder *d, int output, const struct gpu_decode_item *items,
		       int n, unsigned char *failed)
{
	return gp_error(GP_ENODEV, "this gpuperf was built without CUDA: no GPU decoding");
}

int gpu_decoder_output_wait(struct gpu_decoder *d, int output)
{
	return gp_error(GP_ENODEV, "this gpuperf was built without CUDA: no GPU decoding");
}

const char *gpu_decoder_error(const struct gpu_decoder *d, int i) { return ""; }
void *gpu_decoder_output(const struct gpu_decoder *d, int output) { return 0; }
void *gpu_decoder_output_event(const struct gpu_decoder *d, int output) { return 0; }
const char *gpu_decoder_backend(const struct gpu_decoder *d) { return "none"; }
void gpu_decoder_get_stats(const struct gpu_decoder *d, struct gpu_decode_stats *out)
{
	*out = (struct gpu_decode_stats){ 0 };
}
void gpu_decoder_destroy(struct gpu_decoder *d) { }

int gpu_decode_parser_create(struct gpu_decoder *d, struct gpu_decode_parser **out)
{
	return gp_error(GP_ENODEV, "this gpuperf was built without CUDA: no GPU decoding");
}
void gpu_decoder_parse(struct gpu_decode_parser *p, struct gpu_decode_item *items, int n) { }
void gpu_decode_parser_destroy(struct gpu_decode_parser *p) { }
#endif
