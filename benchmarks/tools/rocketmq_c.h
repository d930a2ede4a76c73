/* The C API of the official RocketMQ C++ client that benchmarks/tools/cpp_bench.c and cpp_tail.c call: the
 * librocketmq.so of PyPI's rocketmq 0.4.4 (.venv-interop), declared as its headers do (CProducer.h,
 * CPushConsumer.h, CMessage.h, CMessageExt.h, CSendResult.h, CMQException.h), handles as void pointers. */
#ifndef MQCTL_BENCH_ROCKETMQ_C_H
#define MQCTL_BENCH_ROCKETMQ_C_H

typedef struct {
    int sendStatus; /* 0: SEND_OK */
    char msgId[256];
    long long offset;
} CSendResult;

typedef struct {
    int error;
    int line;
    char file[512];
    char msg[512];
    char type[512];
} CMQException;

void *CreateProducer(const char *groupId);
int SetProducerNameServerAddress(void *producer, const char *namesrv);
int StartProducer(void *producer);
int ShutdownProducer(void *producer);
int DestroyProducer(void *producer);
void *CreateMessage(const char *topic);
int SetMessageTags(void *msg, const char *tags);
int SetMessageBody(void *msg, const char *body);
int SetMessageProperty(void *msg, const char *key, const char *value);
int DestroyMessage(void *msg);
int SendMessageSync(void *producer, void *msg, CSendResult *result);
int SendMessageAsync(void *producer, void *msg, void (*sent)(CSendResult), void (*failed)(CMQException));

void *CreatePushConsumer(const char *groupId);
int SetPushConsumerNameServerAddress(void *consumer, const char *namesrv);
int Subscribe(void *consumer, const char *topic, const char *expression);
int RegisterMessageCallback(void *consumer, int (*callback)(void *consumer, void *msgExt));
int StartPushConsumer(void *consumer);
int ShutdownPushConsumer(void *consumer);
int DestroyPushConsumer(void *consumer);
const char *GetMessageProperty(void *msgExt, const char *key);
int GetMessageQueueId(void *msgExt);

#endif
