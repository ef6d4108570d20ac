/* cmd_bench — PLACEHOLDER until its owner lands it. */
#include <stdio.h>
#include "tools/cmds.h"
int cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inferd bench: not implemented yet\n");
    return CMD_FAIL;
}
