"""nightlydemo: the small project that nightly's recipes build end to end.

It has the three kinds of native code a real project ships: a C extension
(``nightlydemo._native``), a CUDA kernel linked into that extension in CUDA builds,
and a C++ library built by CMake (``cpp/``, packaged by the libtorch recipe).
"""
from nightlydemo import _native
try:
    from nightlydemo._version import __version__, cuda_version as _cuda_version
except ImportError:  # a checkout used in place: _version.py is written at build time only
    __version__ = "unknown"
    _cuda_version = None

__all__ = [
    "__version__",
    "add",
    "vector_sum",
    "built_with_cuda",
    "cuda_version",
    "cuda_runtime_version",
    "cuda_device_count",
    "vector_add_cuda",
    "hip_version",
    "hip_device_query",
]


def add(a, b):
    """Add two integers in C."""
    return _native.add(a, b)


def vector_sum(values):
    """Sum a sequence of floats in C."""
    return _native.vector_sum(list(values))


def built_with_cuda():
    """True when the extension was compiled and linked with a CUDA kernel."""
    return bool(_native.built_with_cuda())


def cuda_version():
    """The CUDA runtime version the build was compiled against ("13.0"), or None.

    The answer comes from the compiled extension (CUDART_VERSION at compile time),
    not from the toolkit found at run time, so it is what the package really is.
    """
    native = _native.cuda_version()
    if native is None:
        return None
    # The generated _version.py records what the build was asked for; the two
    # disagreeing would mean a mislabelled package, which is worth failing loudly on.
    if _cuda_version is not None and _cuda_version != native:
        raise RuntimeError(
            "nightlydemo was labelled CUDA %s but compiled against CUDA %s" % (_cuda_version, native)
        )
    return native


def cuda_runtime_version():
    """CUDART_VERSION the extension was compiled against (11080 for 11.8), or None."""
    return _native.cuda_runtime_version()


def cuda_device_count():
    """Number of CUDA devices visible now; 0 on CPU builds or without a GPU/driver."""
    return _native.cuda_device_count()


def vector_add_cuda(a, b):
    """Element-wise a + b computed by the CUDA kernel.

    Raises RuntimeError on a CPU build or when no CUDA device is usable; nothing
    touches the CUDA runtime until this is called, so importing never needs a GPU.
    """
    return _native.vector_add_cuda(list(a), list(b))


def hip_version():
    """The HIP release the extension was compiled against ("5.7"), or None (not ROCm)."""
    v = _native.hip_version()
    return None if v is None else "%d.%d" % (v // 100, v % 100)


def hip_device_query():
    """(number of AMD GPUs visible, the HIP runtime's answer): (0, "no ROCm-capable device
    is detected (hipErrorNoDevice, 100)") on a machine without one. Never raises."""
    return _native.hip_device_query()
