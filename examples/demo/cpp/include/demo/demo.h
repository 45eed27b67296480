// libdemo: the C++ library of nightly's demo project.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "demo/config.h"

#if defined(_WIN32)
#define DEMO_API __declspec(dllexport)
#else
#define DEMO_API __attribute__((visibility("default")))
#endif

namespace demo {

// The version libdemo was built as (the nightly's BUILD_VERSION).
DEMO_API const char* version();

// True when the CUDA kernel is compiled in; cuda_version() is then e.g. "13.0", else "".
DEMO_API bool built_with_cuda();
DEMO_API const char* cuda_version();

DEMO_API int add(int a, int b);
DEMO_API double vector_sum(const std::vector<double>& values);

// Number of usable CUDA devices; 0 on CPU builds and on machines without GPU or driver.
DEMO_API int cuda_device_count();

// Element-wise a + b on the GPU. Throws std::runtime_error on a CPU build, when the
// sizes differ or when no device is usable.
DEMO_API std::vector<double> vector_add_cuda(const std::vector<double>& a,
                                             const std::vector<double>& b);

}  // namespace demo
