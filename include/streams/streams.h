/* Public C header of the `streams` package (streams.get_include()).
 *
 * The handle types are spelled with the same struct tags as the CUDA
 * runtime's cudaStream_t/cudaEvent_t/..., so they are the very same C types,
 * yet a Cython project that cimports `streams` compiles without the CUDA
 * headers: it only ever holds these handles, never dereferences them. */
#ifndef STREAMS_STREAMS_H
#define STREAMS_STREAMS_H

typedef struct CUstream_st *streams_stream_t;
typedef struct CUevent_st *streams_event_t;
typedef struct CUgraph_st *streams_graph_t;
typedef struct CUgraphExec_st *streams_graph_exec_t;

/* A native host function: what Stream.c_launch_host_func and
 * Graph.c_add_host_node run on CUDA's callback thread, with no Python and
 * no GIL.  The same C type as the runtime's cudaHostFn_t on Linux (where
 * CUDART_CB is empty).  It must not call CUDA, and must not wait for work
 * that CUDA has not been asked to run before it. */
typedef void (*streams_host_fn_t)(void *data);

#define STREAMS_C_API_VERSION 2

#endif /* STREAMS_STREAMS_H */
