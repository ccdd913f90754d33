"""kafka-python reads a compacted partition from its start to its end: gaps where records were
cleaned away, and batches the cleaner emptied (an idempotent producer's last batch is kept with
no records) must not stop it. Prints one `offset key value` line per record."""
import sys

from kafka import KafkaConsumer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
tp = TopicPartition(topic, 0)
consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=10000)
consumer.assign([tp])
consumer.seek_to_beginning(tp)
end = consumer.end_offsets([tp])[tp]
for message in consumer:
    print(message.offset, message.key.decode(), message.value.decode(), flush=True)
    if consumer.position(tp) >= end:
        break
assert consumer.position(tp) >= end, f"stopped at {consumer.position(tp)} of {end}"
