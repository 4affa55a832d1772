// Source of the built-in kernels, shipped as streams/kernels/builtin.ptx
// (regenerate with tools/build/gen_builtin_ptx.py; PTX ISA lowered to 7.0 so that
// any driver of a CUDA 12 or 13 build can JIT it).
extern "C" __global__ void streams_empty() {}
extern "C" __global__ void streams_spin(unsigned long long ns) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1)); } while (t1 - t0 < ns);
}
extern "C" __global__ void streams_fill_u32(unsigned int *p, unsigned int v, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) p[i] = v;
}
extern "C" __global__ void streams_increment_u32(unsigned int *p, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) p[i] += 1;
}
// A timeline semaphore's operations where the device has no 64-bit stream
// memory operations (streams._semaphore, path "kernel"), one thread each,
// with their meaning: the signal writes `value` after a system-scope fence,
// as cuStreamWriteValue64 does; the wait returns once the cyclic comparison
// of cuStreamWaitValue64 holds, (long long)(*p - value) >= 0, and fences
// before the work after it.  Volatile loads and stores of global memory are
// relaxed at system scope: they see, and are seen by, the host and other
// processes through host-mapped memory.
extern "C" __global__ void streams_semaphore_signal(unsigned long long *p, unsigned long long value) {
    __threadfence_system();
    *(volatile unsigned long long *)p = value;
}
extern "C" __global__ void streams_semaphore_wait(const unsigned long long *p, unsigned long long value) {
    while ((long long)(*(const volatile unsigned long long *)p - value) < 0)
        __nanosleep(500);
    __threadfence_system();
}
// Launch-overhead probes with 4 and 16 parameters of mixed types (pointers,
// 64- and 32-bit integers, floats, doubles): the argument rows of the
// benchmark.  They do nothing, so only the launch is measured.
extern "C" __global__ void streams_args4(void *p0, void *p1, unsigned long long n, float x) {}
extern "C" __global__ void streams_args16(void *p0, void *p1, void *p2, void *p3,
    unsigned long long n0, unsigned long long n1, unsigned long long n2, unsigned long long n3,
    unsigned int u0, unsigned int u1, unsigned int u2, unsigned int u3,
    float f0, float f1, double d0, double d1) {}
