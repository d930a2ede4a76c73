/* The official RocketMQ C++ client's producer and push consumer for bench_broker_tail.py --client cpp, driven
 * from C as a C/C++ application uses it (benchmarks/tools/cpp_tail.py does the same through the PyPI binding:
 * --client cpp-py).
 *
 * cpp_tail NAMESRV TOPIC GROUP QUEUES RATE COUNT WARM_UP: cpp_tail.py's protocol. A producer and a push
 * consumer (GROUP, new) in this process; probes until every one of the QUEUES queues delivered one; "start";
 * COUNT sends of 1 KiB at RATE msgs/s on an absolute schedule (clock_nanosleep to each due time), each
 * asynchronous (SendMessageAsync) and stamped with CLOCK_MONOTONIC in the property benchSent just before it
 * goes out; the consumer's callback reads the same clock first thing. Then one JSON line {sent, received,
 * failures, latenciesMs, sentNs} (the last two from index WARM_UP on), and shutdown once stdin closes.
 *
 * bench_broker_tail.py compiles this file with the machine's cc against the librocketmq.so of PyPI's
 * rocketmq 0.4.4 (.venv-interop), as bench_ab.py compiles cpp_bench.c; rocketmq_c.h declares that C API.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rocketmq_c.h"

#define SENT "benchSent"
#define MAX_QUEUES 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static char probed[MAX_QUEUES];
static int probed_queues;
static long count, warm_up, received, failures, kept;
static double *latencies_ms;
static long long *sent_ns;

static long long monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int on_message(void *consumer, void *msg) {
    (void)consumer;
    long long now = monotonic_ns(), sent = 0;
    long index = 0;
    const char *stamp = GetMessageProperty(msg, SENT);
    if (!stamp || sscanf(stamp, "%ld %lld", &index, &sent) != 2) return 0;
    pthread_mutex_lock(&lock);
    if (index < 0) {
        int queue = GetMessageQueueId(msg);
        if (queue >= 0 && queue < MAX_QUEUES && !probed[queue]) probed[queue] = 1, probed_queues++;
    } else {
        if (index >= warm_up && kept < count) {
            latencies_ms[kept] = (now - sent) / 1e6;
            sent_ns[kept++] = sent;
        }
        received++;
    }
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    return 0; /* CONSUME_SUCCESS */
}

static void failed(const char *why) {
    pthread_mutex_lock(&lock);
    if (failures++ == 0) fprintf(stderr, "cpp_tail: a send failed: %s\n", why);
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

static void on_sent(CSendResult result) {
    if (result.sendStatus != 0) failed("status not SEND_OK");
}

static void on_failed(CMQException e) { failed(e.msg); }

/* A new message of `body` stamped with its index and the clock, to be sent at once. */
static void *stamped(const char *topic, long index, const char *body) {
    void *msg = CreateMessage(topic);
    if (!msg) abort();
    char stamp[64];
    SetMessageBody(msg, body);
    snprintf(stamp, sizeof stamp, "%ld %lld", index, monotonic_ns());
    SetMessageProperty(msg, SENT, stamp);
    return msg;
}

/* Wait on `changed` until `done` holds or `seconds` pass; the lock is held around the call. */
static int wait_until(int (*done)(void), double seconds) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    long long ns = deadline.tv_nsec + (long long)(seconds * 1e9);
    deadline.tv_sec += ns / 1000000000LL;
    deadline.tv_nsec = ns % 1000000000LL;
    while (!done())
        if (pthread_cond_timedwait(&changed, &lock, &deadline) != 0) return done();
    return 1;
}

static int queues;
static int all_probed(void) { return probed_queues >= queues; }
static int all_in(void) { return received + failures >= count; }

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: cpp_tail NAMESRV TOPIC GROUP QUEUES RATE COUNT WARM_UP\n");
        return 2;
    }
    const char *namesrv = argv[1], *topic = argv[2];
    queues = atoi(argv[4]);
    double rate = atof(argv[5]);
    count = atol(argv[6]);
    warm_up = atol(argv[7]);
    if (queues <= 0 || queues > MAX_QUEUES || rate <= 0 || count <= 0) {
        fprintf(stderr, "cpp_tail: QUEUES (1-%d), RATE and COUNT must be positive\n", MAX_QUEUES);
        return 2;
    }
    latencies_ms = calloc(count, sizeof *latencies_ms);
    sent_ns = calloc(count, sizeof *sent_ns);
    static char body[1025];
    memset(body, 'x', 1024);

    void *consumer = CreatePushConsumer(argv[3]), *producer = CreateProducer("MQCTL_CPP_TAIL");
    if (!consumer || !producer || SetPushConsumerNameServerAddress(consumer, namesrv) != 0 ||
        Subscribe(consumer, topic, "*") != 0 || RegisterMessageCallback(consumer, on_message) != 0 ||
        SetProducerNameServerAddress(producer, namesrv) != 0 || StartPushConsumer(consumer) != 0 ||
        StartProducer(producer) != 0) {
        fprintf(stderr, "cpp_tail: the clients did not start\n");
        return 1;
    }
    for (long long give_up = monotonic_ns() + 60000000000LL;;) { /* first sends may fail: retried */
        CSendResult result;
        void *msg = stamped(topic, -1, body);
        SendMessageSync(producer, msg, &result);
        DestroyMessage(msg);
        pthread_mutex_lock(&lock);
        int ready = wait_until(all_probed, 0.02);
        pthread_mutex_unlock(&lock);
        if (ready) break;
        if (monotonic_ns() > give_up) {
            fprintf(stderr, "cpp_tail: probes received from %d of %d queues\n", probed_queues, queues);
            return 1;
        }
    }
    printf("start\n");
    fflush(stdout);
    long long t0 = monotonic_ns() + 100000000LL;
    for (long i = 0; i < count; i++) {
        long long due = t0 + (long long)(i * 1e9 / rate);
        struct timespec at = {due / 1000000000LL, due % 1000000000LL};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) != 0) {
        }
        void *msg = stamped(topic, i, body);
        if (SendMessageAsync(producer, msg, on_sent, on_failed) != 0) failed("SendMessageAsync refused it");
        DestroyMessage(msg);
    }
    pthread_mutex_lock(&lock);
    wait_until(all_in, 30);
    printf("{\"sent\": %ld, \"received\": %ld, \"failures\": %ld, \"latenciesMs\": [", count, received, failures);
    for (long i = 0; i < kept; i++) printf("%s%.6f", i ? ", " : "", latencies_ms[i]);
    printf("], \"sentNs\": [");
    for (long i = 0; i < kept; i++) printf("%s%lld", i ? ", " : "", sent_ns[i]);
    printf("]}\n");
    fflush(stdout);
    pthread_mutex_unlock(&lock);
    while (getchar() != EOF) { /* the caller reads this process's costs from /proc before its threads end */
    }
    ShutdownProducer(producer);
    ShutdownPushConsumer(consumer);
    DestroyProducer(producer);
    DestroyPushConsumer(consumer);
    return 0;
}
