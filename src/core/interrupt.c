#include "core/interrupt.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "core/error.h"

static atomic_int caught;
static atomic_int installed;
static struct sigaction old_int, old_term;

/* sigaction is async-signal-safe: the second signal finds the handlers of before. */
static void on_signal(int sig)
{
	atomic_store(&caught, sig);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
}

int interrupt_catch(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	atomic_store(&caught, 0);
	if (sigaction(SIGINT, &sa, &old_int) != 0 || sigaction(SIGTERM, &sa, &old_term) != 0)
		return gp_error(GP_EIO, "cannot install signal handlers: %s", strerror(errno));
	atomic_store(&installed, 1);
	return 0;
}

void interrupt_release(void)
{
	if (!atomic_exchange(&installed, 0))
		return;
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
}

int interrupt_signal(void)
{
	return atomic_load(&caught);
}
