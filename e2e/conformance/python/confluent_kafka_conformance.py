"""The confluent-kafka (librdkafka) part of the kaas conformance suite.

Round trips against one broker with confluent-kafka, the Python binding of librdkafka (the
version pinned in scripts/install-deps.sh), printing its release and librdkafka's, then one line
per scenario:

    VERSION <tab> X.Y.Z (librdkafka X.Y.Z)
    RESULT <tab> scenario <tab> PASS|FAIL <tab> reason

librdkafka's producer is not idempotent by default: the produce scenarios turn on
enable.idempotence with acks=all. Otherwise the settings are librdkafka's, except timeouts
(every step is bounded by WAIT_S) and the group/transactional ids.

Usage: python confluent_kafka_conformance.py BOOTSTRAP [scenario ...]
"""

import os
import sys
import threading
import time

import confluent_kafka
from confluent_kafka import (OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, KafkaError,
                             KafkaException, Producer, TopicCollection, TopicPartition)
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType

from conformance_common import RECORDS, RUN, WAIT_S, check, result, topic_name, version

BOOTSTRAP = ""


def topic(scenario):
    return topic_name("ckpy", scenario)


def admin_client():
    # socket.timeout.ms is the default request_timeout/operation_timeout of every admin call.
    return AdminClient({"bootstrap.servers": BOOTSTRAP, "socket.timeout.ms": WAIT_S * 1000})


def wait(future):
    """The result of an admin call's future, bounded (the call itself is bounded by WAIT_S)."""
    return future.result(timeout=WAIT_S + 5)


def wait_all(futures):
    return {k: wait(f) for k, f in futures.items()}


def create_topic(name, partitions, configs=None):
    a = admin_client()
    wait_all(a.create_topics([NewTopic(name, partitions, 1, config=configs or {})],
                             operation_timeout=WAIT_S, request_timeout=WAIT_S))


def producer(extra=None):
    conf = {"bootstrap.servers": BOOTSTRAP, "message.timeout.ms": WAIT_S * 1000,
            "socket.timeout.ms": WAIT_S * 1000}
    conf.update(extra or {})
    return Producer(conf)


def consumer(extra=None):
    conf = {"bootstrap.servers": BOOTSTRAP, "enable.auto.commit": False, "socket.timeout.ms": WAIT_S * 1000}
    conf.update(extra or {})
    return Consumer(conf)


def produce(scenario):
    t = topic(scenario)
    create_topic(t, 3)
    p = producer({"enable.idempotence": True, "acks": "all"})
    acked = []  # (partition, offset, error), in the order of the delivery reports
    for i in range(RECORDS):
        p.produce(t, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3,
                  headers=[("h", f"x{i}".encode())],
                  on_delivery=lambda err, m: acked.append((m.partition(), m.offset(), err)))
        p.poll(0)
    left = p.flush(WAIT_S)
    check(left == 0, f"{left} records not acknowledged within {WAIT_S} s")
    check(len(acked) == RECORDS, f"{len(acked)} delivery reports, expected {RECORDS}")
    nxt = {}
    for partition, offset, err in acked:
        check(err is None, f"delivery failed: {err}")
        want = nxt.get(partition, 0)
        check(offset == want, f"partition {partition} acked offset {offset}, expected {want}")
        nxt[partition] = want + 1
    return t


def poll_until(c, n):
    """Up to n records within WAIT_S; the last error librdkafka reported, if any, goes into
    the failure reason (so that a broker error shows in the table)."""
    got, errors = [], []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                errors.append(m.error())
            continue
        got.append(m)
    return got, errors


def consumed(got, errors, want):
    reason = f"consumed {len(got)} records, expected {want}"
    if errors:
        reason += f" (last consumer error: {errors[-1]})"
    check(len(got) == want, reason)


def verify(got, errors, want):
    consumed(got, errors, want)
    last = {}
    for r in got:
        i = int(r.key().decode()[1:])
        check(r.value() == f"v{i}".encode(), f"record k{i} has value {r.value()!r}")
        check(list(r.headers() or []) == [("h", f"x{i}".encode())], f"record k{i} has headers {r.headers()}")
        check(r.partition() == i % 3, f"record k{i} on partition {r.partition()}")
        check(last.get(r.partition(), -1) < i, f"partition {r.partition()} out of order at k{i}")
        last[r.partition()] = i


def known(call):
    """`call`'s answer once the broker answering it knows the topic: a multi-node Kafka (and
    a single-node KRaft broker, a moment after its controller) applies a topic change from the
    metadata log after the call that made it returns, so UNKNOWN_TOPIC_OR_PART right after a
    create is retried within WAIT_S (Apache Kafka 4.4 was seen to answer it once)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return call()
        except KafkaException as e:
            unknown = e.args and e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def scenario_admin():
    t = topic("admin")
    a = admin_client()
    cluster = wait(a.describe_cluster(request_timeout=WAIT_S))
    check(cluster.nodes, "describe_cluster returned no brokers")
    wait_all(a.create_topics([NewTopic(t, 2, 1, config={"retention.ms": "3600000"})],
                             operation_timeout=WAIT_S, request_timeout=WAIT_S))
    known(lambda: wait_all(a.create_partitions([NewPartitions(t, 4)], operation_timeout=WAIT_S, request_timeout=WAIT_S)))
    deadline = time.monotonic() + WAIT_S
    while True:
        n = len(known(lambda: wait(a.describe_topics(TopicCollection([t]), request_timeout=WAIT_S)[t])).partitions)
        if n == 4:
            break
        check(time.monotonic() < deadline, f"{n} partitions after increasing to 4")
        time.sleep(0.1)
    res = ConfigResource(ResourceType.TOPIC, t)
    entry = known(lambda: wait(a.describe_configs([res], request_timeout=WAIT_S)[res])).get("retention.ms")
    value = entry.value if entry else None
    check(value == "3600000", f"retention.ms is {value}")
    wait_all(a.delete_topics([t], operation_timeout=WAIT_S, request_timeout=WAIT_S))


def scenario_produce():
    produce("produce idempotent")


def scenario_consume_assign():
    t = produce("consume assign")
    # confluent-kafka wants a group.id even for assign(); the consumer neither joins nor commits.
    c = consumer({"group.id": f"conf-ckpy-assign-{RUN}"})
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for p in range(3)])
        verify(*poll_until(c, RECORDS), RECORDS)
    finally:
        c.close()


def group(protocol):
    t = produce(f"group {protocol}")
    g = f"conf-ckpy-{protocol}-{RUN}"
    c = consumer({"group.id": g, "group.protocol": protocol, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([t])
        got, errors = poll_until(c, RECORDS)
        reason = f"no partitions assigned within {WAIT_S} s (group never joined)"
        if errors:
            reason += f" (last consumer error: {errors[-1]})"
        check(got or c.assignment(), reason)
        verify(got, errors, RECORDS)
        c.commit(asynchronous=False)
    finally:
        c.close()
    a = admin_client()
    offsets = wait(a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)], request_timeout=WAIT_S)[g])
    total = sum(tp.offset for tp in offsets.topic_partitions)
    check(len(offsets.topic_partitions) == 3 and total == RECORDS,
          f"committed offsets add up to {total} over {len(offsets.topic_partitions)} partitions, "
          f"expected {RECORDS} over 3")
    desc = wait(a.describe_consumer_groups([g], request_timeout=WAIT_S)[g])
    kind = getattr(desc.type, "name", str(desc.type)).lower()
    check(kind == protocol, f"group type {desc.type}, expected {protocol}")


def scenario_transactions():
    t = topic("transactions")
    create_topic(t, 1)
    # Another release run beside this one passes its own id (CONFORMANCE_TXN_ID).
    p = producer({"transactional.id": os.environ.get("CONFORMANCE_TXN_ID", "conformance-ckpy-txn")})
    p.init_transactions(WAIT_S)
    for n, commit in ((10, True), (10, False), (1, True)):
        p.begin_transaction()
        for _ in range(n):
            p.produce(t, value=b"committed" if commit else b"aborted")
        left = p.flush(WAIT_S)
        check(left == 0, f"{left} transactional records not acknowledged within {WAIT_S} s")
        (p.commit_transaction if commit else p.abort_transaction)(WAIT_S)
    c = consumer({"group.id": f"conf-ckpy-txn-{RUN}", "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(t, 0, OFFSET_BEGINNING)])
        got, errors = poll_until(c, 11)
        # Wait a little longer: a read_committed consumer must not see the aborted ones.
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(m)
        check(all(r.value() == b"committed" for r in got), "read_committed consumer saw aborted records")
        consumed(got, errors, 11)
    finally:
        c.close()


SCENARIOS = {
    "admin": scenario_admin,
    "produce idempotent": scenario_produce,
    "consume assign": scenario_consume_assign,
    "group classic": lambda: group("classic"),
    "group consumer": lambda: group("consumer"),
    "transactions": scenario_transactions,
}


def run(fn):
    """Runs a scenario in a daemon thread, bounded like the Java program's (a librdkafka call
    the broker leaves unanswered must not hold up the scenarios after it); returns the failure
    reason, or None."""
    outcome = []

    def target():
        try:
            fn()
            outcome.append(None)
        except Exception as e:  # noqa: BLE001 - every failure is a result to report
            if isinstance(e, KafkaException) and e.args:
                e = e.args[0]  # the KafkaError: its code name and the broker's message
            outcome.append(f"{type(e).__name__}: {e}")

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(4 * WAIT_S + 30)
    return outcome[0] if outcome else "scenario timed out"


def main():
    global BOOTSTRAP
    BOOTSTRAP = sys.argv[1]
    version(f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})")
    chosen = sys.argv[2:] or list(SCENARIOS)
    for name in chosen:
        result(name, run(SCENARIOS[name]))
    # Like the Java program's System.exit: a client stuck in a timed-out scenario must not keep
    # the process alive (librdkafka's destructors wait for its threads).
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
