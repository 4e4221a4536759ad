/* gpuperf's own launcher (`--nproc N`), as torchrun on one host: N copies of this
 * program, each with torchrun's variables, supervised until all end.
 *
 * Rank 0 keeps the terminal's standard output; the others' goes to /dev/null, so only
 * rank 0 prints progress and results. Every rank's standard error comes through the
 * launcher: lines from rank R > 0 get a "[rank R] " prefix, and error lines are held
 * back, so that a failure ends in one line, the launcher's. When a rank fails (exits
 * non-zero or dies by a signal) the others get a short grace to fail by themselves
 * through the group, then SIGTERM, then SIGKILL; SIGINT and SIGTERM sent to the
 * launcher go to every rank. */
#ifndef GP_CMD_LAUNCH_H
#define GP_CMD_LAUNCH_H

struct launch_opts {
	int master_port; /* 0: a free port of this host */
	double grace_s;  /* 0: 3 s from the first failure to SIGTERM, as much to SIGKILL */
};

/* Run the subcommand argv[0..argc) (argv[0] its name, as main hands it on) as nproc
 * ranks of /proc/self/exe, without the launcher's own options (--nproc N and
 * --master-port P). 0 when every rank succeeds; otherwise an error whose message is
 * "rank R failed: CAUSE", the rank that failed first by itself and its own error line
 * or exit status (GP_EINVAL when that rank refused its options, else GP_EDEVICE). */
int launch_local(int nproc, int argc, char **argv, const struct launch_opts *o);

/* The launcher's options removed from argv in place; the new argc. */
int launch_strip_args(int argc, char **argv);

#endif
