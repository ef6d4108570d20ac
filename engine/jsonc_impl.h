/* jsonc_impl — the compiled form's layout, shared by the builder
 * (jsonc_build.c) and the recognizer (jsonc.c). Not for use elsewhere. */
#ifndef INFERD_JSONC_IMPL_H
#define INFERD_JSONC_IMPL_H

#include <stddef.h>
#include <stdint.h>

struct jsonc_node {
    uint8_t kind;
    uint8_t free_keys; /* OBJECT: any keys, JSONC_N_ANY values */
    uint16_t n;        /* slots */
    int32_t first;
    int32_t lo, hi;    /* TAGGED: lo the first of hi slots whose refs are the variants */
    uint64_t req;       /* OBJECT: required slots; PATTERN: the DFA's offset in chars[] */
    int64_t imin, imax; /* INTEGER: the values it may take (INT64_MIN / INT64_MAX: any);
                         * PATTERN: imin its DFA's states */
};

struct jsonc_slot {
    uint32_t off, len; /* literal bytes in chars[] */
    int32_t ref;
};

struct jsonc {
    size_t bytes; /* the whole allocation, for jsonc_dup */
    int32_t n_nodes, n_slots, root;
    uint32_t n_chars;
    const struct jsonc_node *nodes;
    const struct jsonc_slot *slots;
    const uint8_t *chars;
};

/* A PATTERN node's DFA in chars[] (at node->req): node->imin states of
 * JSONC_RX_SYMS little-endian uint16 next states each, then a byte per
 * state, 1 where it accepts. */
/* Whether a value of node id may start with byte c (UNION: any member);
 * depth bounds a union that (through a $ref loop) names itself. */
int jsonc_first_ok(const struct jsonc_node *nodes, const struct jsonc_slot *slots,
                   const uint8_t *chars, int32_t id, unsigned c, int depth);

#endif
