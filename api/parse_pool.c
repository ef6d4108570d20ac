/* parse_pool — POST bodies parsed, validated and answered by worker
 * threads (parse_pool.h says why and where it hooks in). */
#include "api/parse_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "api/internal.h"
#include "engine/log.h"

struct parse_job {
    struct parse_job *next;
    struct http_req *r; /* referenced while the job is out */
    int route;
    const char *body;   /* r->body, which nobody touches while the job is out */
    size_t len;
    int done;           /* the verdict is in (loop side) */
    int detached;       /* the request ended meanwhile (loop side) */
    struct api_verdict v;
};

/* ---- the workers' JSON arena ------------------------------------------
 *
 * A worker builds a JSON tree of up to a few million nodes per body. With
 * glibc's malloc each node takes the worker's malloc arena lock and the
 * heap grows by mprotect (the process's mmap lock, for writing); the worker
 * runs at nice PARSE_POOL_NICE, and preempted while it held either it made
 * the loop thread wait: measured in test_stall (per MHD_run: wall time
 * minus thread CPU time minus run-queue wait), the loop sat blocked 31-39
 * ms in a third of the runs, a stream's longest gaps, and lowering the
 * workers' priority made it worse. So jansson allocates from one bump arena
 * per worker while that worker parses: reserved once, reused for every
 * body, never shared, reset after each job (the loop's blocked time is now
 * 0.1-0.2 ms at most). Nothing from an arena outlives its job: routes_judge
 * copies what it keeps into malloc'd memory, and the tree is freed before
 * the arena is reset. Elsewhere (the loop thread, a worker between jobs, an
 * arena that is full) jansson uses malloc. */

#define PP_ARENA_BYTES ((size_t)1 << 30) /* address space only: pages come on use */
#define PP_ARENA_KEEP ((size_t)32 << 20)  /* resident after a job; the rest is given back */

struct pp_arena {
    char *base;
    size_t used, peak;
};

static _Thread_local struct pp_arena *pp_cur; /* set while this thread parses */

static void *pp_json_malloc(size_t n)
{
    struct pp_arena *ar = pp_cur;
    if (ar) {
        size_t at = (ar->used + 15) & ~(size_t)15;
        if (n <= PP_ARENA_BYTES - at) {
            ar->used = at + n;
            return ar->base + at;
        }
    }
    return malloc(n);
}

static void pp_json_free(void *p)
{
    struct pp_arena *ar = pp_cur;
    if (ar && (char *)p >= ar->base && (char *)p < ar->base + PP_ARENA_BYTES)
        return; /* the whole arena is reset after the job */
    free(p);
}

static int pp_arena_init(struct pp_arena *ar)
{
    ar->used = ar->peak = 0;
    ar->base = mmap(NULL, PP_ARENA_BYTES, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ar->base == MAP_FAILED) {
        ar->base = NULL;
        return INF_ENOMEM;
    }
    return 0;
}

static void pp_arena_reset(struct pp_arena *ar)
{
    if (ar->used > ar->peak)
        ar->peak = ar->used;
    /* a huge body's pages go back; the usual working set stays resident */
    if (ar->peak > PP_ARENA_KEEP) {
        madvise(ar->base + PP_ARENA_KEEP, ar->peak - PP_ARENA_KEEP, MADV_DONTNEED);
        ar->peak = PP_ARENA_KEEP;
    }
    ar->used = 0;
}

struct parse_pool {
    struct api *a;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_rwlock_t ctx_lock; /* readers: workers validating; writer: SIGHUP */
    struct parse_job *in_head, *in_tail, *out_head, *out_tail;
    int stopping;
    int n_threads;
    pthread_t th[PARSE_POOL_THREADS];
    struct pp_arena arena[PARSE_POOL_THREADS];
    uv_async_t async;
};

struct pp_worker_arg {
    struct parse_pool *p;
    int i;
};

static void pp_push(struct parse_job **head, struct parse_job **tail, struct parse_job *j)
{
    j->next = NULL;
    if (*tail)
        (*tail)->next = j;
    else
        *head = j;
    *tail = j;
}

static void pp_error(struct parse_job *j, int status, const char *code, const char *msg)
{
    memset(&j->v, 0, sizeof(j->v));
    j->v.err.status = status;
    snprintf(j->v.err.code, sizeof(j->v.err.code), "%s", code ? code : "");
    snprintf(j->v.err.message, sizeof(j->v.err.message), "%s", msg);
}

/* What routes_dispatch does inline for a small body. */
static void pp_run(struct parse_pool *p, struct pp_arena *ar, struct parse_job *j)
{
    json_t *body;
    char msg[256];
    pp_cur = ar->base ? ar : NULL;
    if (api_json_parse_object(j->body, j->len, &body, msg, sizeof(msg))) {
        pp_error(j, 400, NULL, msg);
    } else {
        pthread_rwlock_rdlock(&p->ctx_lock); /* SIGHUP waits for the judging only */
        routes_judge(p->a, j->route, body, &j->v);
        pthread_rwlock_unlock(&p->ctx_lock);
        json_decref(body); /* a million-node tree: tens of ms, part of the work */
    }
    pp_cur = NULL;
    if (ar->base)
        pp_arena_reset(ar);
}

static void *pp_worker(void *arg)
{
    struct parse_pool *p = ((struct pp_worker_arg *)arg)->p;
    struct pp_arena *ar = &p->arena[((struct pp_worker_arg *)arg)->i];
    free(arg);
    /* Linux: nice is per thread */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PARSE_POOL_NICE) != 0)
        log_debug("parse pool: setpriority failed; workers at normal priority");
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && !p->in_head)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping)
            break; /* what is left is answered by parse_pool_free */
        struct parse_job *j = p->in_head;
        p->in_head = j->next;
        if (!p->in_head)
            p->in_tail = NULL;
        pthread_mutex_unlock(&p->mu);
        pp_run(p, ar, j);
        pthread_mutex_lock(&p->mu);
        pp_push(&p->out_head, &p->out_tail, j);
        uv_async_send(&p->async); /* any thread may call it */
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pp_job_free(struct parse_job *j)
{
    routes_verdict_release(&j->v);
    free(j);
}

/* The request's ops while its body is out (and until its verdict is
 * answered). */
static enum MHD_Result pp_resumed(struct http_req *r)
{
    struct parse_job *j = r->ctx;
    struct api *a = r->api;
    if (!j->done) { /* not reached: r stays suspended until then */
        http_suspend(r);
        return MHD_YES;
    }
    r->ops = NULL;
    r->ctx = NULL;
    enum MHD_Result ok;
    if (a->state != API_READY) /* as routes_dispatch answers then */
        ok = http_respond_error(r, 503, NULL, NULL, "shutting_down", "the server is shutting down");
    else
        ok = routes_answer(r, &j->v); /* releases v */
    pp_job_free(j);
    http_req_unref(r);
    return ok;
}

static void pp_detach(struct http_req *r)
{
    /* the connection died with the body out, or after the verdict came
     * back but before MHD called again (a client that sent its request and
     * closed): the verdict is dropped */
    struct parse_job *j = r->ctx;
    log_info("request id=%llu client=%s method=%s path=%s status=0 aborted=1 (while parsing)",
             (unsigned long long)r->id, r->client[0] ? r->client : "-", r->method, r->path);
    r->ops = NULL;
    r->ctx = NULL;
    if (j->done) { /* delivered already: nobody else will free it */
        pp_job_free(j);
        http_req_unref(r);
        return;
    }
    j->detached = 1; /* the worker still has it: pp_deliver frees it */
}

static const struct http_req_ops pp_ops = {pp_resumed, pp_detach};

static void pp_deliver(struct parse_job *j)
{
    struct http_req *r = j->r;
    j->done = 1;
    if (!j->detached && r->conn) {
        http_resume(r); /* MHD calls again: pp_resumed */
        return;
    }
    if (!j->detached) { /* over without a detach call: nobody else holds j */
        r->ops = NULL;
        r->ctx = NULL;
    }
    pp_job_free(j);
    http_req_unref(r);
}

static void pp_async_cb(uv_async_t *h)
{
    struct parse_pool *p = h->data;
    pthread_mutex_lock(&p->mu);
    struct parse_job *j = p->out_head;
    p->out_head = p->out_tail = NULL;
    pthread_mutex_unlock(&p->mu);
    while (j) {
        struct parse_job *next = j->next;
        pp_deliver(j);
        j = next;
    }
    http_run(p->a);
}

static void pp_closed(uv_handle_t *h)
{
    struct parse_pool *p = h->data; /* the api may be gone: only p here */
    for (int i = 0; i < PARSE_POOL_THREADS; i++)
        if (p->arena[i].base)
            munmap(p->arena[i].base, PP_ARENA_BYTES);
    pthread_rwlock_destroy(&p->ctx_lock);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static struct parse_pool *pp_new(struct api *a)
{
    struct parse_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->a = a;
    if (pthread_mutex_init(&p->mu, NULL)) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cv, NULL)) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    /* writer first: with two workers reading back to back, a reader-first
     * lock (glibc's default) could keep SIGHUP waiting on the loop for
     * ever; this way it waits for the parses in progress only */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rwrc = pthread_rwlock_init(&p->ctx_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    if (rwrc) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    if (uv_async_init(a->loop, &p->async, pp_async_cb)) {
        pthread_rwlock_destroy(&p->ctx_lock);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    p->async.data = p;
    /* jansson's allocator, once for the process: malloc and free unless
     * the calling thread is a worker parsing (pp_cur). Safe to install now:
     * no worker runs yet, and every tree made before came from malloc. */
    json_set_alloc_funcs(pp_json_malloc, pp_json_free);
    for (int i = 0; i < PARSE_POOL_THREADS; i++) {
        struct pp_worker_arg *wa = malloc(sizeof(*wa));
        if (!wa)
            break;
        wa->p = p;
        wa->i = p->n_threads;
        if (pp_arena_init(&p->arena[wa->i]))
            log_warn("parse pool: no arena for worker %d (mmap failed); it parses with malloc",
                     wa->i);
        if (pthread_create(&p->th[wa->i], NULL, pp_worker, wa)) {
            free(wa);
            break;
        }
        p->n_threads++;
    }
    if (p->n_threads == 0) {
        log_warn("parse pool: no worker thread could start; parsing on the loop thread");
        uv_close((uv_handle_t *)&p->async, pp_closed);
        return NULL;
    }
    log_debug("parse pool: %d worker threads at nice %d", p->n_threads, PARSE_POOL_NICE);
    return p;
}

int parse_pool_submit(struct api *a, struct http_req *r)
{
    if (!a->rctx || r->body.len < PARSE_POOL_MIN_BYTES)
        return 1;
    if (!a->pool && !(a->pool = pp_new(a)))
        return 1;
    struct parse_pool *p = a->pool;
    struct parse_job *j = calloc(1, sizeof(*j));
    if (!j)
        return 1;
    j->r = r;
    j->route = r->route;
    j->body = r->body.p ? r->body.p : "";
    j->len = r->body.len;
    r->refs++;
    r->ops = &pp_ops;
    r->ctx = j;
    http_suspend(r);
    pthread_mutex_lock(&p->mu);
    pp_push(&p->in_head, &p->in_tail, j);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void parse_pool_set_limits(struct api *a)
{
    if (!a->rctx)
        return;
    if (a->pool)
        pthread_rwlock_wrlock(&a->pool->ctx_lock);
    api_request_ctx_set_limits(a->rctx, &a->cfg);
    if (a->pool)
        pthread_rwlock_unlock(&a->pool->ctx_lock);
}

void parse_pool_free(struct api *a)
{
    struct parse_pool *p = a->pool;
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->th[i], NULL);
    a->pool = NULL;
    /* no worker left: the queues are ours; unparsed bodies get a 503 */
    struct parse_job *j = p->in_head;
    p->in_head = p->in_tail = NULL;
    while (j) {
        struct parse_job *next = j->next;
        pp_error(j, 503, "shutting_down", "the server is shutting down");
        pp_push(&p->out_head, &p->out_tail, j);
        j = next;
    }
    j = p->out_head;
    p->out_head = p->out_tail = NULL;
    while (j) {
        struct parse_job *next = j->next;
        pp_deliver(j);
        j = next;
    }
    uv_close((uv_handle_t *)&p->async, pp_closed);
}
