/* main — argv[1] picks the subcommand; everything else lives in its module.
 * `inferd serve` is the daemon; the others are tools that tests and users use.
 */
#include <stdio.h>
#include <string.h>

#include "engine/cuda/cuda.h"
#include "tools/cmds.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} main_cmds[] = {
    {"serve", cmd_serve, "run the daemon (OpenAI-style HTTP API)"},
    {"info", cmd_info, "describe a GGUF model file"},
    {"tokenize", cmd_tokenize, "text on stdin -> token ids on stdout"},
    {"generate", cmd_generate, "complete a prompt on the CPU engine"},
    {"score", cmd_score, "teacher-forced top-N logprobs of a token sequence (JSON)"},
    {"mkmodel", cmd_mkmodel, "write a random-weight GGUF in a real model's shape"},
    {"bench", cmd_bench, "prefill/decode throughput of the CPU engine (pp/tg)"},
    {"bench-serve", cmd_bench_serve, "aggregate tokens/s of the scheduler vs concurrency"},
};

static void main_usage(FILE *out)
{
    fprintf(out, "usage: inferd <command> [options]   (inferd <command> --help for more)\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof(main_cmds) / sizeof(main_cmds[0]); i++)
        fprintf(out, "  %-10s %s\n", main_cmds[i].name, main_cmds[i].help);
    fprintf(out, "\nexit status: 0 success, 1 failure (bad model, I/O, engine), 2 usage error,\n"
                 "78 serve: the configuration cannot work (the model does not fit the GPU)\n"
                 "CUDA backend: %s\n",
            cuda_compiled() ? "built in" : "not built (CPU only)");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        main_usage(stderr);
        return CMD_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        main_usage(stdout);
        return CMD_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("inferd %s\n", INFERD_VERSION);
        return CMD_OK;
    }
    for (size_t i = 0; i < sizeof(main_cmds) / sizeof(main_cmds[0]); i++)
        if (!strcmp(argv[1], main_cmds[i].name))
            return main_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "inferd: unknown command '%s'\n", argv[1]);
    main_usage(stderr);
    return CMD_USAGE;
}
