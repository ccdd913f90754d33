"""The aiokafka part of the kaas conformance suite.

Round trips against one broker with aiokafka (asyncio). Its producer is not idempotent by
default, so the produce scenarios set enable_idempotence=True (which makes acks=all). Prints

    VERSION <tab> aiokafka X.Y.Z
    RESULT <tab> scenario <tab> PASS|FAIL <tab> reason

Usage: python aiokafka_conformance.py BOOTSTRAP [scenario ...]
"""

import asyncio
import logging
import sys
import time

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from conformance_common import RECORDS, RUN, WAIT_S, Failed, check, result, topic_name, version

BOOTSTRAP = ""


def topic(scenario):
    return topic_name("aiokafka", scenario)


def admin_client():
    return AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=WAIT_S * 1000)


def raise_topic_errors(what, resp):
    """CreateTopics/DeleteTopics/CreatePartitions answer per topic; the admin client returns the
    raw response, so its errors are checked here."""
    for entry in getattr(resp, "topic_errors", None) or getattr(resp, "topic_error_codes", None) or []:
        if entry[1]:
            raise Failed(f"{what} {entry[0]}: error {entry[1]} {entry[2] if len(entry) > 2 else ''}".strip())


async def create_topic(name, partitions, configs=None):
    a = admin_client()
    await a.start()
    try:
        raise_topic_errors("create topic", await a.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs or {})]))
    finally:
        await a.close()


def producer(**extra):
    return AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, enable_idempotence=True,
                            request_timeout_ms=WAIT_S * 1000, **extra)


async def produce(scenario):
    t = topic(scenario)
    await create_topic(t, 3)
    p = producer()
    await p.start()
    try:
        futures = [
            await p.send(t, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3,
                         headers=[("h", f"x{i}".encode())])
            for i in range(RECORDS)
        ]
        nxt = {}
        for f in futures:
            m = await asyncio.wait_for(f, WAIT_S)
            want = nxt.get(m.partition, 0)
            check(m.offset == want, f"partition {m.partition} acked offset {m.offset}, expected {want}")
            nxt[m.partition] = want + 1
    finally:
        await p.stop()
    return t


async def poll_until(c, n, extra_ms=0):
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        for recs in (await c.getmany(timeout_ms=200)).values():
            got.extend(recs)
    if extra_ms:
        for recs in (await c.getmany(timeout_ms=extra_ms)).values():
            got.extend(recs)
    return got


def verify(got, want):
    check(len(got) == want, f"consumed {len(got)} records, expected {want}")
    last = {}
    for r in got:
        i = int(r.key.decode()[1:])
        check(r.value == f"v{i}".encode(), f"record k{i} has value {r.value!r}")
        check(list(r.headers) == [("h", f"x{i}".encode())], f"record k{i} has headers {r.headers}")
        check(r.partition == i % 3, f"record k{i} on partition {r.partition}")
        check(last.get(r.partition, -1) < i, f"partition {r.partition} out of order at k{i}")
        last[r.partition] = i


async def scenario_admin():
    t = topic("admin")
    a = admin_client()
    await a.start()
    try:
        check((await a.describe_cluster())["brokers"], "describe_cluster returned no brokers")
        raise_topic_errors("create topic", await a.create_topics(
            [NewTopic(t, 2, 1, topic_configs={"retention.ms": "3600000"})]))
        raise_topic_errors("create partitions", await a.create_partitions({t: NewPartitions(4)}))
        deadline = time.monotonic() + WAIT_S
        while True:
            desc = await a.describe_topics([t])
            n = len(desc[0]["partitions"]) if desc and not desc[0]["error_code"] else 0
            if n == 4:
                break
            check(time.monotonic() < deadline, f"{n} partitions after increasing to 4")
            await asyncio.sleep(0.1)
        value = None
        for resp in await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t)]):
            for err, msg, _type, _name, entries in resp.resources:
                check(not err, f"describe configs: error {err} {msg}")
                for e in entries:
                    if e[0] == "retention.ms":
                        value = e[1]
        check(value == "3600000", f"retention.ms is {value}")
        raise_topic_errors("delete topic", await a.delete_topics([t]))
        deadline = time.monotonic() + WAIT_S
        while t in await a.list_topics():
            check(time.monotonic() < deadline, "deleted topic still listed")
            await asyncio.sleep(0.1)
    finally:
        await a.close()


async def scenario_produce():
    await produce("produce idempotent")


async def scenario_consume_assign():
    t = await produce("consume assign")
    c = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False,
                         request_timeout_ms=WAIT_S * 1000)
    await c.start()
    try:
        tps = [TopicPartition(t, p) for p in range(3)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        verify(await poll_until(c, RECORDS), RECORDS)
    finally:
        await c.stop()


async def scenario_group():
    t = await produce("group")
    g = f"conf-aiokafka-{RUN}"
    c = AIOKafkaConsumer(t, bootstrap_servers=BOOTSTRAP, group_id=g, auto_offset_reset="earliest",
                         enable_auto_commit=False, request_timeout_ms=WAIT_S * 1000)
    await c.start()
    try:
        got = await poll_until(c, RECORDS)
        check(got or c.assignment(), f"no partitions assigned within {WAIT_S} s (group never joined)")
        verify(got, RECORDS)
        await c.commit()
    finally:
        await c.stop()
    a = admin_client()
    await a.start()
    try:
        offsets = await a.list_consumer_group_offsets(g)
        total = sum(o.offset for o in offsets.values())
        check(total == RECORDS, f"committed offsets add up to {total}, expected {RECORDS}")
    finally:
        await a.close()


async def scenario_transactions():
    t = topic("transactions")
    await create_topic(t, 1)
    p = producer(transactional_id="conformance-aiokafka-txn")
    await p.start()
    try:
        for n, commit in ((10, True), (10, False), (1, True)):
            await p.begin_transaction()
            for _ in range(n):
                await p.send(t, value=b"committed" if commit else b"aborted")
            await p.flush()
            await (p.commit_transaction() if commit else p.abort_transaction())
    finally:
        await p.stop()
    c = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed",
                         enable_auto_commit=False, request_timeout_ms=WAIT_S * 1000)
    await c.start()
    try:
        tp = TopicPartition(t, 0)
        c.assign([tp])
        await c.seek_to_beginning(tp)
        # A little longer: aborted records must not arrive.
        got = await poll_until(c, 11, extra_ms=500)
        check(all(r.value == b"committed" for r in got), "read_committed consumer saw aborted records")
        check(len(got) == 11, f"read_committed consumer read {len(got)} records, expected 11")
    finally:
        await c.stop()


SCENARIOS = {
    "admin": scenario_admin,
    "produce idempotent": scenario_produce,
    "consume assign": scenario_consume_assign,
    "group": scenario_group,
    "transactions": scenario_transactions,
}


async def main():
    global BOOTSTRAP
    logging.basicConfig(level=logging.CRITICAL, stream=sys.stderr)
    BOOTSTRAP = sys.argv[1]
    version(aiokafka.__version__)
    for name in sys.argv[2:] or list(SCENARIOS):
        try:
            await asyncio.wait_for(SCENARIOS[name](), 4 * WAIT_S)
            result(name)
        except Exception as e:  # noqa: BLE001 - every failure is a result to report
            result(name, e)


if __name__ == "__main__":
    asyncio.run(main())
