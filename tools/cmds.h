/* cmds — the subcommands of the `inferd` binary (daemon/main.c dispatches).
 *
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status:
 *   0 success, 1 runtime failure (bad model file, I/O, engine error),
 *   2 usage error (unknown flag, missing argument),
 *   78 (serve) a configuration that cannot work (CMD_CONFIG).
 * `--help` prints usage to stdout and returns 0.
 */
#ifndef INFERD_CMDS_H
#define INFERD_CMDS_H

#define CMD_OK 0
#define CMD_FAIL 1
#define CMD_USAGE 2
/* inferd serve: the configuration cannot work on this machine (the model
 * does not fit in the device's memory, a KV cache below n_ctx): a restart
 * would fail the same way, so the systemd units list it in
 * RestartPreventExitStatus= (sysexits.h's EX_CONFIG). */
#define CMD_CONFIG 78

int cmd_serve(int argc, char **argv);    /* daemon/serve.c */
int cmd_info(int argc, char **argv);     /* tools/cmd_info.c */
int cmd_tokenize(int argc, char **argv); /* tools/cmd_tokenize.c */
int cmd_mkmodel(int argc, char **argv);  /* tools/mkmodel.c */
int cmd_generate(int argc, char **argv); /* tools/cmd_generate.c */
int cmd_score(int argc, char **argv);    /* tools/cmd_generate.c */
int cmd_bench(int argc, char **argv);    /* tools/cmd_bench.c */
int cmd_bench_op(int argc, char **argv); /* tools/cmd_bench_op.c: bench --op */
int cmd_bench_serve(int argc, char **argv); /* tools/cmd_bench_serve.c */

#endif
