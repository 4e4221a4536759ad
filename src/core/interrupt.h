/* A graceful stop on SIGINT or SIGTERM for long loops (train): the first signal only
 * records itself, the loop polls interrupt_signal() between steps, writes what it has
 * and returns GP_EINTR up to main, which exits 128 + the signal. The first signal
 * also puts back the handlers that were there before (main's file_cleanup_on_signals:
 * remove temporary files, then die of the signal), so a second one stops at once. */
#ifndef GP_INTERRUPT_H
#define GP_INTERRUPT_H

/* Catch SIGINT and SIGTERM as above, forgetting any signal caught before. */
int interrupt_catch(void);
/* Put the handlers of before interrupt_catch back (if it had installed its own). The
 * signal caught stays readable until the next interrupt_catch. */
void interrupt_release(void);
/* The signal caught since interrupt_catch, 0 if none. */
int interrupt_signal(void);

#endif
