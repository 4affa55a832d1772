/* NVTX for streams._nvtx (docs/nvtx.rst): the few calls the package makes,
 * over header-only NVTX3, or compiled out.
 *
 * setup.py defines STREAMS_HAVE_NVTX=1 when it finds nvtx3/nvToolsExt.h
 * (beside the CUDA headers, or in the nvidia-nvtx wheel) and puts its folder
 * on the include path of streams._nvtx alone: NVTX3 keeps its function table
 * in each shared object that includes it, so one module makes every NVTX
 * call of the package (tests/package/test_layout.py checks it).  Without it,
 * every function here does nothing and STREAMS_NVTX_BUILT is 0
 * (streams.nvtx.available is False).
 *
 * No tool attached: NVTX3's first call looks for NVTX_INJECTION64_PATH, finds
 * none and points every entry of its table at nothing, so each call after it
 * is a load and a branch.  NVTX3 makes that first call thread-safe; the
 * calls themselves are too (a tool's contract).  None needs the GIL.
 *
 * Names of CUDA streams, events and devices need nvToolsExtCudaRt.h, which
 * includes cuda.h: where the CUDA headers have none, names are compiled out
 * (STREAMS_NVTX_NAMES 0) and the rest still works. */
#ifndef STREAMS_NVTX_H
#define STREAMS_NVTX_H

#include <stdint.h>
#include <stddef.h>

#if defined(STREAMS_HAVE_NVTX) && STREAMS_HAVE_NVTX
#define NVTX_AS_SYSTEM_HEADER 1
#include <nvtx3/nvToolsExt.h>
#define STREAMS_NVTX_BUILT 1
#if defined(__has_include)
#if __has_include(<cuda.h>) && __has_include(<driver_types.h>)
#include <nvtx3/nvToolsExtCudaRt.h>
#define STREAMS_NVTX_NAMES 1
#endif
#endif
#else
#define STREAMS_NVTX_BUILT 0
#endif
#ifndef STREAMS_NVTX_NAMES
#define STREAMS_NVTX_NAMES 0
#endif

/* A domain handle (NULL: NVTX's default domain); a registered string. */
static inline void *streams_nvtx_domain_create(const char *name) {
#if STREAMS_NVTX_BUILT
    return (void *)nvtxDomainCreateA(name);
#else
    (void)name;
    return NULL;
#endif
}

/* NULL where no tool is attached, or the tool keeps no registered strings:
 * the calls below then send `message` itself. */
static inline void *streams_nvtx_register(void *domain, const char *s) {
#if STREAMS_NVTX_BUILT
    return (void *)nvtxDomainRegisterStringA((nvtxDomainHandle_t)domain, s);
#else
    (void)domain; (void)s;
    return NULL;
#endif
}

#if STREAMS_NVTX_BUILT
/* color: 0 for none, else ARGB (the package sets alpha for an RGB value). */
static inline void streams_nvtx_attributes(nvtxEventAttributes_t *a, const char *message,
                                           void *registered, uint32_t color,
                                           uint32_t category) {
    *a = (nvtxEventAttributes_t){0};
    a->version = NVTX_VERSION;
    a->size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a->category = category;
    if (color) {
        a->colorType = NVTX_COLOR_ARGB;
        a->color = color;
    }
    if (registered) {
        a->messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        a->message.registered = (nvtxStringHandle_t)registered;
    } else {
        a->messageType = NVTX_MESSAGE_TYPE_ASCII;
        a->message.ascii = message;
    }
}
#endif

/* The range's nesting level on this thread (0 for the outermost), or a
 * negative number: no tool, or the tool does not count (NVTX's rule). */
static inline int streams_nvtx_push(void *domain, const char *message, void *registered,
                                    uint32_t color, uint32_t category) {
#if STREAMS_NVTX_BUILT
    nvtxEventAttributes_t a;
    streams_nvtx_attributes(&a, message, registered, color, category);
    if (domain)
        return nvtxDomainRangePushEx((nvtxDomainHandle_t)domain, &a);
    return nvtxRangePushEx(&a);
#else
    (void)domain; (void)message; (void)registered; (void)color; (void)category;
    return -1;
#endif
}

/* The level of the range ended, or a negative number (as push). */
static inline int streams_nvtx_pop(void *domain) {
#if STREAMS_NVTX_BUILT
    if (domain)
        return nvtxDomainRangePop((nvtxDomainHandle_t)domain);
    return nvtxRangePop();
#else
    (void)domain;
    return -1;
#endif
}

static inline void streams_nvtx_mark(void *domain, const char *message, void *registered,
                                     uint32_t color, uint32_t category) {
#if STREAMS_NVTX_BUILT
    nvtxEventAttributes_t a;
    streams_nvtx_attributes(&a, message, registered, color, category);
    if (domain)
        nvtxDomainMarkEx((nvtxDomainHandle_t)domain, &a);
    else
        nvtxMarkEx(&a);
#else
    (void)domain; (void)message; (void)registered; (void)color; (void)category;
#endif
}

static inline void streams_nvtx_name_category(void *domain, uint32_t category,
                                              const char *name) {
#if STREAMS_NVTX_BUILT
    if (domain)
        nvtxDomainNameCategoryA((nvtxDomainHandle_t)domain, category, name);
    else
        nvtxNameCategoryA(category, name);
#else
    (void)domain; (void)category; (void)name;
#endif
}

static inline void streams_nvtx_name_stream(void *stream, const char *name) {
#if STREAMS_NVTX_NAMES
    nvtxNameCudaStreamA((cudaStream_t)stream, name);
#else
    (void)stream; (void)name;
#endif
}

static inline void streams_nvtx_name_event(void *event, const char *name) {
#if STREAMS_NVTX_NAMES
    nvtxNameCudaEventA((cudaEvent_t)event, name);
#else
    (void)event; (void)name;
#endif
}

static inline void streams_nvtx_name_device(int device, const char *name) {
#if STREAMS_NVTX_NAMES
    nvtxNameCudaDeviceA(device, name);
#else
    (void)device; (void)name;
#endif
}

#endif
