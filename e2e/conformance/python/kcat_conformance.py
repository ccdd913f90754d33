"""kcat in the kaas conformance suite: Debian's kcat over Debian's librdkafka (2.0.2 on
bookworm, three years older than the newest), the command-line client many users reach for
first. Topics are created with kafka-python's admin client (kcat has no admin commands); every
scenario is then kcat alone, with librdkafka's defaults except timeouts:

    VERSION <tab> kcat X.Y.Z (librdkafka X.Y.Z)
    RESULT <tab> scenario <tab> PASS|FAIL <tab> reason

Usage: python kcat_conformance.py BOOTSTRAP [scenario ...]
"""

import json
import re
import subprocess
import sys
import time

from kafka.admin import KafkaAdminClient, NewTopic

from conformance_common import RUN, WAIT_S, Failed, check, result, topic_name, version

BOOTSTRAP = ""
LINES = ["k1:v1", "k2:v2", "k3:v3"]


def topic(scenario):
    return topic_name("kcat", scenario)


def kcat(*args, stdin=None):
    """Runs kcat against the broker; its output, or Failed with its error output."""
    cmd = ["kcat", "-b", BOOTSTRAP, "-X", f"socket.timeout.ms={WAIT_S * 1000}", *args]
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=WAIT_S * 2)
    except subprocess.TimeoutExpired as e:
        raise Failed(f"kcat {' '.join(args)} did not finish within {WAIT_S * 2} s") from e
    if p.returncode != 0:
        raise Failed(f"kcat {' '.join(args)} exited {p.returncode}: {p.stderr.strip()[-300:]}")
    return p.stdout


def create_topic(name, partitions=1):
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=WAIT_S * 1000)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def produce(name, *extra):
    """The three keyed records, with a header, into partition 0 of a new topic."""
    create_topic(name)
    kcat("-P", "-t", name, "-p", "0", "-K", ":", "-H", "h1=a", "-X", "enable.idempotence=true",
         *extra, stdin="\n".join(LINES) + "\n")


def consumed(out):
    return [line for line in out.splitlines() if line]


WANT = ["k1|v1|h1=a", "k2|v2|h1=a", "k3|v3|h1=a"]
FORMAT = "%k|%s|%h\n"


def metadata():
    name = topic("metadata")
    create_topic(name, 2)
    deadline = time.monotonic() + WAIT_S
    while True:
        md = json.loads(kcat("-L", "-J", "-t", name))
        partitions = [p for t in md.get("topics", []) if t.get("topic") == name for p in t.get("partitions", [])]
        if len(partitions) == 2 and all(p.get("leader", -1) >= 0 for p in partitions):
            break
        check(time.monotonic() < deadline, f"metadata of {name}: {partitions}")
        time.sleep(0.2)
    check(md.get("brokers"), "no brokers in the metadata")


def produce_consume():
    name = topic("produce")
    produce(name, "-X", "acks=all")
    got = consumed(kcat("-C", "-t", name, "-p", "0", "-o", "beginning", "-e", "-f", FORMAT))
    check(got == WANT, f"consumed {got}, expected {WANT}")


def consume_group():
    name = topic("group")
    produce(name)
    group = f"conf-kcat-{RUN}"
    got = consumed(kcat("-G", group, "-X", "auto.offset.reset=earliest", "-e", "-f", FORMAT, name))
    check(got == WANT, f"consumed {got}, expected {WANT}")
    # The group committed what it read when it closed.
    admin = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=WAIT_S * 1000)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    committed = {tp.partition: o.offset for tp, o in offsets.items() if tp.topic == name}
    check(committed == {0: len(LINES)}, f"committed {committed}, expected {{0: {len(LINES)}}}")


def transactions():
    name = topic("transactions")
    produce(name, "-X", f"transactional.id=conf-kcat-txn-{RUN}")
    got = consumed(kcat("-C", "-t", name, "-p", "0", "-o", "beginning", "-e", "-f", FORMAT,
                        "-X", "isolation.level=read_committed"))
    check(got == WANT, f"read_committed consumed {got}, expected {WANT}")
    # In a transaction: its commit marker takes the offset after the three records.
    out = kcat("-Q", "-t", f"{name}:0:-1")
    m = re.search(r"offset (-?\d+)", out)
    end = int(m.group(1)) if m else None
    check(end == len(LINES) + 1, f"log end offset {end}, expected {len(LINES) + 1} (records and a commit marker): {out.strip()}")


SCENARIOS = {
    "metadata (-L)": metadata,
    "idempotent produce, consume (-P, -C)": produce_consume,
    "consumer group (-G)": consume_group,
    "transactional produce (-P with transactional.id)": transactions,
}


def kcat_version():
    out = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
    m = re.search(r"Version (\S+) .*librdkafka (\S+)", out)
    return f"kcat {m.group(1)} (librdkafka {m.group(2)})" if m else "?"


def main():
    global BOOTSTRAP
    BOOTSTRAP = sys.argv[1]
    version(kcat_version())
    chosen = sys.argv[2:] or list(SCENARIOS)
    for name in chosen:
        try:
            SCENARIOS[name]()
            result(name)
        except Exception as e:  # every failure is a result line, not a crash
            result(name, e)


if __name__ == "__main__":
    main()
