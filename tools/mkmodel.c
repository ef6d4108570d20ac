/* mkmodel — PLACEHOLDER until its owner lands it. */
#include <stdio.h>
#include "tools/cmds.h"
int cmd_mkmodel(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inferd mkmodel: not implemented yet\n");
    return CMD_FAIL;
}
