/* The driver's view of a kernel node (CUDA_KERNEL_NODE_PARAMS_v2, the ABI
 * of CUDA 12.0 on), declared here so that no driver header is needed.  The
 * runtime's cudaKernelNodeParams cannot name a kernel of another library
 * (a CUfunction of a module, as CuPy launches): the driver's form carries
 * the CUfunction, the CUkernel and the context as CUDA recorded them, and
 * an update that passes them back unchanged changes only what it means to. */
#ifndef STREAMS_KERNEL_NODE_H
#define STREAMS_KERNEL_NODE_H

#include <stddef.h>

typedef struct {
    void *func;                     /* CUfunction, or NULL when kern names the kernel */
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared_mem;
    void **kernel_params;           /* one pointer to each argument's bytes, or NULL */
    void **extra;                   /* CU_LAUNCH_PARAM_* list, or NULL */
    void *kern;                     /* CUkernel (a library's kernel: cudaKernel_t) */
    void *ctx;                      /* CUcontext */
} streams_kernel_node_params;

typedef char streams_kernel_node_params_check[
    sizeof(streams_kernel_node_params) == 8 + 7 * 4 + 4 + 8 * 4 ? 1 : -1];

/* The entries of `extra` (cuda.h's CU_LAUNCH_PARAM_*). */
#define STREAMS_LAUNCH_PARAM_END ((void *)0x00)
#define STREAMS_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define STREAMS_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
/* The ABI the entry points are asked for: cuFuncGetParamInfo and
 * cuKernelGetParamInfo came with CUDA 12.4. */
#define STREAMS_KERNEL_NODE_VERSION 12040

typedef int (*streams_kernel_node_get_fn)(void *node, streams_kernel_node_params *out);
typedef int (*streams_exec_kernel_node_set_fn)(void *exec, void *node,
                                               const streams_kernel_node_params *params);
typedef int (*streams_kernel_node_set_fn)(void *node, const streams_kernel_node_params *params);
typedef int (*streams_param_info_fn)(void *func, size_t index, size_t *offset, size_t *size);
typedef int (*streams_get_name_fn)(const char **name, void *func);
typedef int (*streams_func_attribute_fn)(int *value, int attribute, void *func);
typedef int (*streams_kernel_attribute_fn)(int *value, int attribute, void *kernel, int dev);
typedef int (*streams_kernel_function_fn)(void **func, void *kernel);

#endif /* STREAMS_KERNEL_NODE_H */
