/* Monotonic clock readings as doubles: one helper for every timer in the program, so
 * step times, loader waits and NVML sample times all read the same clock. */
#ifndef GP_TIMEUTIL_H
#define GP_TIMEUTIL_H

double gp_now_s(void);  /* CLOCK_MONOTONIC seconds */
double gp_now_ms(void); /* CLOCK_MONOTONIC milliseconds */
/* CLOCK_REALTIME seconds since the Unix epoch: for timestamps others read
 * (TensorBoard's events), never for durations. */
double gp_wall_s(void);

#endif
