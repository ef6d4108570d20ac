/* cuda/mmq_q5_k — the Q5_K MMQ instantiations mmqk_kernel<Q5_K, 1|2, false>
 * (cuda/mmqk_impl.cuh) and mmqs_kernel<Q5_K, false> (cuda/mmqs_impl.cuh); one file per type so builds run in parallel. */
#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqs_impl.cuh"
#include "engine/cuda/mmqt_impl.cuh"

MMQK_DEFINE(QT_Q5_K)
MMQS_DEFINE(QT_Q5_K)
MMQT_DEFINE(QT_Q5_K)
