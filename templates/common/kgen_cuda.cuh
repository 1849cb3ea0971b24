// kgen fixed CUDA helpers (pulled into each rendered kernel by Jinja include; no torch headers).
#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>

namespace kgen {

// Floor division for possibly negative numerators (C++ '/' truncates toward zero).
__host__ __device__ constexpr int floor_div(int a, int b) { return (a >= 0) ? a / b : -((-a + b - 1) / b); }
__host__ __device__ constexpr int ceil_div_pos(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int imax(int a, int b) { return a > b ? a : b; }

// Grid size for a grid-stride loop over `tiles` blocks of work.
inline unsigned int grid_for(int64_t tiles) {
  const int64_t cap = 0x7fffffffLL;
  return static_cast<unsigned int>(tiles < cap ? tiles : cap);
}

// Blocks of `kernel` that fit on the current device at once (multiprocessors x blocks per multiprocessor), for
// persistent grids; <= 0 if the query fails. The occupancy query costs microseconds, so each launch site keeps
// the answer per device in its own `cache` (a static array of the launcher: zero means not asked yet).
constexpr int kMaxDevices = 64;
template <typename Kernel>
inline int64_t resident_blocks(Kernel kernel, int threads, size_t smem, std::atomic<int64_t> (&cache)[kMaxDevices]) {
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (dev >= 0 && dev < kMaxDevices) {
    const int64_t known = cache[dev].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess) return -1;
  const int64_t blocks = static_cast<int64_t>(sms) * per_sm;
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(blocks, std::memory_order_relaxed);
  return blocks;
}

}  // namespace kgen
