#include <Python.h>

void flsolve_dgesv(int n, double *a, double *b, int *info);

/* solve(a, b): a is a list of n rows of n floats, b a list of n floats; returns x. */
static PyObject *solve(PyObject *self, PyObject *args) {
    PyObject *rows, *rhs;
    if (!PyArg_ParseTuple(args, "OO", &rows, &rhs)) return NULL;
    Py_ssize_t n = PySequence_Size(rhs);
    if (n <= 0 || n > 64 || PySequence_Size(rows) != n) {
        PyErr_SetString(PyExc_ValueError, "a must be n x n and b of n, 0 < n <= 64");
        return NULL;
    }
    double a[64 * 64], b[64];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PySequence_GetItem(rows, i);
        if (row == NULL) return NULL;
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *v = PySequence_GetItem(row, j);
            if (v == NULL) { Py_DECREF(row); return NULL; }
            a[j * n + i] = PyFloat_AsDouble(v);  /* column-major for Fortran */
            Py_DECREF(v);
        }
        Py_DECREF(row);
        PyObject *v = PySequence_GetItem(rhs, i);
        if (v == NULL) return NULL;
        b[i] = PyFloat_AsDouble(v);
        Py_DECREF(v);
    }
    if (PyErr_Occurred()) return NULL;
    int info = 0;
    flsolve_dgesv((int)n, a, b, &info);
    if (info != 0) return PyErr_Format(PyExc_ArithmeticError, "dgesv info=%d", info);
    PyObject *x = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) PyList_SET_ITEM(x, i, PyFloat_FromDouble(b[i]));
    return x;
}

static PyMethodDef methods[] = {{"solve", solve, METH_VARARGS, "solve a x = b (dgesv)"},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_flsolve", NULL, -1, methods};
PyMODINIT_FUNC PyInit__flsolve(void) { return PyModule_Create(&mod); }
