/* Cache warming for a send to one of thousands of queues (store/consumequeue.py's QueueHandle.warm).
 *
 * A put to a queue reads a chain of objects, each found through the one before (the handle, the queue,
 * its current file, the file's mapping, the page its next unit goes to); with thousands of queues sent
 * to in turn every one of them is a cache miss, the page a TLB miss too, and each miss waits for the one
 * before. The handle keeps where each of them was at its last put, and this prefetches them all at once
 * when a send starts: the misses overlap each other and the send's own work before the put. A prefetch
 * never faults, so an address gone stale (a file rolled, a queue deleted) costs a useless prefetch and
 * nothing else: the put itself still goes through the objects, under the store's checks.
 *
 * prefetch(*what): for each argument, the first two lines of the object given, or of what is at the address
 * given as an int (0 is skipped).
 * address(buffer): where a writable buffer (a file's mapping) starts in memory, 0 where it has none.
 *
 * Built by scripts/build_native.py beside the mypyc modules; without it the handle does not warm.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static void lines(const char *p) {
    __builtin_prefetch(p, 1, 3);
    __builtin_prefetch(p + 64, 1, 3);
}

static PyObject *prefetch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *arg = args[i];
        if (PyLong_CheckExact(arg)) {
            void *p = PyLong_AsVoidPtr(arg);
            if (p == NULL) {
                if (PyErr_Occurred()) return NULL;
                continue;
            }
            lines((const char *)p);
        } else {
            lines((const char *)arg);
        }
    }
    Py_RETURN_NONE;
}

static PyObject *address(PyObject *self, PyObject *buffer) {
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        return PyLong_FromLong(0);
    }
    PyObject *at = PyLong_FromVoidPtr(view.buf);
    PyBuffer_Release(&view);
    return at;
}

static PyMethodDef methods[] = {
    {"prefetch", (PyCFunction)(void (*)(void))prefetch, METH_FASTCALL, "Prefetch objects, and what is at addresses given as ints."},
    {"address", address, METH_O, "Where a writable buffer starts in memory (0: none)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_warm", NULL, -1, methods};

PyMODINIT_FUNC PyInit__warm(void) { return PyModule_Create(&module); }
