/* cmd_tokenize — PLACEHOLDER until its owner lands it. */
#include <stdio.h>
#include "tools/cmds.h"
int cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inferd tokenize: not implemented yet\n");
    return CMD_FAIL;
}
