/* graph — the batched forward pass, written once over the backend op table.
 *
 * One step runs any mix of sequences and positions: the prompt tokens of many
 * requests and one decode token of each running sequence go through every
 * weight matrix as one matrix product. K/V live in a paged cache that the
 * graph allocates from the backend (ops->kv_alloc; the backend owns its
 * memory and layout): a token at position p of a sequence whose block table
 * is bt is stored at slot bt[p / block_size] * block_size + p % block_size;
 * attention for that token reads positions 0..p of the same sequence through
 * the same table. The cache has one block more than n_blocks, a throw-away
 * block that unused block-table entries point at and that no result reads.
 * Block bookkeeping (which blocks are free) is engine/kv's job.
 *
 * A step costs one upload: graph_submit packs everything the step needs in
 * backend memory (token ids, positions, sequence ids, slots, block tables
 * at a fixed stride, logits rows, per-sequence KV lengths and rows) into one
 * descriptor in host memory the backend can copy from (pinned on CUDA) and
 * uploads it at once; host-side maxima (rows, longest KV) size the kernels
 * without reading device memory. graph_submit then queues the whole launch
 * sequence and the download of the logits into host memory the graph owns
 * (skipped for a batch with logits_on_device: the scheduler then samples
 * from graph_logits_device with ops->sample); graph_wait waits for it. Between the two the caller's host work overlaps
 * the device (a synchronous backend, the CPU, computes in graph_wait so that
 * work still comes first). graph_forward is submit + wait.
 *
 * Batch invariance: the logits of a row do not depend on what else is in the
 * batch (same per-row arithmetic at every batch size).
 * Steps allocate nothing. Thread: the engine thread only.
 */
#ifndef INFERD_GRAPH_H
#define INFERD_GRAPH_H

#include <stdint.h>

#include "err.h"

struct model;

struct graph_params {
    int32_t max_tokens;  /* most tokens in one graph_forward (prefill chunk + decodes) */
    int32_t max_logits;  /* most rows whose logits one call may ask for */
    int32_t n_blocks;    /* KV cache size in blocks */
    int32_t block_size;  /* tokens per block */
    /* 0: in the last layer only the rows whose logits are wanted go on past
     * the K/V store. 1: attention and its output projection run for every
     * row first and the rows are picked after, as llama.cpp orders its
     * graph: the same results unless the backend's arithmetic depends on
     * the batch (cpu_backend_set_numerics), and then llama.cpp's. */
    int32_t late_out_rows;
};

struct graph_batch {
    int32_t n_tokens;
    const int32_t *tokens;              /* [n_tokens] token ids */
    const int32_t *pos;                 /* [n_tokens] position within its sequence */
    const int32_t *seq;                 /* [n_tokens] index into block_tables */
    int32_t n_seqs;
    const int32_t *const *block_tables; /* [n_seqs] physical block ids of each sequence */
    int32_t n_logits;
    const int32_t *logit_rows;          /* [n_logits] batch rows whose logits are wanted */
    float *logits; /* out: [n_logits][n_vocab], host memory, filled by graph_wait; or NULL
                    * (read them in place with graph_logits) */
    /* 1: every logits row is read on the backend (ops->sample on
     * graph_logits_device): the download into host memory is skipped, so
     * graph_logits is not written by this step; logits must be NULL.
     * 0 (what a zero-initialized batch says): the logits come down. */
    int32_t logits_on_device;
};

struct graph;

int graph_new(struct model *m, const struct graph_params *p, struct graph **out,
              struct inf_error *err);
void graph_free(struct graph *g); /* accepts NULL */
/* The backend memory graph_new(m, p) will allocate: the KV cache and the
 * activations (the backend's own scratch from ops->reserve comes on top).
 * For the daemon's "does not fit" check before anything is allocated;
 * graph_new asserts that it allocates exactly this much. p as checked by
 * graph_new (0 on bad parameters). */
void graph_memory(const struct model *m, const struct graph_params *p, size_t *kv_bytes,
                  size_t *act_bytes);

/* Queue the step: check the batch, pack and upload its descriptor, queue
 * every op and the logits download. The batch's arrays are read before it
 * returns (the caller may reuse them at once). Returns 0 (a graph_wait must
 * follow), INF_EINVAL when the batch breaks the limits given at graph_new,
 * or INF_EBUSY when a step is already in flight (nothing is queued then).
 * Between graph_submit and graph_wait no other graph call is allowed
 * (graph_kv_copy_block* answer INF_EBUSY). */
int graph_submit(struct graph *g, const struct graph_batch *b);
/* Wait for the step in flight. Returns 0 (the logits are in graph_logits,
 * and copied to the batch's logits when it gave a buffer), INF_ENOMEM when
 * the backend could not get memory (recoverable: the daemon answers 503),
 * INF_EDEVICE when the device failed, INF_EINVAL when nothing is in flight.
 * A failure reported here may come from anything queued since the last
 * wait (a block copy included). */
int graph_wait(struct graph *g);
/* The logits of the last completed step: [n_logits][n_vocab] in host memory
 * owned by the graph, valid until the next graph_submit. The caller may
 * write them (scratch) until then. */
float *graph_logits(struct graph *g);
/* The same logits in backend memory (what ops->sample reads): [n_logits]
 * [n_vocab], written by the step in flight, complete after graph_wait and
 * valid until the next graph_submit. Filled whether or not the step had
 * logits_on_device. */
const float *graph_logits_device(struct graph *g);
/* graph_submit + graph_wait: the same codes. */
int graph_forward(struct graph *g, const struct graph_batch *b);

/* Copy the K/V of physical blocks (every layer) to others: copy-on-write for
 * n > 1 choices sharing a prompt. Queued in order with the steps, without
 * waiting: a step submitted after it sees the copy. 0, INF_EINVAL (an id out
 * of range, src == dst, a dst that is also a src or repeated) or INF_EBUSY
 * (a step is in flight). Errors of the copy itself come from graph_wait. */
int graph_kv_copy_blocks(struct graph *g, const int32_t *src, const int32_t *dst, int32_t n);
/* One block; src == dst is a no-op. */
int graph_kv_copy_block(struct graph *g, int32_t src_block, int32_t dst_block);

/* The backend's cache handle (tests: ops->kv_read). */
struct backend_kv *graph_kv(struct graph *g);

const struct graph_params *graph_params(const struct graph *g);

#endif
