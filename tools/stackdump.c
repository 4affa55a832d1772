/* The native stack of every thread of a running process, without a
 * debugger (the GPU machine has no gdb): for a hang in the driver, where
 * faulthandler shows only the Python frames.
 *
 *   gcc -shared -fPIC -O1 -o /tmp/libstackdump.so tools/stackdump.c
 *   STACKDUMP_DIR=/tmp/dump LD_PRELOAD=/tmp/libstackdump.so python ...
 *   bash tools/stackdump.sh PID      (or: kill -USR2 PID)
 *   STACKDUMP_ON_CRASH=1: also at a crash (below)
 *
 * A SIGUSR2 sent to the process (kill, from outside or from the process
 * itself: tests/conftest.py does after STREAMS_TEST_STACKDUMP_AFTER
 * seconds) makes the thread that receives it send SIGUSR2 to every other
 * thread of the process (tgkill); each thread
 * then writes its own backtrace to STACKDUMP_DIR/stack-PID-TID.txt (default
 * /tmp).  A file of its own per thread: no thread waits for another inside
 * a signal handler, and none calls malloc there (a thread may be stopped
 * holding the allocator's lock).  Frames of exported functions (libc,
 * libpython, libcuda's cu* entry points) come with their names; the
 * others as FILE(+OFFSET), for addr2line on the same file.  Diagnostics
 * only: backtrace() is not on POSIX's list of async-signal-safe calls, so
 * the library loads its unwinder once at start, before any signal. */
#define _GNU_SOURCE
#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char dump_dir[512] = "/tmp";

static void dump_self(void) {
    void *frames[96];
    char path[640];
    pid_t tid = (pid_t)syscall(SYS_gettid);
    int n = backtrace(frames, 96);
    int fd;
    snprintf(path, sizeof path, "%s/stack-%d-%d.txt", dump_dir, (int)getpid(), (int)tid);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return;
    backtrace_symbols_fd(frames, n, fd);
    close(fd);
}

static void fan_out(pid_t me) {
    /* getdents64 rather than opendir: no malloc in a handler. */
    char buf[4096];
    int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
    long got;
    if (fd < 0)
        return;
    while ((got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        long at = 0;
        while (at < got) {
            struct {
                unsigned long long ino;
                long long off;
                unsigned short reclen;
                unsigned char type;
                char name[];
            } *d = (void *)(buf + at);
            pid_t tid = (pid_t)atoi(d->name);
            if (tid > 0 && tid != me)
                syscall(SYS_tgkill, getpid(), tid, SIGUSR2);
            at += d->reclen;
        }
    }
    close(fd);
}

/* A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT): every thread's stack
 * as above, the faulting thread's first, then the signal again with its
 * default action.  faulthandler, enabled later, runs first and gives this
 * handler the signal back once it has printed the Python frames. */
static void on_crash(int sig, siginfo_t *info, void *context) {
    struct timespec pause = {0, 300 * 1000 * 1000};
    (void)info;
    (void)context;
    dump_self();
    fan_out((pid_t)syscall(SYS_gettid));
    nanosleep(&pause, NULL);        /* the others write their files */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_signal(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)context;
    /* Sent to the process (kill, from anywhere): this thread asks the
     * others too.  Sent to this thread (tgkill, by fan_out): just its own
     * stack. */
    if (info->si_code == SI_USER)
        fan_out((pid_t)syscall(SYS_gettid));
    dump_self();
}

__attribute__((constructor)) static void stackdump_install(void) {
    struct sigaction action;
    void *warm[4];
    const char *dir = getenv("STACKDUMP_DIR");
    if (dir != NULL && dir[0] != '\0')
        snprintf(dump_dir, sizeof dump_dir, "%s", dir);
    backtrace(warm, 4);     /* loads the unwinder now, not in a handler */
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGUSR2, &action, NULL);
    if (getenv("STACKDUMP_ON_CRASH") != NULL) {
        static const int crashes[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        action.sa_sigaction = on_crash;
        action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
        for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++)
            sigaction(crashes[i], &action, NULL);
    }
}
