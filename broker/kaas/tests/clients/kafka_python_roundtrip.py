"""kafka-python against kaas with default client settings: create, produce, consume."""
import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

bootstrap, topic = sys.argv[1], sys.argv[2]

admin = KafkaAdminClient(bootstrap_servers=bootstrap)
admin.create_topics([NewTopic(name=topic, num_partitions=2, replication_factor=1)])
assert topic in admin.list_topics(), "created topic is not listed"

producer = KafkaProducer(bootstrap_servers=bootstrap)
sent = []
for i in range(200):
    meta = producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2,
                         headers=[("h", b"x")]).get(timeout=30)
    sent.append((meta.partition, meta.offset, f"v{i}".encode()))
producer.flush()

consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10000)
consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
consumer.seek_to_beginning()
got = []
for message in consumer:
    assert message.headers == [("h", b"x")], message.headers
    got.append((message.partition, message.offset, message.value))
    if len(got) == len(sent):
        break
assert sorted(got) == sorted(sent), f"read {len(got)} of {len(sent)}"
print("kafka-python ok", len(got))
