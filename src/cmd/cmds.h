/* One function per subcommand; argv[0] is the subcommand's name. Each returns 0 or a
 * negative error code with the message set; main prints it and exits non-zero. A
 * positive return is an exit status that is not an error (diff's 1: a regression). */
#ifndef GP_CMDS_H
#define GP_CMDS_H

/* What compare trains when --models is not given; the menu offers it too where there
 * is a GPU, so the two cannot drift apart. */
#define COMPARE_DEFAULT_MODELS "simple_cnn,resnet18,mobilenet_v2"

int cmd_info(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_parity(int argc, char **argv);
int cmd_monitor(int argc, char **argv);
int cmd_menu(int argc, char **argv);
int cmd_advise(int argc, char **argv);
int cmd_dataset(int argc, char **argv);
int cmd_loader(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_amp(int argc, char **argv);
int cmd_maxbatch(int argc, char **argv);
int cmd_workers(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_roofline(int argc, char **argv);
int cmd_scale(int argc, char **argv);
int cmd_dist_check(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* advise's recommendation: of trials 1..n-1, the fastest whose kept[i] is set (a fix
 * that paid alone, or the kept fixes together); 0, the baseline, when none is. */
int advise_pick(const double *img_s, const int *kept, int n);

#endif
