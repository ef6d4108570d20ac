/* graph — the batched forward pass, written once over the backend op table.
 *
 * One call runs any mix of sequences and positions: the prompt tokens of many
 * requests and one decode token of each running sequence go through every
 * weight matrix as one matrix product. K/V live in a paged cache owned by the
 * graph (in backend memory): a token at position p of a sequence whose block
 * table is bt is stored at slot bt[p / block_size] * block_size + p % block_size;
 * attention for that token reads positions 0..p of the same sequence through
 * the same table. Block bookkeeping (which blocks are free) is engine/kv's job.
 *
 * Batch invariance: the logits of a row do not depend on what else is in the
 * batch (same per-row arithmetic at every batch size).
 * graph_forward allocates nothing. Thread: the engine thread only.
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
    float *logits;                      /* out: [n_logits][n_vocab], host memory */
};

struct graph;

int graph_new(struct model *m, const struct graph_params *p, struct graph **out,
              struct inf_error *err);
void graph_free(struct graph *g); /* accepts NULL */

/* Run the batch. Returns 0, or INF_EINVAL when the batch breaks the limits
 * given at graph_new (nothing is computed then), INF_ENOMEM when the backend
 * could not get memory (recoverable), or INF_EDEVICE. */
int graph_forward(struct graph *g, const struct graph_batch *b);

/* Copy the K/V of one physical block to another (copy-on-write for n > 1
 * choices sharing a prompt). */
int graph_kv_copy_block(struct graph *g, int32_t src_block, int32_t dst_block);

const struct graph_params *graph_params(const struct graph *g);

#endif
