// The demo's HIP kernel (AMD GPUs), compiled by hipcc in ROCm builds only (USE_ROCM=1, or
// DESIRED_CUDA=rocmX.Y) for the targets of PYTORCH_ROCM_ARCH, and linked into
// nightlydemo._native; the HIP runtime (libamdhip64) is the machine's, as ROCm installs it.
//
// Nothing here runs at import time but the code objects' registration: the runtime is
// asked for devices only when a function below is called, and without a GPU it answers
// "no device" (hipErrorNoDevice), which the query reports as 0 devices and its reason.
#include <hip/hip_runtime.h>
#include <stdio.h>

__global__ void vector_add_kernel(const double *a, const double *b, double *out, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" int nightlydemo_hip_version(void) { return HIP_VERSION_MAJOR * 100 + HIP_VERSION_MINOR; }

extern "C" int nightlydemo_hip_device_count(char *why, size_t whylen) {
    int count = 0;
    hipError_t rc = hipGetDeviceCount(&count);
    if (rc != hipSuccess) {
        snprintf(why, whylen, "%s (%s, %d)", hipGetErrorString(rc), hipGetErrorName(rc), (int)rc);
        (void)hipGetLastError();
        return 0;
    }
    snprintf(why, whylen, "%d device(s)", count);
    return count;
}

extern "C" int nightlydemo_hip_vector_add(const double *a, const double *b, double *out,
                                          size_t n, char *err, size_t errlen) {
    if (nightlydemo_hip_device_count(err, errlen) == 0) return 1;
    double *da = NULL, *db = NULL, *dout = NULL;
    size_t bytes = n * sizeof(double);
    int status = 1;
    if (hipMalloc((void **)&da, bytes) == hipSuccess && hipMalloc((void **)&db, bytes) == hipSuccess &&
        hipMalloc((void **)&dout, bytes) == hipSuccess &&
        hipMemcpy(da, a, bytes, hipMemcpyHostToDevice) == hipSuccess &&
        hipMemcpy(db, b, bytes, hipMemcpyHostToDevice) == hipSuccess) {
        unsigned threads = 256, blocks = (unsigned)((n + threads - 1) / threads);
        hipLaunchKernelGGL(vector_add_kernel, dim3(blocks), dim3(threads), 0, 0, da, db, dout, n);
        if (hipMemcpy(out, dout, bytes, hipMemcpyDeviceToHost) == hipSuccess) status = 0;
    }
    if (status) snprintf(err, errlen, "HIP error: %s", hipGetErrorString(hipGetLastError()));
    (void)hipFree(da);
    (void)hipFree(db);
    (void)hipFree(dout);
    return status;
}
