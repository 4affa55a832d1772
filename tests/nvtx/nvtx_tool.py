"""A recording NVTX tool for the tests: a small injection library, built
with the C compiler, that NVTX3 loads from ``NVTX_INJECTION64_PATH`` and
that writes one line per call it receives, the way NVTX tests itself.

NVTX3's first call (nvtx3/nvtxDetail/nvtxInit.h) loads the library, calls
its ``InitializeInjectionNvtx2(getExportTable)`` export, and the library
fills the entries of the callback tables it wants
(``GetModuleFunctionTable`` of the ``NVTX_ETID_CALLBACKS`` export table,
one table per module: core, core2, CUDA runtime); entries it leaves empty
become no-ops.

The lines, tab-separated (``-`` for the default domain, for no color and
for no category):

* ``domain NAME``, ``register DOMAIN TEXT``;
* ``push DOMAIN MESSAGE COLOR CATEGORY``, ``pop DOMAIN``,
  ``mark DOMAIN MESSAGE COLOR CATEGORY``; MESSAGE is ``reg:TEXT`` when the
  caller passed a registered string;
* ``category DOMAIN ID NAME``;
* ``name_stream HANDLE NAME``, ``name_event HANDLE NAME``,
  ``name_device ORDINAL NAME``.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import streams

from _support import child_python

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")

SOURCE = textwrap.dedent(r"""
    #define NVTX_NO_IMPL
    #include <nvtx3/nvToolsExt.h>
    #include <pthread.h>
    #include <stdarg.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>

    static FILE *out;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static __thread int depth;

    typedef struct { char *name; } domain_t;

    static const char *dname(nvtxDomainHandle_t d) {
        return d ? ((domain_t *)d)->name : "-";
    }

    static void line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
    static void line(const char *fmt, ...) {
        va_list ap;
        pthread_mutex_lock(&lock);
        va_start(ap, fmt);
        vfprintf(out, fmt, ap);
        va_end(ap);
        fputc('\n', out);
        fflush(out);
        pthread_mutex_unlock(&lock);
    }

    static void attrs(const char *what, nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
        char color[16] = "-", cat[16] = "-";
        if (a->colorType == NVTX_COLOR_ARGB) snprintf(color, sizeof color, "%08x", a->color);
        if (a->category) snprintf(cat, sizeof cat, "%u", a->category);
        if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
            line("%s\t%s\treg:%s\t%s\t%s", what, dname(d),
                 a->message.registered ? (const char *)a->message.registered : "(null)",
                 color, cat);
        else if (a->messageType == NVTX_MESSAGE_TYPE_ASCII)
            line("%s\t%s\t%s\t%s\t%s", what, dname(d), a->message.ascii, color, cat);
        else
            line("%s\t%s\t(type %d)\t%s\t%s", what, dname(d), a->messageType, color, cat);
    }

    static void mark_ex(const nvtxEventAttributes_t *a) { attrs("mark", NULL, a); }
    static int push_ex(const nvtxEventAttributes_t *a) { attrs("push", NULL, a); return depth++; }
    static int pop(void) { line("pop\t-"); return depth > 0 ? --depth : -1; }
    static void name_category(uint32_t c, const char *n) { line("category\t-\t%u\t%s", c, n); }

    static void d_mark_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
        attrs("mark", d, a);
    }
    static int d_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a) {
        attrs("push", d, a);
        return depth++;
    }
    static int d_pop(nvtxDomainHandle_t d) {
        line("pop\t%s", dname(d));
        return depth > 0 ? --depth : -1;
    }
    static void d_name_category(nvtxDomainHandle_t d, uint32_t c, const char *n) {
        line("category\t%s\t%u\t%s", dname(d), c, n);
    }
    static nvtxStringHandle_t d_register(nvtxDomainHandle_t d, const char *s) {
        line("register\t%s\t%s", dname(d), s);
        return (nvtxStringHandle_t)strdup(s);
    }
    static nvtxDomainHandle_t d_create(const char *name) {
        domain_t *d = malloc(sizeof *d);
        d->name = strdup(name);
        line("domain\t%s", name);
        return (nvtxDomainHandle_t)d;
    }

    static void name_device(int dev, const char *n) { line("name_device\t%d\t%s", dev, n); }
    static void name_stream(void *s, const char *n) { line("name_stream\t%p\t%s", s, n); }
    static void name_event(void *e, const char *n) { line("name_event\t%p\t%s", e, n); }

    static int set(NvtxGetExportTableFunc_t get, NvtxCallbackModule module,
                   unsigned int id, NvtxFunctionPointer fn) {
        const NvtxExportTableCallbacks *cb =
            (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
        NvtxFunctionTable table = 0;
        unsigned int size = 0;
        if (!cb || !cb->GetModuleFunctionTable(module, &table, &size) || !table || id >= size)
            return 0;
        *table[id] = fn;
        return 1;
    }

    #define SET(m, id, fn) ok &= set(get, m, id, (NvtxFunctionPointer)(fn))

    __attribute__((visibility("default")))
    int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
        int ok = 1;
        const char *path = getenv("STREAMS_NVTX_TOOL_LOG");
        out = path ? fopen(path, "a") : stderr;
        if (!out) return 0;
        line("init");
        SET(NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_MarkEx, mark_ex);
        SET(NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushEx, push_ex);
        SET(NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop, pop);
        SET(NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_NameCategoryA, name_category);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainMarkEx, d_mark_ex);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx, d_push_ex);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop, d_pop);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainNameCategoryA, d_name_category);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRegisterStringA, d_register);
        SET(NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainCreateA, d_create);
        SET(NVTX_CB_MODULE_CUDART, NVTX_CBID_CUDART_NameCudaDeviceA, name_device);
        SET(NVTX_CB_MODULE_CUDART, NVTX_CBID_CUDART_NameCudaStreamA, name_stream);
        SET(NVTX_CB_MODULE_CUDART, NVTX_CBID_CUDART_NameCudaEventA, name_event);
        return ok;
    }
""")


def nvtx_include():
    """A folder holding nvtx3/nvToolsExt.h, or None."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    dirs = [os.path.join(r, "include") for r in roots if r]
    for entry in sys.path:
        nv = os.path.join(entry or ".", "nvidia")
        if os.path.isdir(nv):
            dirs += [os.path.join(nv, sub, "include") for sub in sorted(os.listdir(nv))]
    return next((d for d in dirs if os.path.isfile(os.path.join(d, "nvtx3", "nvToolsExt.h"))),
                None)


def build_tool(folder):
    """Build the recording tool in ``folder``; its path.  Skips the test
    where this build of streams makes no NVTX calls or nothing can build it."""
    if not streams.nvtx.available:
        pytest.skip("this build of streams has NVTX compiled out (no NVTX headers at build time)")
    include = nvtx_include()
    if CC is None or include is None:
        pytest.skip("needs a C compiler and the nvtx3 headers")
    src = os.path.join(folder, "nvtx_tool.c")
    lib = os.path.join(folder, "libnvtx_tool.so")
    with open(src, "w") as f:
        f.write(SOURCE)
    result = subprocess.run([CC, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", include,
                             src, "-o", lib, "-lpthread"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return lib


def run_with_tool(tool, code, folder, *, extra_env=None, timeout=120):
    """Run ``code`` in a child Python with ``tool`` attached; the lines it
    recorded, each split on tabs, and the finished process."""
    log = os.path.join(folder, f"calls-{os.getpid()}-{len(os.listdir(folder))}.log")
    env = {"NVTX_INJECTION64_PATH": tool, "STREAMS_NVTX_TOOL_LOG": log}
    env.update(extra_env or {})
    result = subprocess.run(**child_python(["-c", textwrap.dedent(code)], extra_env=env),
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    calls = []
    if os.path.exists(log):
        with open(log) as f:
            calls = [line.rstrip("\n").split("\t") for line in f]
    return calls, result
