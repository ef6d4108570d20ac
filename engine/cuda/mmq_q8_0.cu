/* cuda/mmq_q8_0 — the packed-layout kernels of Q8_0 weights: repack, decode
 * and MMQ instantiations (cuda/mmq0_impl.cuh). */
#include "engine/cuda/mmq0_impl.cuh"

MMQ0_DEFINE(QT_Q8_0)
