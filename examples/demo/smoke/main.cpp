// Smoke test of a libtorch-style zip of the demo: compiled against its headers, linked
// against its library and run by nightly before the zip counts as built.
#include <cstdio>
#include <vector>

#include "demo/demo.h"

int main() {
    if (demo::add(2, 3) != 5) {
        std::fprintf(stderr, "add(2, 3) != 5\n");
        return 1;
    }
    std::vector<double> v{1.0, 2.0, 3.5};
    if (demo::vector_sum(v) != 6.5) {
        std::fprintf(stderr, "vector_sum wrong\n");
        return 1;
    }
    std::printf("libdemo %s, CUDA %s\n", demo::version(),
                demo::built_with_cuda() ? demo::cuda_version() : "no");
    return 0;
}
