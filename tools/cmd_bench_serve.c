/* cmd_bench_serve — PLACEHOLDER until its owner lands it. */
#include <stdio.h>
#include "tools/cmds.h"
int cmd_bench_serve(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inferd bench_serve: not implemented yet\n");
    return CMD_FAIL;
}
