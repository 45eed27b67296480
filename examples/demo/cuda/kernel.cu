// The demo's CUDA kernel, compiled by nvcc in CUDA builds only and linked into
// nightlydemo._native together with the static CUDA runtime.
//
// Nothing here runs at import time: the runtime (and through it the driver,
// libcuda.so) is first touched when a function below is called, so the package
// imports on machines without a GPU or a driver and reports the problem cleanly.
#include <cuda_runtime.h>
#include <stdio.h>

__global__ void vector_add_kernel(const double *a, const double *b, double *out, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" int nightlydemo_cuda_runtime_version(void) { return CUDART_VERSION; }

extern "C" int nightlydemo_cuda_device_count(void) {
    int count = 0;
    // No driver or no device is the normal case on build machines: it means 0 devices.
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky error so a later call starts clean
        return 0;
    }
    return count;
}

static int fail(cudaError_t rc, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(rc),
             cudaGetErrorName(rc));
    cudaGetLastError();
    return 1;
}

extern "C" int nightlydemo_cuda_vector_add(const double *a, const double *b, double *out,
                                           size_t n, char *err, size_t errlen) {
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) return fail(rc, "cudaGetDeviceCount", err, errlen);
    if (count == 0) {
        snprintf(err, errlen, "no CUDA device is available");
        return 1;
    }
    if (n == 0) return 0;
    double *da = NULL, *db = NULL, *dout = NULL;
    size_t bytes = n * sizeof(double);
    int status = 0;
    if ((rc = cudaMalloc((void **)&da, bytes)) != cudaSuccess) { status = fail(rc, "cudaMalloc", err, errlen); goto done; }
    if ((rc = cudaMalloc((void **)&db, bytes)) != cudaSuccess) { status = fail(rc, "cudaMalloc", err, errlen); goto done; }
    if ((rc = cudaMalloc((void **)&dout, bytes)) != cudaSuccess) { status = fail(rc, "cudaMalloc", err, errlen); goto done; }
    if ((rc = cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) { status = fail(rc, "cudaMemcpy", err, errlen); goto done; }
    if ((rc = cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) { status = fail(rc, "cudaMemcpy", err, errlen); goto done; }
    {
        unsigned threads = 256;
        unsigned blocks = (unsigned)((n + threads - 1) / threads);
        vector_add_kernel<<<blocks, threads>>>(da, db, dout, n);
    }
    if ((rc = cudaGetLastError()) != cudaSuccess) { status = fail(rc, "kernel launch", err, errlen); goto done; }
    if ((rc = cudaMemcpy(out, dout, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) { status = fail(rc, "cudaMemcpy", err, errlen); goto done; }
done:
    cudaFree(da);
    cudaFree(db);
    cudaFree(dout);
    return status;
}
