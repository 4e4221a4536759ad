/* Monotonic clock readings as doubles: one helper for every timer in the program, so
 * step times, loader waits and NVML sample times all read the same clock. */
#ifndef GP_TIMEUTIL_H
#define GP_TIMEUTIL_H

double gp_now_s(void);  /* CLOCK_MONOTONIC seconds */
double gp_now_ms(void); /* CLOCK_MONOTONIC milliseconds */

#endif
