// Kernels that set the condition of a conditional graph node from a device
// value, so that Python users drive if/while/switch nodes without writing
// CUDA C.  Shipped as streams/kernels/conditional.ptx (regenerate with
// tools/build/gen_builtin_ptx.py), apart from builtin.ptx: cudaGraphSetConditional
// is an extern function the driver resolves when it loads the module, and a
// driver that cannot must not take the other built-in kernels down with it.
// Launch them with one thread: concurrent sets of one condition are undefined.
#include <cuda_runtime.h>

// cond = *value (if/while: nonzero runs the body; switch: the body's index).
extern "C" __global__ void streams_set_condition(cudaGraphConditionalHandle cond,
                                                 const unsigned int *value) {
    if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(cond, *value);
}
// cond = (*counter < n): a while node whose body advances the counter runs
// until it reaches n.
extern "C" __global__ void streams_set_condition_lt(cudaGraphConditionalHandle cond,
                                                    const unsigned int *counter,
                                                    unsigned int n) {
    if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(cond, *counter < n ? 1u : 0u);
}
