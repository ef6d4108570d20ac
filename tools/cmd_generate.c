/* cmd_generate — PLACEHOLDER until its owner lands it. */
#include <stdio.h>
#include "tools/cmds.h"
int cmd_generate(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inferd generate: not implemented yet\n");
    return CMD_FAIL;
}
int cmd_score(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "inferd score: not implemented yet\n");
    return CMD_FAIL;
}
