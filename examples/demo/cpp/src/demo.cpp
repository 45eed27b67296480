#include "demo/demo.h"

#include <numeric>
#include <stdexcept>

#if DEMO_WITH_CUDA
// Implemented in demo_cuda.cu.
namespace demo {
namespace detail {
int cuda_device_count();
void cuda_vector_add(const double* a, const double* b, double* out, std::size_t n);
}  // namespace detail
}  // namespace demo
#endif

namespace demo {

const char* version() { return DEMO_VERSION; }

bool built_with_cuda() { return DEMO_WITH_CUDA != 0; }

const char* cuda_version() { return DEMO_CUDA_VERSION; }

int add(int a, int b) { return a + b; }

double vector_sum(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}

int cuda_device_count() {
#if DEMO_WITH_CUDA
  return detail::cuda_device_count();
#else
  return 0;
#endif
}

std::vector<double> vector_add_cuda(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("vector_add_cuda: sizes differ");
#if DEMO_WITH_CUDA
  std::vector<double> out(a.size());
  detail::cuda_vector_add(a.data(), b.data(), out.data(), a.size());
  return out;
#else
  throw std::runtime_error("libdemo was built without CUDA (a CPU build)");
#endif
}

}  // namespace demo
