/* nvJPEG, NVIDIA's JPEG decoder, loaded at run time with dlopen so that the program
 * builds without nvjpeg.h and runs where the library is missing (as NVML does, in
 * gpu/nvml.c). The declarations below are our own, of the few types and functions
 * used; each value was checked against NVIDIA's nvJPEG documentation (CUDA 12/13,
 * docs.nvidia.com/cuda/nvjpeg, sections 2.2 and 2.3) and against nvjpeg.h as public
 * projects vendor it (the enums are unchanged since CUDA 10.1, only extended at
 * their end). GPUPERF_NVJPEG_LIB (core/tuning.c) overrides the library path. */
#ifndef GP_DATA_NVJPEG_H
#define GP_DATA_NVJPEG_H

#include <stddef.h>

/* nvjpegStatus_t ("nvJPEG API Return Codes"; the values as nvjpeg.h numbers them,
 * unchanged from CUDA 10.1 to 13): 0 is success. */
enum {
	NVJPEG_STATUS_SUCCESS = 0,
	NVJPEG_STATUS_NOT_INITIALIZED = 1,
	NVJPEG_STATUS_INVALID_PARAMETER = 2,
	NVJPEG_STATUS_BAD_JPEG = 3,
	NVJPEG_STATUS_JPEG_NOT_SUPPORTED = 4,
	NVJPEG_STATUS_ALLOCATOR_FAILURE = 5,
	NVJPEG_STATUS_EXECUTION_FAILED = 6,
	NVJPEG_STATUS_ARCH_MISMATCH = 7,
	NVJPEG_STATUS_INTERNAL_ERROR = 8,
	NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED = 9,
	NVJPEG_STATUS_INCOMPLETE_BITSTREAM = 10,
};

/* nvjpegBackend_t (docs 2.2.1): HARDWARE uses the A100/H100 JPEG engines (baseline,
 * single-scan JPEGs; not 4:1:0 / 4:1:1); DEFAULT is the CUDA backend. */
enum {
	NVJPEG_BACKEND_DEFAULT = 0,
	NVJPEG_BACKEND_HYBRID = 1,
	NVJPEG_BACKEND_GPU_HYBRID = 2,
	NVJPEG_BACKEND_HARDWARE = 3,
};

/* nvjpegOutputFormat_t (values as nvjpeg.h numbers them; newer formats are appended
 * after BGRI = 6): RGBI writes interleaved RGB into channel[0] only, pitch[0] at
 * least 3 x width, and a grayscale JPEG comes out as grey RGB (docs 2.1.1). */
enum {
	NVJPEG_OUTPUT_UNCHANGED = 0,
	NVJPEG_OUTPUT_YUV = 1,
	NVJPEG_OUTPUT_Y = 2,
	NVJPEG_OUTPUT_RGB = 3,
	NVJPEG_OUTPUT_BGR = 4,
	NVJPEG_OUTPUT_RGBI = 5,
};

/* nvjpegChromaSubsampling_t, as nvjpegGetImageInfo reports it. */
enum {
	NVJPEG_CSS_444 = 0,
	NVJPEG_CSS_422 = 1,
	NVJPEG_CSS_420 = 2,
	NVJPEG_CSS_GRAY = 6,
};

/* NVJPEG_MAX_COMPONENT and nvjpegImage_t (docs 2.2.9): four channel pointers, then
 * four pitches, as size_t. */
#define NVJPEG_MAX_COMPONENT 4
struct nvjpeg_image {
	unsigned char *channel[NVJPEG_MAX_COMPONENT];
	size_t pitch[NVJPEG_MAX_COMPONENT];
};

/* Opaque handles (docs 2.2.2, 2.2.12, 2.2.13). */
typedef struct nvjpeg_handle_opaque *nvjpeg_handle;
typedef struct nvjpeg_state_opaque *nvjpeg_state;
typedef struct nvjpeg_stream_opaque *nvjpeg_stream;
/* nvjpegDecodeParams_t (docs 2.2.4): per-image decode settings, here the region. */
typedef struct nvjpeg_decode_params_opaque *nvjpeg_decode_params;
/* cudaStream_t is a pointer; 0 is the legacy default stream. */
typedef void *nvjpeg_cuda_stream;

/* Members carry the nvJPEG symbol names; signatures from docs 2.3.1-2.3.3.
 * The two allocator arguments of nvjpegCreateEx are passed as NULL (cudaMalloc and
 * cudaHostAlloc), so they are declared as void pointers. */
struct nvjpeg_api {
	int (*nvjpegCreateEx)(int backend, void *dev_allocator, void *pinned_allocator,
			      unsigned flags, nvjpeg_handle *handle);
	int (*nvjpegDestroy)(nvjpeg_handle handle);
	int (*nvjpegJpegStateCreate)(nvjpeg_handle handle, nvjpeg_state *state);
	int (*nvjpegJpegStateDestroy)(nvjpeg_state state);
	/* subsampling is an enum (int); widths and heights hold NVJPEG_MAX_COMPONENT */
	int (*nvjpegGetImageInfo)(nvjpeg_handle handle, const unsigned char *data,
				  size_t length, int *n_components, int *subsampling,
				  int *widths, int *heights);
	int (*nvjpegDecode)(nvjpeg_handle handle, nvjpeg_state state,
			    const unsigned char *data, size_t length, int output_format,
			    struct nvjpeg_image *destination, nvjpeg_cuda_stream stream);
	int (*nvjpegDecodeBatchedInitialize)(nvjpeg_handle handle, nvjpeg_state state,
					     int batch_size, int max_cpu_threads,
					     int output_format);
	int (*nvjpegDecodeBatched)(nvjpeg_handle handle, nvjpeg_state state,
				   const unsigned char *const *data, const size_t *lengths,
				   struct nvjpeg_image *destinations,
				   nvjpeg_cuda_stream stream);
	int (*nvjpegJpegStreamCreate)(nvjpeg_handle handle, nvjpeg_stream *stream);
	int (*nvjpegJpegStreamDestroy)(nvjpeg_stream stream);
	int (*nvjpegJpegStreamParseHeader)(nvjpeg_handle handle, const unsigned char *data,
					   size_t length, nvjpeg_stream stream);
	/* *is_supported == 0 means nvjpegDecodeBatched can decode it (docs 2.3.3.5) */
	int (*nvjpegDecodeBatchedSupported)(nvjpeg_handle handle, nvjpeg_stream stream,
					    int *is_supported);
	/* Optional (NULL where the library lacks them, before CUDA 11.x): */
	/* the hardware decoder's memory pool, allocated ahead for batch_size images of
	 * width x height (docs 2.3.3.3: "pre-allocates memory for hardware decode") */
	int (*nvjpegDecodeBatchedPreAllocate)(nvjpeg_handle handle, nvjpeg_state state,
					      int batch_size, int width, int height,
					      int chroma_subsampling, int output_format);
	/* JPEG engines and cores per engine of the hardware backend */
	int (*nvjpegGetHardwareDecoderInfo)(nvjpeg_handle handle, unsigned *num_engines,
					    unsigned *num_cores_per_engine);
	/* Region decodes (docs 2.3.3.4, 2.3.4): nvjpegDecodeBatched with one parameter
	 * object per image; the hardware backend only. An image's region is written at
	 * its destination's start, region-sized. */
	int (*nvjpegDecodeBatchedEx)(nvjpeg_handle handle, nvjpeg_state state,
				     const unsigned char *const *data, const size_t *lengths,
				     struct nvjpeg_image *destinations,
				     nvjpeg_decode_params *decode_params,
				     nvjpeg_cuda_stream stream);
	int (*nvjpegDecodeParamsCreate)(nvjpeg_handle handle, nvjpeg_decode_params *params);
	int (*nvjpegDecodeParamsDestroy)(nvjpeg_decode_params params);
	/* width and height -1: the whole image */
	int (*nvjpegDecodeParamsSetROI)(nvjpeg_decode_params params, int offset_x, int offset_y,
					int roi_width, int roi_height);
};

/* nvjpegCreateExV2's allocators (docs 2.2.8, 2.2.11): stream-ordered, with a context.
 * Each returns 0 on success. */
struct nvjpeg_dev_allocator_v2 {
	int (*dev_malloc)(void *ctx, void **ptr, size_t size, nvjpeg_cuda_stream stream);
	int (*dev_free)(void *ctx, void *ptr, size_t size, nvjpeg_cuda_stream stream);
	void *dev_ctx;
};
struct nvjpeg_pinned_allocator_v2 {
	int (*pinned_malloc)(void *ctx, void **ptr, size_t size, nvjpeg_cuda_stream stream);
	int (*pinned_free)(void *ctx, void *ptr, size_t size, nvjpeg_cuda_stream stream);
	void *pinned_ctx;
};
/* nvjpegCreateExV2 (CUDA 12.1 and later), or NULL where the library predates it. */
typedef int (*nvjpeg_create_ex_v2_fn)(int backend, struct nvjpeg_dev_allocator_v2 *dev_allocator,
				      struct nvjpeg_pinned_allocator_v2 *pinned_allocator,
				      unsigned flags, nvjpeg_handle *handle);
nvjpeg_create_ex_v2_fn nvjpeg_create_ex_v2(void);

/* Load the library (the tuning path, else libnvjpeg.so.13, .so.12, .so) and resolve
 * every symbol; reference counted and thread-safe, each nvjpeg_open paired with
 * nvjpeg_close. GP_ENODEV with the reason (which file, which symbol) when it fails.
 * *api stays valid until the matching nvjpeg_close. */
int nvjpeg_open(const struct nvjpeg_api **api);
void nvjpeg_close(void);
/* The file that was loaded ("" before the first successful nvjpeg_open). */
const char *nvjpeg_lib_path(void);
/* A status code's name ("NVJPEG_STATUS_BAD_JPEG"), for messages. */
const char *nvjpeg_status_name(int status);

#endif
