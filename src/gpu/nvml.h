/* NVML, the driver's monitoring library, loaded at run time with dlopen so that the
 * program builds and runs on machines without a driver (there is no nvml.h here
 * either). GPUPERF_NVML_LIB overrides the library path, which is how tests load a
 * fake library with canned values. Every function returns 0 or a negative GP_E*. */
#ifndef GP_NVML_H
#define GP_NVML_H

#include <stddef.h>

/* Load the library and initialize NVML; reference counted and thread-safe, so
 * every nvml_open() is paired with one nvml_close(). No library or no driver gives
 * GP_ENODEV with the loader's reason. */
int nvml_open(void);
void nvml_close(void);

int nvml_device_count(int *n);

/* What does not change while the program runs. */
struct nvml_static_info {
	char name[96];
	char uuid[96];
	char driver_version[64];
	int cuda_driver_version; /* 12040 for CUDA 12.4 */
	size_t mem_total_bytes;
	unsigned power_limit_mw;
	unsigned max_sm_clock_mhz, max_mem_clock_mhz;
};

int nvml_static_info(int dev, struct nvml_static_info *out);

/* One reading of the changing counters. Counters the device does not support read
 * as 0 rather than failing the whole sample. */
struct nvml_sample {
	double t_s; /* CLOCK_MONOTONIC seconds */
	unsigned util_gpu_pct, util_mem_pct;
	size_t mem_used_bytes, mem_total_bytes;
	unsigned power_mw, temp_c, sm_clock_mhz, mem_clock_mhz;
	unsigned long long throttle_reasons; /* NVML clocks-event reason bits */
};

int nvml_sample(int dev, struct nvml_sample *out);

/* Device memory used by process pid as nvidia-smi shows it (context, library code
 * and caching allocator included); GP_ENOTFOUND when pid has no context on dev. */
int nvml_process_mem_bytes(int dev, unsigned pid, size_t *bytes);

/* The driver's own utilization samples newer than *last_ts_us (0: all it keeps),
 * at most cap of them, oldest first: pct[i] at t_s[i] (CLOCK_MONOTONIC seconds).
 * *last_ts_us advances to the newest sample returned. GP_EUNSUPPORTED when the
 * library or device does not offer them. */
int nvml_util_samples(int dev, unsigned long long *last_ts_us, double *pct, double *t_s,
		      int cap, int *n);

/* Energy device dev has used since the driver loaded, in mJ (Volta and later):
 * GP_EUNSUPPORTED where the library or device does not count it. */
int nvml_energy_mj(int dev, unsigned long long *mj);

/* Process pid's share of the SMs and of the memory controller (%) in the driver's
 * newest sampling period after *last_ts_us (0: any), which advances. GP_ENOTFOUND
 * when the driver has no sample for pid (no context, or idle since), GP_EUNSUPPORTED
 * where the library or device does not offer per-process figures. */
int nvml_process_util(int dev, unsigned pid, unsigned long long *last_ts_us,
		      unsigned *sm_pct, unsigned *mem_pct);

/* "sw_power_cap,hw_slowdown" for a reason mask, "none" for 0; returns buf. */
const char *nvml_throttle_reason_str(unsigned long long mask, char *buf, size_t cap);

/* A thread that takes one nvml_sample every interval until stopped. */
struct nvml_sampler;

int nvml_sampler_start(struct nvml_sampler **out, int dev, double interval_s);
/* Stop the thread and hand over what it recorded (the caller frees *samples).
 * Returns the first sampling error, if any, after handing the samples over. */
int nvml_sampler_stop(struct nvml_sampler *s, struct nvml_sample **samples, int *n);

/* ---- GPM: GPU performance monitoring (Hopper and newer) --------------------------
 * What DCGM's profiling metrics give, from NVML alone: each figure is the mean over
 * the interval between two reads; NaN when the device could not give that metric. */
struct nvml_gpm_metrics {
	double sm_util_pct;      /* SM activity: % of SMs busy (DCGM's SM_ACTIVE) */
	double sm_occupancy_pct; /* % of warps resident vs the maximum */
	double tensor_util_pct;  /* any tensor-core pipe busy (DCGM's TENSOR_ACTIVE) */
	double hmma_util_pct;    /* the FP16/BF16/TF32 tensor pipe */
	double dram_bw_util_pct; /* % of peak DRAM bandwidth (DCGM's DRAM_ACTIVE) */
};

struct nvml_gpm;

/* Start a GPM reader on dev (takes an nvml_open reference and the first snapshot).
 * GP_EUNSUPPORTED, with the reason, where the library lacks GPM or the device does
 * not support it: callers show no GPM figures then. */
int nvml_gpm_open(int dev, struct nvml_gpm **out);
/* The metrics over the interval since the previous read (since open for the first):
 * open at the start of a piece of work and read at its end for its means. An interval
 * under 100 ms (NVML's counters refresh no faster) is GP_ENOTFOUND, nothing read: the
 * next read covers the longer interval. */
int nvml_gpm_read(struct nvml_gpm *g, struct nvml_gpm_metrics *out);
void nvml_gpm_close(struct nvml_gpm *g);

#endif
