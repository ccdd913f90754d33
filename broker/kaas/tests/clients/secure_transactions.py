"""Transactions over SASL_SSL with confluent-kafka (librdkafka): one transaction committed and one
aborted across every partition of a new topic, then read back read_committed.

usage: secure_transactions.py BOOTSTRAP TOPIC PARTITIONS CA MECHANISM USER PASSWORD

Prints "brokers N" (how many the cluster's metadata lists), "scram change: <outcome>" for an
AlterUserScramCredentials (a cluster's users are its Secret's), and then "txn ok N" once exactly
the committed records came back, or fails with what it got.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

bootstrap, topic, partitions, ca, mechanism, user, password = sys.argv[1:8]
partitions = int(partitions)
conf = {
    "bootstrap.servers": bootstrap,
    "security.protocol": "SASL_SSL",
    "ssl.ca.location": ca,
    "sasl.mechanism": mechanism,
    "sasl.username": user,
    "sasl.password": password,
}

admin = AdminClient(conf)
print(f"brokers {len(admin.list_topics(timeout=30).brokers)}", flush=True)
change = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"changed")
try:
    admin.alter_user_scram_credentials([change])[user].result(timeout=30)
    print("scram change: applied", flush=True)
except KafkaException as e:
    print(f"scram change: refused {e.args[0].name()}", flush=True)
admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
# As with Kafka, a new topic's leaders reach the metadata a moment after it is created.
deadline = time.time() + 30
while time.time() < deadline:
    t = admin.list_topics(topic, timeout=10).topics.get(topic)
    if t and not t.error and len(t.partitions) == partitions and all(p.leader >= 0 for p in t.partitions.values()):
        break
    time.sleep(0.2)
print(f"partitions {len(t.partitions) if t else None} leaders {[p.leader for p in t.partitions.values()] if t else None}", flush=True)

producer = Producer({**conf, "transactional.id": f"{topic}-txn", "transaction.timeout.ms": 60000})
producer.init_transactions(60)


def transaction(prefix, commit):
    producer.begin_transaction()
    for p in range(partitions):
        producer.produce(topic, f"{prefix}-{p}".encode(), partition=p,
                         on_delivery=lambda err, m: err and print(f"delivery to {m.partition()}: {err}", flush=True))
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)


transaction("committed", True)
transaction("aborted", False)
transaction("again", True)

expected = sorted([f"{prefix}-{p}".encode() for prefix in ("committed", "again") for p in range(partitions)])
consumer = Consumer({**conf, "group.id": f"{topic}-reader", "isolation.level": "read_committed", "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
got, deadline = [], time.time() + 60
while len(got) < len(expected) and time.time() < deadline:
    m = consumer.poll(1)
    if m is not None and not m.error():
        got.append(m.value())
# Anything aborted would arrive right behind the committed records: give it the chance to.
end = time.time() + 2
while time.time() < end:
    m = consumer.poll(0.2)
    if m is not None and not m.error():
        got.append(m.value())
consumer.close()
assert sorted(got) == expected, sorted(got)
print(f"txn ok {len(got)}")
