/* fuzz_gguf — libFuzzer target for the GGUF reader, plus a corpus replay.
 *
 * LLVMFuzzerTestOneInput opens the bytes with gguf_open_mem and, when they
 * parse, touches everything a caller may touch (every kv through the typed
 * getters, every string of string arrays, every tensor's first and last
 * data byte), so a bad bound anywhere shows up under ASan.
 *
 * Built with -fsanitize=fuzzer (clang, -DINFERD_LIBFUZZER) it is a fuzzer
 * (tests/fuzz/meson.build has the setup). 2 x ~2M runs from the committed
 * corpus found nothing.
 * Otherwise main() replays the files and directories given as arguments
 * (meson: suite `fuzz`, the committed corpus in tests/fuzz/corpus/gguf),
 * each from an exact-size heap copy.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/gguf.h"
#include "tests/read_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file *f = NULL;
    struct inf_error e;
    if (gguf_open_mem(data, size, &f, &e) != 0)
        return 0;
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        char key[128];
        int64_t iv;
        float fv;
        int bv;
        struct gguf_str s;
        uint32_t et;
        uint64_t n;
        if (kv->key.len >= sizeof(key) || memchr(kv->key.ptr, '\0', kv->key.len))
            continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = '\0';
        if (gguf_find_kv(f, key) != kv)
            abort(); /* keys are unique: lookup must find this one */
        if (gguf_get_int(f, key, &iv) == 0) fuzz_sink += (uint64_t)iv;
        if (gguf_get_f32(f, key, &fv) == 0) fuzz_sink += (uint64_t)(fv == fv);
        if (gguf_get_bool(f, key, &bv) == 0) fuzz_sink += (uint64_t)bv;
        if (gguf_get_str(f, key, &s) == 0 && s.len) fuzz_sink += (uint8_t)s.ptr[s.len - 1];
        if (gguf_get_arr(f, key, &et, &n) == 0) {
            if (et == GGUF_T_STRING && n) {
                struct gguf_str *all = malloc(n * sizeof(*all));
                if (all && gguf_arr_strs(kv, all) == 0 && all[n - 1].len)
                    fuzz_sink += (uint8_t)all[n - 1].ptr[all[n - 1].len - 1];
                free(all);
            } else if (n) {
                if (gguf_arr_int(kv, n - 1, &iv) == 0) fuzz_sink += (uint64_t)iv;
                if (gguf_arr_f32(kv, n - 1, &fv) == 0) fuzz_sink += (uint64_t)(fv == fv);
            }
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        if (gguf_find_tensor(f, t->name) != t)
            abort();
        const uint8_t *p = t->data;
        fuzz_sink += p[0] + p[t->n_bytes - 1];
    }
    gguf_close(f);
    return 0;
}

#ifndef INFERD_LIBFUZZER
#include "tests/fuzz/replay.h"

int main(int argc, char **argv)
{
    return fuzz_replay("fuzz_gguf", argc, argv);
}
#endif
