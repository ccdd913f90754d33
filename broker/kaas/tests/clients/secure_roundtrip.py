"""A client over TLS and/or SASL: create a topic, produce records, read them back.

usage: secure_roundtrip.py confluent|kafka-python BOOTSTRAP TOPIC
           [--ssl CA] [--cert CRT KEY] [--sasl MECHANISM USER PASSWORD] [--oauth TOKEN]
           [--records N] [--spread S]

Prints "secure ok N" after reading back what it produced, or "refused: <why>" when the broker
will not serve it (the test asserts on which). --spread S spaces the sends over S seconds, one
producer and one connection throughout (to span SASL re-authentications). --oauth logs in with
SASL/OAUTHBEARER, the client's token callback handing over TOKEN.
"""
import sys
import time

client, bootstrap, topic, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
ca = cert = key = mechanism = user = password = oauth = None
records, spread = 20, 0.0
while rest:
    flag = rest.pop(0)
    if flag == "--ssl":
        ca = rest.pop(0)
    elif flag == "--cert":
        cert, key = rest.pop(0), rest.pop(0)
    elif flag == "--sasl":
        mechanism, user, password = rest.pop(0), rest.pop(0), rest.pop(0)
    elif flag == "--oauth":
        mechanism, oauth = "OAUTHBEARER", rest.pop(0)
    elif flag == "--records":
        records = int(rest.pop(0))
    elif flag == "--spread":
        spread = float(rest.pop(0))
protocol = {(False, False): "PLAINTEXT", (True, False): "SSL", (False, True): "SASL_PLAINTEXT",
            (True, True): "SASL_SSL"}[(ca is not None, mechanism is not None)]
values = [f"{topic}-{i}".encode() for i in range(records)]


def confluent():
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    conf = {"bootstrap.servers": bootstrap, "security.protocol": protocol}
    if ca:
        conf["ssl.ca.location"] = ca
    if cert:
        conf["ssl.certificate.location"], conf["ssl.key.location"] = cert, key
    if oauth:
        conf.update({"sasl.mechanism": mechanism, "oauth_cb": lambda _config: (oauth, time.time() + 300)})
    elif mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    admin = AdminClient(conf)
    try:
        admin.list_topics(timeout=8)
    except KafkaException as e:
        return f"refused: {e}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({**conf, "acks": "all"})
    for v in values:
        failures = []
        producer.produce(topic, v, partition=0, on_delivery=lambda err, _m: err and failures.append(err))
        producer.flush(30)
        assert not failures, failures
        time.sleep(spread / records)
    consumer = Consumer({**conf, "group.id": "secure", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.time() + 30
    while len(got) < records and time.time() < deadline:
        m = consumer.poll(1)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == values, got
    return f"secure ok {len(got)}"


def kafka_python():
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    conf = {"bootstrap_servers": bootstrap, "security_protocol": protocol}
    if ca:
        conf["ssl_cafile"] = ca
    if cert:
        conf["ssl_certfile"], conf["ssl_keyfile"] = cert, key
    if oauth:
        from kafka.net.sasl.oauth import AbstractTokenProvider

        class Token(AbstractTokenProvider):
            def token(self):
                return oauth

        conf.update({"sasl_mechanism": mechanism, "sasl_oauth_token_provider": Token()})
    elif mechanism:
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password})
    try:
        admin = KafkaAdminClient(request_timeout_ms=10000, **conf)
    except Exception as e:  # noqa: BLE001 - any failure to connect and authenticate is a refusal here
        return f"refused: {type(e).__name__} {e}"
    admin.create_topics([NewTopic(name=topic, num_partitions=1, replication_factor=1)])
    producer = KafkaProducer(acks="all", **conf)
    for v in values:
        producer.send(topic, value=v, partition=0).get(timeout=30)
        time.sleep(spread / records)
    consumer = KafkaConsumer(consumer_timeout_ms=10000, **conf)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [m.value for _, m in zip(range(records), consumer)]
    assert got == values, got
    return f"secure ok {len(got)}"


print({"confluent": confluent, "kafka-python": kafka_python}[client]())
