"""One Kafka operation as one SASL/SCRAM-SHA-512 user, with confluent-kafka (librdkafka).

usage: acl_client.py BOOTSTRAP USER PASSWORD ACTION [ARGS...]

Prints "ok ..." when the operation succeeded, else the Kafka error's name (e.g.
TOPIC_AUTHORIZATION_FAILED) on its own line, so the test can assert on which.

actions:
  topics                       the topic names Metadata shows, sorted
  create TOPIC | delete TOPIC  admin topic create / delete
  describe-configs TOPIC       the topic's configs
  produce TOPIC                one record, acks=all, not idempotent
  idempotent-produce TOPIC     one record from an idempotent producer (InitProducerId)
  txn-produce TOPIC TXID       one record in a committed transaction
  consume TOPIC GROUP          subscribe in GROUP, read one record, commit its offset
  topic-ops TOPIC              the operations Metadata says the user may do on the topic
  cluster-ops                  the operations DescribeCluster says the user may do on the cluster
  group-ops GROUP              the operations DescribeGroups says the user may do on the group
  scram-alter USER PASSWORD    AlterUserScramCredentials (SCRAM-SHA-512, 8192 iterations)
  scram-describe USER          DescribeUserScramCredentials
  quota-produce TOPIC BYTES    BYTES in 16 KiB records, acks=all; the broker throttle librdkafka saw
  quota-consume TOPIC BYTES    read BYTES from the start (no group); the broker throttle it saw
                               (both print "ok throttled MAX_MS in SECONDS s")
"""
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (AdminClient, ConfigResource, NewTopic, ScramCredentialInfo,
                                   ScramMechanism, UserScramCredentialUpsertion)

bootstrap, user, password, action, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
# Errors outside any request (a refused login, a fatal producer error) reach only the error
# callback; when an operation fails, the first of those is what is printed.
client_errors = []
conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user, "sasl.password": password, "error_cb": client_errors.append}
TIMEOUT = 20


def error_name(e):
    # A fatal producer error raised inside a callback arrives as the cause of a SystemError.
    if isinstance(e, SystemError) and e.__cause__ is not None:
        e = e.__cause__
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0].name()
    if isinstance(e, KafkaError):
        return e.name()
    return f"{type(e).__name__}: {e}"


def produce(topic, extra):
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": TIMEOUT * 1000, **extra})
    failures = []
    producer.produce(topic, b"record", on_delivery=lambda err, _m: err and failures.append(err))
    producer.flush(TIMEOUT + 5)
    fatal = [c for c in client_errors if c.fatal()]
    if fatal:
        return fatal[0].name()
    return error_name(failures[0]) if failures else "ok produced"


def txn_produce(topic, txid):
    producer = Producer({**conf, "transactional.id": txid, "transaction.timeout.ms": 30000})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"txn-record")
    producer.commit_transaction(TIMEOUT)
    return "ok committed"


class ConsumeError(Exception):
    """A consumer's error, by its Kafka name."""


def messages(consumer, seconds):
    """The consumer's messages for up to `seconds`; an error ends them with a ConsumeError."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        m = consumer.poll(1)
        if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
            continue
        if m.error():
            raise ConsumeError(m.error().name())
        yield m


def consume(topic, group):
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        for m in messages(consumer, TIMEOUT):
            consumer.commit(message=m, asynchronous=False)
            return "ok consumed"
        return "TIMED_OUT"
    except ConsumeError as e:
        return str(e)
    finally:
        consumer.close()


class Throttle:
    """The largest broker throttle time librdkafka's statistics reported (KIP-219: the broker's
    throttle_time_ms, which librdkafka also waits out before its next request)."""

    def __init__(self):
        self.max_ms = 0

    def stats(self, raw):
        for broker in json.loads(raw).get("brokers", {}).values():
            self.max_ms = max(self.max_ms, broker.get("throttle", {}).get("max", 0))


def quota_produce(topic, total):
    throttle = Throttle()
    producer = Producer({**conf, "acks": "all", "linger.ms": 5, "statistics.interval.ms": 200, "stats_cb": throttle.stats})
    failures = []
    value = b"q" * 16384
    started = time.time()
    for _ in range(total // len(value)):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda err, _m: err and failures.append(err))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.time() - started
    producer.poll(0.5)  # one more statistics callback
    if failures:
        return error_name(failures[0])
    return f"ok throttled {throttle.max_ms} in {elapsed:.1f} s"


def quota_consume(topic, total):
    from confluent_kafka import TopicPartition
    throttle = Throttle()
    consumer = Consumer({**conf, "group.id": "quota-reader", "enable.auto.commit": False,
                         "statistics.interval.ms": 200, "stats_cb": throttle.stats})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, started = 0, time.time()
    try:
        for m in messages(consumer, 120):
            got += len(m.value() or b"")
            if got >= total:
                break
        elapsed = time.time() - started
        consumer.poll(0.5)  # one more statistics callback
    except ConsumeError as e:
        return str(e)
    finally:
        consumer.close()
    if got < total:
        return f"TIMED_OUT after {got} bytes"
    return f"ok throttled {throttle.max_ms} in {elapsed:.1f} s"


admin = AdminClient(conf)


def operations(ops):
    return "ok ops " + ",".join(sorted(op.name for op in ops or []))


def main():
    if action == "topics":
        names = sorted(t for t in admin.list_topics(timeout=TIMEOUT).topics if not t.startswith("__"))
        return "ok topics " + ",".join(names)
    if action == "create":
        admin.create_topics([NewTopic(args[0], 1, 1)])[args[0]].result(timeout=TIMEOUT)
        return "ok created"
    if action == "delete":
        admin.delete_topics([args[0]])[args[0]].result(timeout=TIMEOUT)
        return "ok deleted"
    if action == "describe-configs":
        resource = ConfigResource("topic", args[0])
        configs = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)
        return f"ok configs {len(configs)}"
    if action == "produce":
        return produce(args[0], {})
    if action == "idempotent-produce":
        return produce(args[0], {"enable.idempotence": True})
    if action == "txn-produce":
        return txn_produce(args[0], args[1])
    if action == "consume":
        return consume(args[0], args[1])
    if action == "topic-ops":
        topics = admin.describe_topics(TopicCollection([args[0]]), include_authorized_operations=True)
        return operations(topics[args[0]].result(timeout=TIMEOUT).authorized_operations)
    if action == "cluster-ops":
        cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=TIMEOUT)
        return operations(cluster.authorized_operations)
    if action == "group-ops":
        groups = admin.describe_consumer_groups([args[0]], include_authorized_operations=True)
        return operations(groups[args[0]].result(timeout=TIMEOUT).authorized_operations)
    if action == "scram-alter":
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(args[0], info, args[1].encode())])
        futures[args[0]].result(timeout=TIMEOUT)
        return "ok altered"
    if action == "scram-describe":
        described = admin.describe_user_scram_credentials([args[0]])[args[0]].result(timeout=TIMEOUT)
        infos = described.scram_credential_infos
        return "ok scram " + ",".join(f"{i.mechanism.name}:{i.iterations}" for i in infos)
    if action == "quota-produce":
        return quota_produce(args[0], int(args[1]))
    if action == "quota-consume":
        return quota_consume(args[0], int(args[1]))
    raise SystemExit(f"unknown action {action}")


try:
    print(main())
except Exception as e:  # the test asserts on the error's name
    admin.poll(1)
    relevant = [c for c in client_errors if c.code() == KafkaError._AUTHENTICATION or c.fatal()]
    print(relevant[0].name() if relevant else error_name(e))
sys.stdout.flush()
