/* cmd_info — PLACEHOLDER until its owner lands it. */
#include <stdio.h>
#include "tools/cmds.h"
int cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inferd info: not implemented yet\n");
    return CMD_FAIL;
}
