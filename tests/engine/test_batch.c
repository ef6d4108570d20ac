/* test_batch — gate 4: batch invariance of the forward pass.
 *
 * usage: test_batch MODEL.gguf   (in ../shared/models)
 * Three sequences are first run alone (whole prompt in one forward pass, then
 * greedy decode one token at a time) on a 1-thread backend; every row's
 * logits are kept. Then the same token streams run on a 2-thread backend in
 * mixed batches: prompt chunks of different sequences together, prefill mixed
 * with decode, other physical KV blocks, rows in another order. Every row's
 * logits must be bit-identical to the solo run's. graph_kv_copy_block is
 * checked the same way (a sequence continued from copied blocks), and
 * graph_kv_copy_blocks against the blocks it read (ops->kv_read).
 * graph_submit .. graph_wait gives the forward's bits, also on a CPU
 * backend that claims to be async (its ops queued from graph_submit), and a
 * step costs exactly one upload, one download_async and no synchronous
 * download (counted by a wrapper around the CPU's op table).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/graph.h"
#include "engine/model.h"
#include "tests/check.h"


enum { NSEQ = 3, NDEC = 6, MAXLEN = 64, BS = 4, NBLK = 96, MAXT = 64 };
static const int plen[NSEQ] = {13, 5, 29};

static int32_t V;
static int32_t toks[NSEQ][MAXLEN];      /* prompt, then the solo run's greedy tokens */
static float *solo[NSEQ];               /* [MAXLEN][V]: logits of each position */
static int32_t bt_a[NSEQ][MAXLEN / BS]; /* solo block tables */
static int32_t bt_b[NSEQ][MAXLEN / BS]; /* mixed block tables (other blocks) */

struct row {
    int32_t seq, pos;
};

/* One forward over rows (seq, pos) with token toks[seq][pos]; logits of all rows. */
static int run(struct graph *g, int32_t (*bt)[MAXLEN / BS], const struct row *r, int32_t n,
               float *logits)
{
    int32_t tk[MAXT], pos[MAXT], seq[MAXT], lr[MAXT];
    const int32_t *tables[NSEQ] = {bt[0], bt[1], bt[2]};
    for (int32_t i = 0; i < n; i++) {
        tk[i] = toks[r[i].seq][r[i].pos];
        pos[i] = r[i].pos;
        seq[i] = r[i].seq;
        lr[i] = i;
    }
    struct graph_batch b = {n, tk, pos, seq, NSEQ, tables, n, lr, logits, 0};
    return graph_forward(g, &b);
}

static int32_t argmax(const float *l)
{
    int32_t b = 0;
    for (int32_t i = 1; i < V; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

/* A CPU backend whose op table counts the transfers of a step. */
static struct backend_ops count_ops;
static const struct backend_ops *count_base;
static int n_upload, n_download, n_download_async;
static void count_upload(struct backend *be, void *dst, const void *src, size_t bytes)
{
    n_upload++;
    count_base->upload(be, dst, src, bytes);
}
static void count_download(struct backend *be, void *dst, const void *src, size_t bytes)
{
    n_download++;
    count_base->download(be, dst, src, bytes);
}
static void count_download_async(struct backend *be, void *dst, const void *src, size_t bytes)
{
    n_download_async++;
    count_base->download_async(be, dst, src, bytes);
}

static int n_cmp, n_diff;
static void compare(const struct row *r, int32_t n, const float *logits)
{
    for (int32_t i = 0; i < n; i++) {
        n_cmp++;
        if (memcmp(logits + (size_t)i * V, solo[r[i].seq] + (size_t)r[i].pos * V,
                   sizeof(float) * (size_t)V) != 0) {
            fprintf(stderr, "seq %d pos %d: logits differ from the solo run\n", r[i].seq,
                    r[i].pos);
            n_diff++;
        }
    }
}

int main(int argc, char **argv)
{
    const char *shared = getenv("INFERD_SHARED");
    if (argc < 2 || !shared)
        return 77;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/%s", shared, argv[1]);
    struct inf_error err = {0, ""};
    struct backend *be1 = cpu_backend_new(1), *be2 = cpu_backend_new(2);
    struct model *m1, *m2;
    if (model_load(path, be1, &m1, &err) || model_load(path, be2, &m2, &err)) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.msg);
        return 1;
    }
    V = model_hparams(m1)->n_vocab;
    struct graph_params gp = {MAXT, MAXT, NBLK, BS, 0};
    struct graph *g1, *g2;
    CHECK(graph_new(m1, &gp, &g1, &err) == 0);
    CHECK(graph_new(m2, &gp, &g2, &err) == 0);
    float *logits = malloc(sizeof(float) * (size_t)V * MAXT);

    uint32_t x = 12345;
    for (int s = 0; s < NSEQ; s++) {
        toks[s][0] = 1;
        for (int p = 1; p < plen[s]; p++) {
            x = x * 1103515245u + 12345u;
            toks[s][p] = 3 + (int32_t)((x >> 8) % (uint32_t)(V - 3));
        }
        for (int i = 0; i < MAXLEN / BS; i++) {
            bt_a[s][i] = s * (MAXLEN / BS) + i;
            bt_b[s][i] = NBLK - 1 - (i * NSEQ + s); /* interleaved, descending */
        }
        solo[s] = malloc(sizeof(float) * (size_t)V * MAXLEN);
    }

    /* solo: whole prompt at once, then greedy decode */
    for (int s = 0; s < NSEQ; s++) {
        struct row r[MAXT];
        for (int p = 0; p < plen[s]; p++)
            r[p] = (struct row){s, p};
        CHECK(run(g1, bt_a, r, plen[s], logits) == 0);
        memcpy(solo[s], logits, sizeof(float) * (size_t)V * plen[s]);
        for (int d = 0; d < NDEC; d++) {
            int p = plen[s] + d;
            toks[s][p] = argmax(solo[s] + (size_t)(p - 1) * V);
            r[0] = (struct row){s, p};
            CHECK(run(g1, bt_a, r, 1, logits) == 0);
            memcpy(solo[s] + (size_t)p * V, logits, sizeof(float) * (size_t)V);
        }
    }

    /* mixed: a schedule of batches over all three sequences */
    int done[NSEQ] = {0, 0, 0}; /* positions fed so far */
    const int chunk[][NSEQ] = {
        {7, 0, 10}, /* two prompt chunks */
        {6, 5, 10}, /* seq 0 finishes its prompt, seq 1 all at once */
        {1, 1, 9},  /* decode of 0 and 1 + last prompt chunk of 2 */
        {1, 1, 1},  /* all decode */
        {2, 0, 1},  /* two positions of one sequence in a decode-phase batch */
        {1, 4, 2},
        {1, 0, 2},
    };
    for (size_t k = 0; k < sizeof(chunk) / sizeof(chunk[0]); k++) {
        struct row r[MAXT];
        int32_t n = 0;
        /* rows in reverse sequence order: the order within a batch must not matter */
        for (int s = NSEQ - 1; s >= 0; s--)
            for (int i = 0; i < chunk[k][s] && done[s] < plen[s] + NDEC; i++)
                r[n++] = (struct row){s, done[s]++};
        CHECK(run(g2, bt_b, r, n, logits) == 0);
        compare(r, n, logits);
    }
    for (int s = 0; s < NSEQ; s++)
        CHECK(done[s] == plen[s] + NDEC);

    /* copy-on-write: seq 2's blocks copied to fresh ones give the same last rows */
    {
        int32_t bt_c[NSEQ][MAXLEN / BS];
        memcpy(bt_c, bt_b, sizeof(bt_c));
        const int last = plen[2] + NDEC - 1;
        for (int i = 0; i <= last / BS; i++) {
            bt_c[2][i] = i; /* blocks 0.. are unused by the mixed run */
            CHECK(graph_kv_copy_block(g2, bt_b[2][i], bt_c[2][i]) == 0);
        }
        struct row r[1] = {{2, last}};
        CHECK(run(g2, bt_c, r, 1, logits) == 0);
        compare(r, 1, logits);
    }
    CHECK(graph_kv_copy_block(g2, -1, 0) != 0);
    CHECK(graph_kv_copy_block(g2, 0, NBLK) != 0);

    /* graph_kv_copy_blocks: several blocks at once; every layer's K and V
     * of each dst equals its src's, read back through the backend */
    {
        const struct backend_ops *op = be2->ops;
        struct backend_kv *kv = graph_kv(g2);
        const int32_t n_layer = model_hparams(m2)->n_layer;
        const int32_t row = model_hparams(m2)->n_head_kv * model_hparams(m2)->head_dim;
        const size_t bb = (size_t)BS * row * 2; /* F16 */
        const int32_t src[3] = {bt_b[0][0], bt_b[1][1], bt_b[2][3]};
        const int32_t dst[3] = {20, 21, 22}; /* unused by every table above */
        CHECK(graph_kv_copy_blocks(g2, src, dst, 3) == 0);
        char *a = malloc(bb), *av = malloc(bb), *c = malloc(bb), *cv = malloc(bb);
        int same = 0;
        for (int32_t l = 0; l < n_layer; l++)
            for (int i = 0; i < 3; i++) {
                CHECK(op->kv_read(be2, kv, l, (int64_t)src[i] * BS, BS, a, av) == 0);
                CHECK(op->kv_read(be2, kv, l, (int64_t)dst[i] * BS, BS, c, cv) == 0);
                same += memcmp(a, c, bb) == 0 && memcmp(av, cv, bb) == 0;
            }
        CHECK(same == 3 * n_layer);
        free(a);
        free(av);
        free(c);
        free(cv);
        const int32_t s2[2] = {1, 2}, d_dup[2] = {5, 5}, d_src[2] = {2, 6};
        CHECK(graph_kv_copy_blocks(g2, s2, d_dup, 2) == INF_EINVAL);
        CHECK(graph_kv_copy_blocks(g2, s2, d_src, 2) == INF_EINVAL);
        CHECK(graph_kv_copy_blocks(g2, s2, s2, 1) == INF_EINVAL); /* src == dst */
        CHECK(graph_kv_copy_block(g2, 3, 3) == 0);
    }

    /* submit .. wait == forward, bit for bit; the logits in place; nothing
     * else while a step is in flight */
    {
        struct row r[3] = {{0, 0}, {1, 0}, {2, 0}};
        int32_t tk[3] = {toks[0][0], toks[1][0], toks[2][0]}, pos[3] = {0, 0, 0};
        int32_t seq[3] = {0, 1, 2}, lr[3] = {0, 1, 2};
        const int32_t *tables[NSEQ] = {bt_a[0], bt_a[1], bt_a[2]};
        struct graph_batch b = {3, tk, pos, seq, NSEQ, tables, 3, lr, NULL, 0};
        CHECK(graph_wait(g1) == INF_EINVAL); /* nothing in flight */
        CHECK(graph_submit(g1, &b) == 0);
        CHECK(graph_submit(g1, &b) == INF_EBUSY);
        CHECK(graph_kv_copy_block(g1, 0, 1) == INF_EBUSY);
        CHECK(graph_wait(g1) == 0);
        compare(r, 3, graph_logits(g1));
        b.logits = logits;
        CHECK(graph_submit(g1, &b) == 0);
        CHECK(graph_wait(g1) == 0);
        compare(r, 3, logits);
        CHECK(memcmp(logits, graph_logits(g1), sizeof(float) * 3 * (size_t)V) == 0);
    }

    /* one upload per step, the logits in one download_async: on the CPU's
     * op table as is, and with async = 1 (the ops run from graph_submit) */
    for (int async = 0; async < 2; async++) {
        struct backend *be3 = cpu_backend_new(1);
        struct model *m3;
        count_base = be3->ops;
        count_ops = *be3->ops;
        count_ops.upload = count_upload;
        count_ops.download = count_download;
        count_ops.download_async = count_download_async;
        count_ops.async = async;
        be3->ops = &count_ops;
        CHECK(model_load(path, be3, &m3, &err) == 0);
        struct graph *g3;
        CHECK(graph_new(m3, &gp, &g3, &err) == 0);
        for (int s = 0; s < NSEQ; s++) {
            struct row r[MAXT];
            for (int p = 0; p < plen[s] + NDEC; p++)
                r[p] = (struct row){s, p};
            n_upload = n_download = n_download_async = 0;
            CHECK(run(g3, bt_a, r, plen[s] + NDEC, logits) == 0);
            CHECK(n_upload == 1 && n_download == 0 && n_download_async == 1);
            compare(r, plen[s] + NDEC, logits);
        }
        printf("async=%d: one upload and one download_async per step\n", async);
        graph_free(g3);
        model_free(m3);
        be3->ops = count_base; /* destroy through the table it came with */
        backend_free(be3);
    }

    /* bad batches are refused, nothing computed */
    {
        struct row r[1] = {{0, 0}};
        int32_t tk = V, pos = 0, seq = 0, lr = 0;
        const int32_t *tables[NSEQ] = {bt_a[0], bt_a[1], bt_a[2]};
        struct graph_batch b = {1, &tk, &pos, &seq, NSEQ, tables, 1, &lr, logits, 0};
        CHECK(graph_forward(g1, &b) == INF_EINVAL); /* token out of vocab */
        tk = 1;
        pos = -1;
        CHECK(graph_forward(g1, &b) == INF_EINVAL);
        pos = 0;
        seq = NSEQ;
        CHECK(graph_forward(g1, &b) == INF_EINVAL);
        seq = 0;
        lr = 1;
        CHECK(graph_forward(g1, &b) == INF_EINVAL);
        lr = 0;
        b.n_tokens = MAXT + 1;
        CHECK(graph_forward(g1, &b) == INF_EINVAL);
        (void)r;
    }

    printf("%s: %d rows compared, %d differ\n", argv[1], n_cmp, n_diff);
    CHECK(n_cmp > 120 && n_diff == 0);
    for (int s = 0; s < NSEQ; s++)
        free(solo[s]);
    free(logits);
    graph_free(g1);
    graph_free(g2);
    model_free(m1);
    model_free(m2);
    backend_free(be1);
    backend_free(be2);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
