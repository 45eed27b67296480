/* nightlydemo._native: the C extension of the demo project.
 *
 * Written against the C API shared by Python 2.7 and 3.x so that every interpreter of a
 * build matrix (2.7mu ... 3.13) can compile it. CUDA code lives in cuda/kernel.cu and is
 * linked in only when NIGHTLYDEMO_WITH_CUDA is defined; this file never includes a CUDA
 * header, so CPU builds need no toolkit at all.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#ifdef NIGHTLYDEMO_WITH_CUDA
/* Implemented in cuda/kernel.cu (C linkage). */
int nightlydemo_cuda_runtime_version(void);
int nightlydemo_cuda_device_count(void);
int nightlydemo_cuda_vector_add(const double *a, const double *b, double *out, size_t n,
                                char *err, size_t errlen);
#endif

#ifdef NIGHTLYDEMO_WITH_HIP
/* Implemented in hip/kernel.hip (C linkage). */
int nightlydemo_hip_version(void);
int nightlydemo_hip_device_count(char *why, size_t whylen);
#endif

static PyObject *native_add(PyObject *self, PyObject *args) {
    long a, b;
    (void)self;
    if (!PyArg_ParseTuple(args, "ll:add", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}

/* Copies a sequence of numbers into a freshly malloc'ed array of doubles. */
static double *to_doubles(PyObject *seq, Py_ssize_t *n_out) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of numbers");
    Py_ssize_t i, n;
    double *buf;
    if (fast == NULL) return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    buf = (double *)malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (buf == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (i = 0; i < n; i++) {
        buf[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if (buf[i] == -1.0 && PyErr_Occurred()) {
            free(buf);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    *n_out = n;
    return buf;
}

static PyObject *native_vector_sum(PyObject *self, PyObject *args) {
    PyObject *seq;
    Py_ssize_t i, n = 0;
    double total = 0.0, *buf;
    (void)self;
    if (!PyArg_ParseTuple(args, "O:vector_sum", &seq)) return NULL;
    if ((buf = to_doubles(seq, &n)) == NULL) return NULL;
    for (i = 0; i < n; i++) total += buf[i];
    free(buf);
    return PyFloat_FromDouble(total);
}

static PyObject *native_built_with_cuda(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
#ifdef NIGHTLYDEMO_WITH_CUDA
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyObject *native_cuda_version(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
#ifdef NIGHTLYDEMO_WITH_CUDA
    {
        /* CUDART_VERSION is major*1000 + minor*10: 13000 -> "13.0". It is a compile-time
         * constant, so this never initialises the runtime or needs a driver. */
        int v = nightlydemo_cuda_runtime_version();
        char text[32];
        sprintf(text, "%d.%d", v / 1000, (v % 1000) / 10);
        return Py_BuildValue("s", text);
    }
#else
    Py_RETURN_NONE;
#endif
}

static PyObject *native_cuda_runtime_version(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
#ifdef NIGHTLYDEMO_WITH_CUDA
    /* The raw CUDART_VERSION (major*1000 + minor*10): 11080 for CUDA 11.8. */
    return PyLong_FromLong(nightlydemo_cuda_runtime_version());
#else
    Py_RETURN_NONE;
#endif
}

static PyObject *native_cuda_device_count(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
#ifdef NIGHTLYDEMO_WITH_CUDA
    return PyLong_FromLong(nightlydemo_cuda_device_count());
#else
    return PyLong_FromLong(0);
#endif
}

static PyObject *native_vector_add_cuda(PyObject *self, PyObject *args) {
    PyObject *sa, *sb;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:vector_add_cuda", &sa, &sb)) return NULL;
#ifdef NIGHTLYDEMO_WITH_CUDA
    {
        Py_ssize_t na = 0, nb = 0, i;
        double *a, *b, *out;
        char err[256];
        int rc;
        PyObject *result;
        if ((a = to_doubles(sa, &na)) == NULL) return NULL;
        if ((b = to_doubles(sb, &nb)) == NULL) {
            free(a);
            return NULL;
        }
        if (na != nb) {
            free(a);
            free(b);
            PyErr_SetString(PyExc_ValueError, "vectors must have the same length");
            return NULL;
        }
        out = (double *)malloc(sizeof(double) * (size_t)(na > 0 ? na : 1));
        if (out == NULL) {
            free(a);
            free(b);
            return PyErr_NoMemory();
        }
        err[0] = '\0';
        Py_BEGIN_ALLOW_THREADS
        rc = nightlydemo_cuda_vector_add(a, b, out, (size_t)na, err, sizeof(err));
        Py_END_ALLOW_THREADS
        free(a);
        free(b);
        if (rc != 0) {
            free(out);
            PyErr_SetString(PyExc_RuntimeError, err);
            return NULL;
        }
        result = PyList_New(na);
        if (result != NULL)
            for (i = 0; i < na; i++) PyList_SET_ITEM(result, i, PyFloat_FromDouble(out[i]));
        free(out);
        return result;
    }
#else
    PyErr_SetString(PyExc_RuntimeError, "nightlydemo was built without CUDA (a CPU build)");
    return NULL;
#endif
}

static PyObject *native_hip_version(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
#ifdef NIGHTLYDEMO_WITH_HIP
    /* HIP_VERSION_MAJOR * 100 + HIP_VERSION_MINOR at compile time: 507 for ROCm 5.7. */
    return PyLong_FromLong(nightlydemo_hip_version());
#else
    Py_RETURN_NONE;
#endif
}

static PyObject *native_hip_device_query(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
#ifdef NIGHTLYDEMO_WITH_HIP
    {
        char why[256];
        int n;
        why[0] = '\0';
        n = nightlydemo_hip_device_count(why, sizeof(why));
        return Py_BuildValue("(is)", n, why);
    }
#else
    return Py_BuildValue("(is)", 0, "built without HIP (not a ROCm build)");
#endif
}

static PyMethodDef native_methods[] = {
    {"add", native_add, METH_VARARGS, "add(a, b) -> a + b, computed in C."},
    {"vector_sum", native_vector_sum, METH_VARARGS, "vector_sum(seq) -> sum of the floats."},
    {"built_with_cuda", native_built_with_cuda, METH_NOARGS, "True for a CUDA build."},
    {"cuda_version", native_cuda_version, METH_NOARGS, "CUDA runtime version compiled against, or None."},
    {"cuda_runtime_version", native_cuda_runtime_version, METH_NOARGS, "CUDART_VERSION compiled against (11080), or None."},
    {"cuda_device_count", native_cuda_device_count, METH_NOARGS, "Visible CUDA devices (0 without)."},
    {"vector_add_cuda", native_vector_add_cuda, METH_VARARGS, "Element-wise add on the GPU."},
    {"hip_version", native_hip_version, METH_NOARGS, "HIP version compiled against (507), or None."},
    {"hip_device_query", native_hip_device_query, METH_NOARGS, "(AMD GPUs visible, the runtime's answer)."},
    {NULL, NULL, 0, NULL}};

#if PY_MAJOR_VERSION >= 3
static struct PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native",
                                           "Native part of nightlydemo.", -1, native_methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
#else
PyMODINIT_FUNC init_native(void) { Py_InitModule3("_native", native_methods, "Native part of nightlydemo."); }
#endif
