/* cuda/mmq_q4_0 — the packed-layout kernels of Q4_0 weights: repack, decode
 * and MMQ instantiations (cuda/mmq0_impl.cuh). */
#include "engine/cuda/mmq0_impl.cuh"

MMQ0_DEFINE(QT_Q4_0)
