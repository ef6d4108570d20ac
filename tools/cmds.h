/* cmds — the subcommands of the `inferd` binary (daemon/main.c dispatches).
 *
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status:
 *   0 success, 1 runtime failure (bad model file, I/O, engine error),
 *   2 usage error (unknown flag, missing argument).
 * `--help` prints usage to stdout and returns 0.
 */
#ifndef INFERD_CMDS_H
#define INFERD_CMDS_H

#define CMD_OK 0
#define CMD_FAIL 1
#define CMD_USAGE 2

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
