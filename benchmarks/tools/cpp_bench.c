/* The official RocketMQ C++ client's send load for benchmarks/tools/bench_ab.py, driven from C (load `cpp`).
 *
 * cpp_bench NAMESRV TOPIC THREADS SECONDS: THREADS pthreads share one producer, each calling
 * SendMessageSync with a new 1 KiB message in turn (RocketMQ's benchmark Producer with N threads, and
 * what benchmarks/tools/cpp_bench.py does through the PyPI binding); 1 s warm-up, then SECONDS timed. Prints
 * "start" when the timed window opens and one JSON line when it closes, as ons_bench.js does:
 * {count, failures, seconds, clientCpu (share of one core), p50Ms, p99Ms}.
 *
 * Why C: through the binding, 16 Python threads drop and take the GIL around each of the five ctypes
 * calls of a send, and that convoy (futex waits, context switches) cost the client ~210 us of CPU per
 * send, so on two cores the client, not the broker, set the pace. A C or C++ application pays none of
 * it. bench_ab.py compiles this file with the machine's cc against the librocketmq.so that PyPI's
 * rocketmq 0.4.4 ships (scripts/install-interop-clients.sh); rocketmq_c.h declares that library's C API.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rocketmq_c.h"

static void *producer;
static const char *topic;
static char body[1025];
static atomic_int stop;

typedef struct {
    double *rts; /* ms */
    size_t n, cap;
    long failures;
} Worker;

static double now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *loop(void *arg) {
    Worker *w = arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        void *msg = CreateMessage(topic);
        if (!msg) abort();
        SetMessageTags(msg, "bench");
        SetMessageBody(msg, body);
        CSendResult result;
        double begun = now(CLOCK_MONOTONIC);
        int ok = SendMessageSync(producer, msg, &result) == 0 && result.sendStatus == 0;
        double rt = (now(CLOCK_MONOTONIC) - begun) * 1000;
        DestroyMessage(msg);
        if (w->n == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 65536;
            w->rts = realloc(w->rts, w->cap * sizeof *w->rts);
            if (!w->rts) abort();
        }
        w->rts[w->n++] = rt;
        w->failures += !ok;
    }
    return NULL;
}

/* THREADS senders for SECONDS; the workers' results are left in `workers`. */
static void run(Worker *workers, int threads, double seconds) {
    pthread_t *ids = calloc(threads, sizeof *ids);
    atomic_store(&stop, 0);
    for (int i = 0; i < threads; i++)
        if (pthread_create(&ids[i], NULL, loop, &workers[i]) != 0) abort();
    struct timespec pause = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&pause, NULL);
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++) pthread_join(ids[i], NULL);
    free(ids);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: cpp_bench NAMESRV TOPIC THREADS SECONDS\n");
        return 2;
    }
    topic = argv[2];
    int threads = atoi(argv[3]);
    double seconds = atof(argv[4]);
    if (threads <= 0 || seconds <= 0) {
        fprintf(stderr, "cpp_bench: THREADS and SECONDS must be positive\n");
        return 2;
    }
    memset(body, 'x', 1024);
    producer = CreateProducer("MQCTL_CPP_BENCH");
    if (!producer || SetProducerNameServerAddress(producer, argv[1]) != 0 || StartProducer(producer) != 0) {
        fprintf(stderr, "cpp_bench: the producer did not start\n");
        return 1;
    }
    Worker *warm = calloc(threads, sizeof *warm), *timed = calloc(threads, sizeof *timed);
    run(warm, threads, 1.0);
    printf("start\n");
    fflush(stdout);
    double wall = now(CLOCK_MONOTONIC), cpu = now(CLOCK_PROCESS_CPUTIME_ID);
    run(timed, threads, seconds);
    double elapsed = now(CLOCK_MONOTONIC) - wall, used = now(CLOCK_PROCESS_CPUTIME_ID) - cpu;
    size_t total = 0;
    long failures = 0;
    for (int i = 0; i < threads; i++) total += timed[i].n, failures += timed[i].failures;
    double *rts = malloc((total ? total : 1) * sizeof *rts);
    size_t at = 0;
    for (int i = 0; i < threads; i++) {
        memcpy(rts + at, timed[i].rts, timed[i].n * sizeof *rts);
        at += timed[i].n;
    }
    qsort(rts, total, sizeof *rts, by_value);
#define Q(q) (total ? rts[(size_t)((q) * total) < total ? (size_t)((q) * total) : total - 1] : 0.0)
    printf("{\"count\": %zu, \"failures\": %ld, \"seconds\": %.6f, \"clientCpu\": %.4f, \"p50Ms\": %.4f, "
           "\"p99Ms\": %.4f}\n",
           total - failures, failures, elapsed, used / elapsed, Q(0.5), Q(0.99));
    fflush(stdout);
    ShutdownProducer(producer);
    DestroyProducer(producer);
    return 0;
}
