/* serve — PLACEHOLDER until the daemon lands. */
#include <stdio.h>
#include "tools/cmds.h"
int cmd_serve(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inferd serve: not implemented yet\n");
    return CMD_FAIL;
}
