/* test_fuse — model.c's use of ops->weight_fuse, without a GPU.
 *
 * usage: test_fuse MODEL.gguf   (in $INFERD_SHARED/models)
 * The CPU backend has no weight_fuse. A wrapper of its op table ("fuse
 * backend") gets one: weight_register copies each tensor to its own heap
 * block (as a device backend copies to device memory), weight_fuse moves
 * n of them into one block in order, weight_release frees a group with
 * its last member; every block is counted. Checked:
 *  - each layer's Q/K/V (all three when their types match, else the pair
 *    of neighbours that matches) and gate/up are fused, adjacent in order;
 *  - logits of a prompt through the fused model are bit-identical to the
 *    plain CPU backend's (the CPU reads the weights through w->data);
 *  - model_free releases everything exactly once (live blocks back to 0;
 *    the ASan build of the suite catches a double free);
 *  - INFERD_NO_FUSE=1 fuses nothing; a backend that declines (INF_ENOMEM)
 *    leaves the model loading unfused; one that fails (INF_EDEVICE) fails
 *    the load, which cleans up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/graph.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "tests/check.h"

/* ---- the fuse backend ---------------------------------------------------- */

struct backend_wgroup { /* this test's definition of the backend's group */
    void *data;
    int refs;
};

static struct backend_ops fuse_ops;
static const struct backend_ops *base;
static int live;      /* heap blocks held for weights and groups */
static int fuse_fail; /* nonzero: weight_fuse answers this, touching nothing */
static int n_fused;   /* weight_fuse calls that fused */

static int fb_register(struct backend *be, struct backend_weight *w)
{
    int rc = base->weight_register(be, w);
    if (rc)
        return rc;
    const size_t bytes = w->row_bytes * (size_t)w->ne1;
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        return INF_ENOMEM;
    memcpy(p, w->host, bytes);
    w->data = p;
    live++;
    return 0;
}

static void fb_release(struct backend *be, struct backend_weight *w)
{
    (void)be;
    if (w->group) {
        if (--w->group->refs == 0) {
            free(w->group->data);
            free(w->group);
            live--;
        }
    } else if (w->data) {
        free(w->data);
        live--;
    }
    w->data = NULL;
    w->group = NULL;
}

static int fb_fuse(struct backend *be, struct backend_weight **w, int n)
{
    (void)be;
    if (fuse_fail)
        return fuse_fail;
    if (n < 2)
        return INF_EINVAL;
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (!w[i]->data || w[i]->group || w[i]->type != w[0]->type || w[i]->ne0 != w[0]->ne0 ||
            w[i]->row_bytes != w[0]->row_bytes)
            return INF_EINVAL;
        bytes += w[i]->row_bytes * (size_t)w[i]->ne1;
    }
    struct backend_wgroup *g = malloc(sizeof(*g));
    char *p = malloc(bytes);
    if (!g || !p) {
        free(g);
        free(p);
        return INF_ENOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const size_t b = w[i]->row_bytes * (size_t)w[i]->ne1;
        memcpy(p + off, w[i]->data, b);
        free(w[i]->data);
        live--;
        w[i]->data = p + off;
        w[i]->group = g;
        off += b;
    }
    g->data = p;
    g->refs = n;
    live++;
    n_fused++;
    return 0;
}

static struct backend *fuse_backend_new(void)
{
    struct backend *be = cpu_backend_new(2);
    if (!be)
        return NULL;
    base = be->ops;
    fuse_ops = *base;
    fuse_ops.weight_register = fb_register;
    fuse_ops.weight_release = fb_release;
    fuse_ops.weight_fuse = fb_fuse;
    be->ops = &fuse_ops;
    return be;
}

/* ---- checks -------------------------------------------------------------- */

static int adjacent(const struct backend_weight *a, const struct backend_weight *b)
{
    return a->group && a->group == b->group &&
           (const char *)b->data == (const char *)a->data + (size_t)a->ne1 * a->row_bytes;
}

/* backend_weight.fuse_next, the model's hint at registration: set on
 * exactly the Q/K/V and gate/up members the layer's rule fuses (by their
 * types: all three of Q/K/V, else the pair of neighbours that match;
 * gate/up when they match) where the backend fuses (offered = 1; whether
 * or not a fusion then succeeds), on nothing else, and on nothing at all
 * where nothing is offered (offered = 0). Where the fusion succeeded
 * (fused = 1) the hint is also exactly the weights now in a group. */
static void check_hints(const struct model *m, int offered, int fused)
{
    const struct model_weights *W = model_weights(m);
    for (int32_t il = 0; il < W->n_layer; il++) {
        const struct model_layer *L = &W->layers[il];
        const int qk = L->wq->type == L->wk->type, kv = L->wk->type == L->wv->type;
        const int gu = L->ffn_gate->type == L->ffn_up->type;
        const int want[5] = {offered && qk, offered && (qk || kv), offered && kv, offered && gu, offered && gu};
        const struct backend_weight *w[5] = {L->wq, L->wk, L->wv, L->ffn_gate, L->ffn_up};
        for (int i = 0; i < 5; i++) {
            CHECK(w[i]->fuse_next == want[i]);
            if (fused)
                CHECK(!w[i]->group == !w[i]->fuse_next);
        }
        CHECK(!L->wo->fuse_next && !L->ffn_down->fuse_next && !L->attn_norm->fuse_next && !L->ffn_norm->fuse_next);
    }
    CHECK(!W->tok_embd->fuse_next && !W->output->fuse_next);
}

/* Expected fusion of every layer (the rule in model.c) holds; returns the
 * number of groups seen. */
static int check_layers(const struct model *m, int want_fused)
{
    const struct model_weights *W = model_weights(m);
    int groups = 0;
    for (int32_t il = 0; il < W->n_layer; il++) {
        const struct model_layer *L = &W->layers[il];
        const int qk = L->wq->type == L->wk->type, kv = L->wk->type == L->wv->type;
        if (!want_fused) {
            CHECK(!L->wq->group && !L->wk->group && !L->wv->group && !L->ffn_gate->group &&
                  !L->ffn_up->group);
            continue;
        }
        if (qk && kv) {
            CHECK(adjacent(L->wq, L->wk) && adjacent(L->wk, L->wv));
            groups++;
        } else if (kv) {
            CHECK(!L->wq->group && adjacent(L->wk, L->wv));
            groups++;
        } else if (qk) {
            CHECK(adjacent(L->wq, L->wk) && !L->wv->group);
            groups++;
        } else {
            CHECK(!L->wq->group && !L->wk->group && !L->wv->group);
        }
        if (L->ffn_gate->type == L->ffn_up->type) {
            CHECK(adjacent(L->ffn_gate, L->ffn_up));
            groups++;
        }
        /* nothing else is fused */
        CHECK(!L->wo->group && !L->ffn_down->group && !L->attn_norm->group);
    }
    return groups;
}

enum { NTOK = 9, BS = 16, NBLK = 4 };

/* The logits of every row of a fixed prompt; malloc'd [NTOK][n_vocab]. */
static float *prompt_logits(struct model *m)
{
    const int32_t V = model_hparams(m)->n_vocab;
    struct inf_error err = {0, ""};
    struct graph_params gp = {NTOK, NTOK, NBLK, BS, 0};
    struct graph *g = NULL;
    CHECK(graph_new(m, &gp, &g, &err) == 0);
    if (!g)
        return NULL;
    int32_t tk[NTOK], pos[NTOK], seq[NTOK], lr[NTOK], bt[NBLK] = {0, 1, 2, 3};
    const int32_t *tables[1] = {bt};
    for (int i = 0; i < NTOK; i++) {
        tk[i] = 1 + (int32_t)((i * 7919u) % (uint32_t)(V - 1));
        pos[i] = i;
        seq[i] = 0;
        lr[i] = i;
    }
    float *logits = malloc(sizeof(float) * (size_t)V * NTOK);
    struct graph_batch b = {NTOK, tk, pos, seq, 1, tables, NTOK, lr, logits, 0};
    CHECK(logits && graph_forward(g, &b) == 0);
    graph_free(g);
    return logits;
}

int main(int argc, char **argv)
{
    const char *shared = getenv("INFERD_SHARED");
    if (argc < 2 || !shared)
        return 77;
    char path[1024];
    snprintf(path, sizeof(path), "%s/models/%s", shared, argv[1]);
    struct inf_error err = {0, ""};
    unsetenv("INFERD_NO_FUSE");

    /* the oracle: the plain CPU backend (no weight_fuse: nothing moves) */
    struct backend *cpu = cpu_backend_new(2);
    struct model *m = NULL;
    CHECK(cpu && cpu->ops->weight_fuse == NULL);
    if (model_load(path, cpu, &m, &err)) {
        fprintf(stderr, "cannot load %s: %s\n", path, err.msg);
        return 1;
    }
    CHECK(check_layers(m, 0) == 0);
    check_hints(m, 0, 0);
    const int32_t V = model_hparams(m)->n_vocab;
    float *want = prompt_logits(m);
    model_free(m);

    struct backend *fb = fuse_backend_new();
    CHECK(fb != NULL);
    if (!fb || !want)
        return 1;

    /* fused */
    int fusable = 0;
    CHECK(model_load(path, fb, &m, &err) == 0);
    if (m) {
        const int groups = check_layers(m, 1);
        check_hints(m, 1, 1);
        printf("fused: %d groups over %d layers (%d fuse calls)\n", groups,
               model_weights(m)->n_layer, n_fused);
        CHECK(groups == n_fused); /* 0 for tiny-llama-mixed: no two neighbours share a type */
        fusable = groups > 0;
        float *got = prompt_logits(m);
        const int same = got && memcmp(got, want, sizeof(float) * (size_t)V * NTOK) == 0;
        printf("logits of %d rows fused vs plain cpu: %s\n", NTOK, same ? "identical" : "DIFFER");
        CHECK(same);
        free(got);
        model_free(m);
    }
    CHECK(live == 0);

    /* INFERD_NO_FUSE=1 */
    setenv("INFERD_NO_FUSE", "1", 1);
    n_fused = 0;
    CHECK(model_load(path, fb, &m, &err) == 0);
    if (m) {
        CHECK(check_layers(m, 0) == 0 && n_fused == 0);
        check_hints(m, 0, 0);
        model_free(m);
    }
    unsetenv("INFERD_NO_FUSE");
    CHECK(live == 0);
    printf("INFERD_NO_FUSE=1: nothing fused\n");

    /* declined: loads unfused, same logits */
    fuse_fail = INF_ENOMEM;
    CHECK(model_load(path, fb, &m, &err) == 0);
    if (m) {
        CHECK(check_layers(m, 0) == 0);
        check_hints(m, 1, 0); /* offered, declined: the hint stays (nothing may depend on it) */
        float *got = prompt_logits(m);
        CHECK(got && memcmp(got, want, sizeof(float) * (size_t)V * NTOK) == 0);
        free(got);
        model_free(m);
    }
    CHECK(live == 0);
    printf("weight_fuse declining (out of memory): loaded unfused\n");

    /* failed: the load fails, naming the fuse, and cleans up */
    if (fusable) {
        fuse_fail = INF_EDEVICE;
        const int rc = model_load(path, fb, &m, &err);
        CHECK(rc == INF_EDEVICE && m == NULL && strstr(err.msg, "fuse"));
        printf("weight_fuse failing (device): refused: %s\n", err.msg);
        CHECK(live == 0);
        fuse_fail = 0;
    }

    free(want);
    backend_free(fb);
    backend_free(cpu);
    return fails ? 1 : 0;
}
