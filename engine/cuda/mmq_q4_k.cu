/* cuda/mmq_q4_k — the Q4_K MMQ instantiations mmqk_kernel<Q4_K, 1|2, false>
 * (cuda/mmqk_impl.cuh), mmqh_kernel<Q4_K> (cuda/mmqh_impl.cuh) and mmqs_kernel<Q4_K, false> (cuda/mmqs_impl.cuh); one file per type so builds run in parallel. */
#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqh_impl.cuh"
#include "engine/cuda/mmqs_impl.cuh"
#include "engine/cuda/mmqt_impl.cuh"

MMQK_DEFINE(QT_Q4_K)
MMQH_DEFINE(QT_Q4_K)
MMQS_DEFINE(QT_Q4_K)
MMQT_DEFINE(QT_Q4_K)
