/* What the host charges a thread for the kernel work a message at a fixed rate costs: a VM exit, a wake-up
 * (by another process's write, by the thread's own timer), a first store into a page, and a piece of
 * cache-hungry work after a sleep against the same work back to back. Each figure is the measuring
 * thread's own CPU time (CLOCK_THREAD_CPUTIME_ID) per operation, the median of REPS runs: CPU a thread is
 * charged for, which the host's load moves much less than it moves latencies. No project code: it tells a
 * machine's costs apart from the broker's (docs/performance.md, "What this machine's tail is made of").
 *
 *     cc -O2 -o /tmp/host_costs benchmarks/tools/host_costs.c && /tmp/host_costs
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#define REPS 5
#define PAGE 4096

static double cpu_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v) {
    qsort(v, REPS, sizeof *v, cmp);
    return v[REPS / 2];
}

/* Each returns µs of this thread's CPU per operation. */

static double exits(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    int n = 20000;
    double t = cpu_us();
    for (int i = 0; i < n; i++) __cpuid(0, a, b, c, d); /* CPUID always exits to the hypervisor */
    return (cpu_us() - t) / n;
#else
    return -1;
#endif
}

static double syscalls(void) {
    int n = 100000;
    double t = cpu_us();
    for (int i = 0; i < n; i++) getppid();
    return (cpu_us() - t) / n;
}

/* A child writes a byte every millisecond; this thread sleeps in epoll_wait with ``timeout`` (ms, -1:
 * none, so no timer is armed for the sleep) and is woken by each. */
static double woken(int timeout) {
    int n = 1000, p[2];
    if (pipe(p)) return -1;
    pid_t child = fork();
    if (child == 0) {
        struct timespec ms = {0, 1000000};
        for (int i = 0; i < n; i++) {
            nanosleep(&ms, 0);
            if (write(p[1], "x", 1) != 1) _exit(1);
        }
        _exit(0);
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev);
    char buf[256];
    int got = 0;
    double t = cpu_us();
    while (got < n) {
        if (epoll_wait(ep, &ev, 1, timeout) > 0) {
            ssize_t r = read(p[0], buf, sizeof buf);
            if (r > 0) got += r;
        }
    }
    double spent = (cpu_us() - t) / n;
    waitpid(child, 0, 0);
    close(ep), close(p[0]), close(p[1]);
    return spent;
}

/* This thread's own 1 ms timer wakes it (an epoll_wait that times out). */
static double timer_woken(void) {
    int n = 1000, ep = epoll_create1(0);
    struct epoll_event ev;
    double t = cpu_us();
    for (int i = 0; i < n; i++) epoll_wait(ep, &ev, 1, 1);
    close(ep);
    return (cpu_us() - t) / n;
}

/* The first store into each page of a fresh mapping: anonymous memory, or a file's shared mapping after
 * fallocate with MADV_RANDOM (how the broker maps the CommitLog it writes); ``again`` stores into the
 * same pages a second time (no fault: the cost of the store itself). */
static double first_store(int file, int again) {
    size_t pages = 4096, len = pages * PAGE;
    int fd = -1;
    char path[] = "/tmp/host_costs_XXXXXX";
    if (file) {
        fd = mkstemp(path);
        if (fd < 0 || posix_fallocate(fd, 0, len)) return -1;
        unlink(path);
    }
    char *m = mmap(0, len, PROT_READ | PROT_WRITE, file ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
    if (m == MAP_FAILED) return -1;
    if (file) madvise(m, len, MADV_RANDOM);
    if (again)
        for (size_t i = 0; i < pages; i++) m[i * PAGE] = 1;
    double t = cpu_us();
    for (size_t i = 0; i < pages; i++) m[i * PAGE] = 2;
    double spent = (cpu_us() - t) / pages;
    munmap(m, len);
    if (fd >= 0) close(fd);
    return spent;
}

/* 2,000 dependent reads spread over 16 MB (caches and TLB), after a 1 ms sleep or back to back: what a
 * message's work costs more when the thread comes back to a core after sleeping. */
static size_t *ring;
#define RING (16u << 20) / sizeof(size_t)

static double work(int sleep_first) {
    int n = 500;
    double spent = 0;
    size_t at = 0;
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < n; i++) {
        if (sleep_first) nanosleep(&ms, 0);
        double t = cpu_us();
        for (int j = 0; j < 2000; j++) at = ring[at];
        spent += cpu_us() - t;
    }
    if (at == RING) puts(""); /* keeps the chain's reads */
    return spent / n;
}

int main(void) {
    ring = malloc(RING * sizeof *ring);
    srand(1);
    for (size_t i = 0; i < RING; i++) ring[i] = i;
    for (size_t i = RING - 1; i > 0; i--) { /* one random cycle through the ring (Sattolo) */
        size_t j = ((size_t)rand() * RAND_MAX + rand()) % i, x = ring[i];
        ring[i] = ring[j], ring[j] = x;
    }
    struct {
        const char *what;
        double v[REPS];
    } rows[] = {
        {"VM exit (CPUID)"},
        {"system call (getppid)"},
        {"wake-up by a pipe write, no timer armed"},
        {"wake-up by a pipe write, a 1 s timer armed"},
        {"wake-up by its own 1 ms timer"},
        {"first store into a page, anonymous"},
        {"first store into a page, fallocated file, MADV_RANDOM"},
        {"store into a page already mapped"},
        {"2,000 dependent reads over 16 MB, back to back"},
        {"the same after a 1 ms sleep"},
    };
    for (int r = 0; r < REPS; r++) {
        rows[0].v[r] = exits();
        rows[1].v[r] = syscalls();
        rows[2].v[r] = woken(-1);
        rows[3].v[r] = woken(1000);
        rows[4].v[r] = timer_woken();
        rows[5].v[r] = first_store(0, 0);
        rows[6].v[r] = first_store(1, 0);
        rows[7].v[r] = first_store(0, 1);
        rows[8].v[r] = work(0);
        rows[9].v[r] = work(1);
    }
    double load[1];
    getloadavg(load, 1);
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        printf("%-56s %8.2f us CPU (median of %d)\n", rows[i].what, median(rows[i].v), REPS);
    printf("load average %.2f\n", load[0]);
    return 0;
}
