/* A stand-in for libnvidia-ml.so.1 with canned values, built by tests/test_nvml.c
 * at test time and loaded through GPUPERF_NVML_LIB. It exports only what
 * src/gpu/nvml.c uses; the values are odd enough that a mixed-up field shows. */
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define FAKE_DEVICES 2
#define FAKE_OTHER_PROCS 70 /* more than the caller's first guess: forces a retry */

struct fake_device {
	int index;
};

struct fake_memory {
	unsigned long long total, free, used;
};

struct fake_utilization {
	unsigned gpu, memory;
};

struct fake_process_info {
	unsigned pid;
	unsigned long long used_gpu_memory;
	unsigned gpu_instance_id, compute_instance_id;
};

struct fake_sample {
	unsigned long long ts_us;
	unsigned long long value;
};

static struct fake_device devices[FAKE_DEVICES] = { { 0 }, { 1 } };
static int initialized;

int nvmlInit_v2(void)
{
	initialized++;
	return 0;
}

int nvmlShutdown(void)
{
	initialized--;
	return 0;
}

const char *nvmlErrorString(int rc)
{
	return rc == 2 ? "Invalid Argument" : "Fake Error";
}

int nvmlDeviceGetCount_v2(unsigned *n)
{
	*n = FAKE_DEVICES;
	return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, struct fake_device **h)
{
	if (!initialized)
		return 1; /* NVML_ERROR_UNINITIALIZED */
	if (i >= FAKE_DEVICES)
		return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	*h = &devices[i];
	return 0;
}

int nvmlDeviceGetName(struct fake_device *h, char *buf, unsigned len)
{
	strncpy(buf, h->index ? "Fake GPU B" : "NVIDIA H100 80GB HBM3", len);
	return 0;
}

int nvmlDeviceGetUUID(struct fake_device *h, char *buf, unsigned len)
{
	strncpy(buf, "GPU-12345678-abcd-ef01-2345-6789abcdef01", len);
	return 0;
}

int nvmlSystemGetDriverVersion(char *buf, unsigned len)
{
	strncpy(buf, "550.54.15", len);
	return 0;
}

int nvmlSystemGetCudaDriverVersion_v2(int *v)
{
	*v = 12040;
	return 0;
}

int nvmlDeviceGetMemoryInfo(struct fake_device *h, struct fake_memory *m)
{
	m->total = 85520809984ULL;
	m->used = 1234567168ULL;
	m->free = m->total - m->used;
	return 0;
}

int nvmlDeviceGetEnforcedPowerLimit(struct fake_device *h, unsigned *mw)
{
	*mw = 700000;
	return 0;
}

int nvmlDeviceGetMaxClockInfo(struct fake_device *h, int type, unsigned *mhz)
{
	*mhz = type == 1 ? 1980 : 2619;
	return 0;
}

int nvmlDeviceGetClockInfo(struct fake_device *h, int type, unsigned *mhz)
{
	*mhz = type == 1 ? 1755 : 2613;
	return 0;
}

int nvmlDeviceGetUtilizationRates(struct fake_device *h, struct fake_utilization *u)
{
	u->gpu = 87;
	u->memory = 43;
	return 0;
}

int nvmlDeviceGetPowerUsage(struct fake_device *h, unsigned *mw)
{
	*mw = 312345;
	return 0;
}

int nvmlDeviceGetTemperature(struct fake_device *h, int sensor, unsigned *c)
{
	*c = 61;
	return 0;
}

int nvmlDeviceGetCurrentClocksEventReasons(struct fake_device *h, unsigned long long *r)
{
	*r = 0x24; /* sw_power_cap | sw_thermal */
	return 0;
}

/* Process FAKE_PID_BASE + i uses (i + 1) MiB; the calling process uses 1536 MiB. The
 * base lies above Linux's largest pid (2^22), so the caller's own pid never collides
 * with one of them (it did, as 1009, in a fresh container). */
#define FAKE_PID_BASE 4000000000u
int nvmlDeviceGetComputeRunningProcesses_v3(struct fake_device *h, unsigned *count,
					    struct fake_process_info *infos)
{
	unsigned total = FAKE_OTHER_PROCS + 1;
	if (*count < total) {
		*count = total;
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	}
	for (unsigned i = 0; i < FAKE_OTHER_PROCS; i++)
		infos[i] = (struct fake_process_info){ FAKE_PID_BASE + i, (i + 1ULL) << 20, 0, 0 };
	infos[FAKE_OTHER_PROCS] = (struct fake_process_info){ (unsigned)getpid(), 1536ULL << 20,
							      0, 0 };
	*count = total;
	return 0;
}

/* Five utilization samples 100 ms apart ending at the first call: 10, 20, 30, 40,
 * 50 %, handed out newest first to check that the caller sorts them. */
int nvmlDeviceGetSamples(struct fake_device *h, int type, unsigned long long last_seen,
			 int *value_type, unsigned *count, struct fake_sample *samples)
{
	static unsigned long long end_us;
	unsigned n = 0;
	if (!end_us) {
		struct timeval tv;
		gettimeofday(&tv, NULL);
		end_us = tv.tv_sec * 1000000ULL + tv.tv_usec;
	}
	if (type != 1)
		return 3; /* NVML_ERROR_NOT_SUPPORTED */
	*value_type = 1; /* unsigned int */
	if (!samples) {
		*count = 5;
		return 0;
	}
	for (int i = 4; i >= 0 && n < *count; i--) {
		unsigned long long ts = end_us - (4 - i) * 100000ULL;
		if (ts <= last_seen)
			continue;
		samples[n].ts_us = ts;
		samples[n].value = 0;
		memcpy(&samples[n].value, &(unsigned){ 10u * (i + 1) }, sizeof(unsigned));
		n++;
	}
	*count = n;
	return n ? 0 : 6; /* NVML_ERROR_NOT_FOUND */
}

/* Device 0's energy counter starts at 5,000,000 mJ and grows by 250,000 mJ (250 J) per
 * reading; device 1 does not count energy (a pre-Volta GPU). */
int nvmlDeviceGetTotalEnergyConsumption(struct fake_device *h, unsigned long long *mj)
{
	static unsigned long long readings;
	if (h->index != 0)
		return 3; /* NVML_ERROR_NOT_SUPPORTED */
	*mj = 5000000ULL + 250000ULL * readings++;
	return 0;
}
