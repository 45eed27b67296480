// CUDA part of libdemo, compiled only with -DUSE_CUDA=ON. The runtime is first called
// from these functions, never at load time, so the library loads without a GPU.
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace demo {
namespace detail {

namespace {

__global__ void vector_add_kernel(const double* a, const double* b, double* out, std::size_t n) {
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(rc));
  }
}

// Frees device memory on every path out of cuda_vector_add, exceptions included.
struct DeviceBuffer {
  double* ptr = nullptr;
  explicit DeviceBuffer(std::size_t n) { check(cudaMalloc(&ptr, n * sizeof(double)), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void cuda_vector_add(const double* a, const double* b, double* out, std::size_t n) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) throw std::runtime_error("no CUDA device is available");
  if (n == 0) return;
  DeviceBuffer da(n), db(n), dout(n);
  check(cudaMemcpy(da.ptr, a, n * sizeof(double), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(db.ptr, b, n * sizeof(double), cudaMemcpyHostToDevice), "cudaMemcpy");
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  vector_add_kernel<<<blocks, threads>>>(da.ptr, db.ptr, dout.ptr, n);
  check(cudaGetLastError(), "kernel launch");
  check(cudaMemcpy(out, dout.ptr, n * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy");
}

}  // namespace detail
}  // namespace demo
