#!/usr/bin/env python3
"""The kaas conformance suite: the same scenarios, with the same expectations, against Apache
Kafka (the reference, pinned in pom.xml) and kaas, with Kafka's own CLI tools and a matrix of
client programs: the Java client (the reference's release and the older ones in java-clients.txt),
franz-go, sarama, kafka-go, kafka-python, aiokafka, confluent-kafka (librdkafka) and KafkaJS.

Prints a table (client, its version, scenario, a verdict per broker, the reason of each failure), writes it
to --out (Markdown), and exits non-zero if
  (a) any scenario fails on Apache Kafka (the scenario or the harness is wrong),
  (b) a scenario fails on kaas that expected-failures.tsv does not list, or
  (c) a scenario that expected-failures.tsv lists now passes on kaas (so the list stays honest:
      delete its line in the change that makes it pass).

By default it starts both brokers itself (kaas in local mode). --kaas-bootstrap points the kaas
side at a running kaas instead, e.g. the 3-broker e2e cluster (e2e/scenarios TestConformance:
--brokers kaas --kaas-label "kaas (e2e cluster)" --expected expected-failures-cluster.tsv).

Standard library only; run it through `make conformance` (which fetches and builds what it
needs) or by hand: python3 e2e/conformance/conformance.py --help.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BIN = HERE / "bin"
CACHE = Path(os.environ.get("KAAS_CACHE", Path.home() / ".cache" / "kaas"))
BROKERS = ("kafka", "kaas")
BROKER_TITLE = {"kafka": "Apache Kafka", "kaas": "kaas"}
WAIT_S = 15  # how long a scenario waits for something that should happen
# The groups of the share group scenarios (Conformance's ShareConformance and the CLI's), the only
# ones that set group configs.
SHARE_GROUP_CONFIGS = re.compile(r"^conf-(java|cli)-share-")


class Failed(Exception):
    """A scenario's expectation did not hold; the message is the reason shown in the table."""


@dataclasses.dataclass
class Result:
    client: str
    scenario: str
    broker: str
    ok: bool
    reason: str = ""
    seconds: float = 0.0
    version: str = ""  # the client's release, as the program itself reports it (VERSION line)


@dataclasses.dataclass(frozen=True)
class Expectation:
    client: str
    scenario: str
    issue: str
    reason: str


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Tools: one JVM per Kafka CLI invocation, exactly as a user runs them.


class Tools:
    # The admin-client tools take --command-config: bound their API calls like the client
    # programs', so that a request kaas leaves unanswered fails in seconds, with the client's error.
    ADMIN_TOOLS = ("topics", "configs", "consumer-groups", "share-groups", "transactions", "log-dirs")

    def __init__(self, bootstrap: str, logdir: Path):
        self.bootstrap = bootstrap
        self.logdir = logdir
        self.count = 0
        self.running: dict[int, tuple[list[str], Path]] = {}  # started tools: command and output file
        self.client_config = logdir / "admin-client.properties"
        self.client_config.write_text(f"default.api.timeout.ms={WAIT_S * 1000}\nrequest.timeout.ms={WAIT_S * 1000}\n")

    def run(self, tool: str, *args: str, stdin: str | None = None, timeout: float = 60,
            bootstrap_flag: str = "--bootstrap-server", check: bool = True) -> str:
        # NB: TransactionsCommand wants --command-config before its sub-command; the others accept
        # it anywhere, so it goes right after the bootstrap address.
        config = ["--command-config", str(self.client_config)] if tool in self.ADMIN_TOOLS else []
        cmd = [str(BIN / "kafka-class.sh"), tool, bootstrap_flag, self.bootstrap, *config, *args]
        self.count += 1
        try:
            p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise Failed(f"`{tool} {' '.join(args)}` did not finish in {timeout:.0f} s") from e
        with open(self.logdir / "tools.log", "a") as f:
            f.write(f"$ {' '.join(cmd)}\n[exit {p.returncode}]\n{p.stdout}{p.stderr}\n")
        # Several tools print an error and still exit 0 (ConsoleConsumer, ConsumerGroupCommand).
        said_error = re.search(r"^Error|\] ERROR ", p.stdout + p.stderr, re.M)
        if check and (p.returncode != 0 or said_error):
            status = f" exited {p.returncode}" if p.returncode else ""
            raise Failed(f"`{tool} {args[0]}`{status}: {first_error(p.stderr + p.stdout)}")
        return p.stdout

    def start(self, tool: str, *args: str) -> subprocess.Popen:
        """A tool left running while others look at it (a consumer in its group); stop() ends it."""
        cmd = [str(BIN / "kafka-class.sh"), tool, "--bootstrap-server", self.bootstrap, *args]
        self.count += 1
        out = self.logdir / f"{tool}-{self.count}.out"
        with open(out, "w") as f:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
        self.running[p.pid] = (cmd, out)
        return p

    def stop(self, p: subprocess.Popen) -> None:
        # SIGTERM, as Ctrl-C would: kafka-class.sh execs the JVM, whose shutdown hook closes the
        # consumer, so that it leaves its group at once rather than after the session timeout.
        p.terminate()
        try:
            p.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        cmd, out = self.running.pop(p.pid)
        with open(self.logdir / "tools.log", "a") as f:
            f.write(f"$ {' '.join(cmd)} (stopped)\n[exit {p.returncode}]\n{out.read_text()}\n")
        out.unlink()


def first_error(text: str) -> str:
    """The most telling part of a tool's output: its innermost exception, else its Error line,
    else the last line."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        found = list(re.finditer(r"(\w+(?:Exception|Error)): ", l))
        if found:
            return shorten(found[-1].group(1) + ": " + l[found[-1].end():])
    for l in lines:
        if l.startswith("Error") or " ERROR " in l:
            return shorten(re.sub(r"^\[[^\]]*\] ERROR ", "", l))
    return shorten(lines[-1]) if lines else "(no output)"


def shorten(s: str, n: int = 200) -> str:
    s = re.sub(r"\s+", " ", s).replace("|", "/").strip()
    return s if len(s) <= n else s[: n - 1] + "…"


def poll(what: str | Callable[[], str], cond: Callable[[], bool], seconds: float = WAIT_S) -> None:
    """Waits until cond() holds; fails with `what` (or what() says, when the last try saw it) after `seconds`."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise Failed(what() if callable(what) else what)
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# CLI scenarios. Each takes the broker's Tools and a per-run name stem; state that one scenario
# hands the next (a topic, a group) is named from the stem.


def cli_scenarios(t: Tools, stem: str) -> list[tuple[str, str, Callable[[], None]]]:
    topic = f"conf-cli-topics-{stem}"
    cfg_topic = f"conf-cli-configs-{stem}"
    con_topic = f"conf-cli-console-{stem}"
    group = f"conf-cli-group-{stem}"
    lines = ["h1:a,h2:b\tkey1|value1", "h1:c\tkey2|value2", "h3:\tkey3|"]
    share_topic = f"conf-cli-share-{stem}"
    share_group = f"conf-cli-share-{stem}"  # SHARE_GROUP_CONFIGS matches it
    share_values = [f"value{i}" for i in range(30)]

    def describe_partitions() -> int:
        out = t.run("topics", "--describe", "--topic", topic)
        m = re.search(r"PartitionCount:\s*(\d+)", out)
        return int(m.group(1)) if m else -1

    def topics_create() -> None:
        out = t.run("topics", "--create", "--topic", topic, "--partitions", "3",
                    "--replication-factor", "1", "--config", "retention.ms=3600000")
        if f"Created topic {topic}." not in out:
            raise Failed(f"unexpected output: {shorten(out)}")

    def topics_list() -> None:
        if topic not in t.run("topics", "--list").split():
            raise Failed("created topic not listed")

    def topics_describe() -> None:
        out = t.run("topics", "--describe", "--topic", topic)
        if not re.search(r"PartitionCount:\s*3\b", out):
            raise Failed(f"PartitionCount is not 3: {shorten(out)}")
        if "retention.ms=3600000" not in out:
            raise Failed("retention.ms=3600000 missing from Configs")
        parts = re.findall(r"Partition:\s*(\d+)\s+Leader:\s*(-?\d+)", out)
        if sorted(int(p) for p, _ in parts) != [0, 1, 2] or any(int(l) < 0 for _, l in parts):
            raise Failed(f"partition lines: {parts}")

    def topics_alter() -> None:
        t.run("topics", "--alter", "--topic", topic, "--partitions", "5")
        poll("PartitionCount did not become 5", lambda: describe_partitions() == 5)

    def topics_delete() -> None:
        t.run("topics", "--delete", "--topic", topic)
        poll("deleted topic still listed", lambda: topic not in t.run("topics", "--list").split())

    def described_until(ok: Callable[[str], bool], what: str, entity: tuple[str, str] = ("topics", cfg_topic)) -> None:
        # In a cluster the broker answering the describe may apply a change a moment after the
        # one that answered the alter, as each broker of a multi-broker Kafka applies the
        # metadata log at its own pace: read until it shows, within WAIT_S.
        deadline = time.monotonic() + WAIT_S
        while True:
            out = t.run("configs", "--describe", "--entity-type", entity[0], "--entity-name", entity[1])
            if ok(out):
                return
            if time.monotonic() > deadline:
                raise Failed(f"{what}: {shorten(out)}")
            time.sleep(0.5)

    def configs_describe() -> None:
        t.run("topics", "--create", "--topic", cfg_topic, "--partitions", "1", "--replication-factor", "1",
              "--config", "retention.ms=3600000")
        described_until(lambda out: "retention.ms=3600000" in out, "retention.ms=3600000 missing")

    def configs_alter() -> None:
        t.run("configs", "--alter", "--entity-type", "topics", "--entity-name", cfg_topic,
              "--add-config", "retention.ms=7200000,max.message.bytes=2000000")
        described_until(lambda out: "retention.ms=7200000" in out and "max.message.bytes=2000000" in out,
                        "altered configs missing")
        t.run("configs", "--alter", "--entity-type", "topics", "--entity-name", cfg_topic,
              "--delete-config", "max.message.bytes")
        described_until(lambda out: "max.message.bytes=" not in out, "deleted config still described")

    def log_dirs_describe() -> None:
        # Every broker is asked (DescribeCluster, then DescribeLogDirs); the partition's one copy
        # is listed once, by the broker that holds it.
        out = t.run("log-dirs", "--describe", "--topic-list", cfg_topic)
        line = next((l for l in out.splitlines() if l.startswith("{")), "")
        try:
            brokers = json.loads(line)["brokers"]
        except (ValueError, KeyError) as e:
            raise Failed(f"no JSON answer ({e}): {shorten(out)}") from e
        held = [b["broker"] for b in brokers for d in b["logDirs"] for p in d["partitions"]
                if p["partition"] == f"{cfg_topic}-0"]
        if len(held) != 1:
            raise Failed(f"{cfg_topic}-0 listed by brokers {held}: {shorten(line)}")

    def configs_brokers() -> None:
        out = t.run("configs", "--describe", "--entity-type", "brokers", "--all")
        if "All configs for broker" not in out:
            raise Failed(f"no broker configs: {shorten(out)}")

    def configs_list_resources() -> None:
        # Without --entity-name, kafka-configs 4.1+ lists the resources to describe with
        # ListConfigResources (KIP-1142) — and for groups every group ListGroups names, and every
        # group with configs — and describes each (DescribeConfigs); a broker without either fails
        # the command. No client-metrics subscription exists, and only the share group scenarios
        # set group configs (share.*, on their own groups; Kafka keeps a group's configs after the
        # group is deleted, so those of earlier runs against the same broker show too): else at
        # most a header per group.
        for entity_type in ("client-metrics", "groups"):
            out = t.run("configs", "--describe", "--entity-type", entity_type)
            entity, configs = "", []
            for l in out.splitlines():
                if m := re.match(r"Dynamic configs for .* (\S+) are:$", l):
                    entity = m.group(1)
                elif l.strip() and not (entity_type == "groups" and SHARE_GROUP_CONFIGS.match(entity)
                                        and l.strip().startswith("share.")):
                    configs.append(f"{entity}: {l.strip()}")
            if configs:
                raise Failed(f"{entity_type}: expected no dynamic configs, got {shorten(chr(10).join(configs))}")

    def console_produce() -> None:
        t.run("topics", "--create", "--topic", con_topic, "--partitions", "1", "--replication-factor", "1")
        # Kafka 4.2+ (KIP-1147) names the reader's and the formatter's properties
        # --reader-property / --formatter-property; --property is deprecated (and ConsoleConsumer
        # prints the deprecation warning on stdout, among the records).
        t.run("console-producer", "--topic", con_topic, "--reader-property", "parse.key=true",
              "--reader-property", "key.separator=|", "--reader-property", "parse.headers=true",
              stdin="\n".join(lines) + "\n")

    def console_consume(*extra: str) -> None:
        out = t.run("console-consumer", "--topic", con_topic, *extra, "--max-messages", str(len(lines)),
                    "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
                    "--formatter-property", "key.separator=|", "--timeout-ms", str(WAIT_S * 1000))
        got = out.splitlines()
        want = ["h1:a,h2:b|key1|value1", "h1:c|key2|value2", "h3:|key3|"]
        if got != want:
            raise Failed(f"consumed {got}, expected {want}")

    def groups_list() -> None:
        if group not in t.run("consumer-groups", "--list").split():
            raise Failed("group of the console consumer not listed")

    def group_offset() -> str:
        out = t.run("consumer-groups", "--describe", "--group", group)
        m = re.search(rf"^{re.escape(group)}\s+{re.escape(con_topic)}\s+0\s+(\S+)\s+(\S+)\s+(\S+)", out, re.M)
        if not m:
            raise Failed(f"no row for {con_topic}-0: {shorten(out)}")
        return " ".join(m.groups())

    def groups_describe() -> None:
        row = group_offset()
        if row != f"{len(lines)} {len(lines)} 0":
            raise Failed(f"current/log-end/lag = {row}, expected {len(lines)} {len(lines)} 0")

    def groups_reset() -> None:
        t.run("consumer-groups", "--reset-offsets", "--group", group, "--topic", con_topic,
              "--to-earliest", "--execute")
        row = group_offset()
        if row != f"0 {len(lines)} {len(lines)}":
            raise Failed(f"after reset current/log-end/lag = {row}")

    def groups_delete() -> None:
        out = t.run("consumer-groups", "--delete", "--group", group)
        if "successful" not in out:
            raise Failed(f"unexpected output: {shorten(out)}")
        poll("deleted group still listed", lambda: group not in t.run("consumer-groups", "--list").split())

    def txn_list() -> None:
        out = t.run("transactions", "list")
        if "TransactionalId" not in out:
            raise Failed(f"no table: {shorten(out)}")
        if "conformance-txn" not in out:
            raise Failed("the Java client's transactional id is not listed")

    def txn_describe() -> None:
        out = t.run("transactions", "describe", "--transactional-id", "conformance-txn")
        if "CompleteCommit" not in out:
            raise Failed(f"state is not CompleteCommit: {shorten(out)}")

    def txn_describe_producers() -> None:
        # Its own topic, written by ConsoleProducer (idempotent by default, so it has producer state).
        prod_topic = f"conf-cli-producers-{stem}"
        t.run("topics", "--create", "--topic", prod_topic, "--partitions", "1", "--replication-factor", "1")
        t.run("console-producer", "--topic", prod_topic, stdin="one\ntwo\n")
        out = t.run("transactions", "describe-producers", "--topic", prod_topic, "--partition", "0")
        rows = [l for l in out.splitlines()[1:] if l.strip()]
        if not rows:
            raise Failed("no producer state for a partition an idempotent producer wrote")

    # Share groups (KIP-932): a group config, a console share consumer, kafka-share-groups.

    def share_config() -> None:
        # share.auto.offset.reset is latest by default: the records are produced before the
        # group's first consumer comes, and it must get them.
        t.run("configs", "--alter", "--entity-type", "groups", "--entity-name", share_group,
              "--add-config", "share.auto.offset.reset=earliest")
        described_until(lambda out: "share.auto.offset.reset=earliest" in out,
                        "share.auto.offset.reset=earliest missing", ("groups", share_group))

    def share_consume() -> None:
        t.run("topics", "--create", "--topic", share_topic, "--partitions", "3", "--replication-factor", "1")
        # Keyed, so that the records spread over the three partitions.
        t.run("console-producer", "--topic", share_topic, "--reader-property", "parse.key=true",
              "--reader-property", "key.separator=|",
              stdin="".join(f"key{i}|{v}\n" for i, v in enumerate(share_values)))
        out = t.run("console-share-consumer", "--group", share_group, "--topic", share_topic,
                    "--max-messages", str(len(share_values)), "--timeout-ms", str(WAIT_S * 1000))
        got = out.splitlines()
        if sorted(got) != sorted(share_values):
            raise Failed(f"consumed {len(got)} values ({shorten(' '.join(got), 80)}), expected value0..value{len(share_values) - 1} once each")

    def share_groups_list() -> None:
        if share_group not in t.run("share-groups", "--list").split():
            raise Failed("the console share consumer's group is not listed")

    def share_offsets() -> list[tuple[str, str]]:
        """(START-OFFSET, LAG) of each partition, in partition order, as --describe prints them."""
        out = t.run("share-groups", "--describe", "--group", share_group)
        rows = re.findall(rf"^{re.escape(share_group)}\s+{re.escape(share_topic)}\s+(\d+)\s+(\S+)\s+(\S+)\s*$", out, re.M)
        if sorted(int(p) for p, _, _ in rows) != [0, 1, 2]:
            raise Failed(f"expected a row per partition: {shorten(out)}")
        return [(start, lag) for _, start, lag in sorted(rows, key=lambda r: int(r[0]))]

    def share_groups_describe() -> None:
        # Every record was acknowledged (the console share consumer accepts what it prints), so
        # no partition has a lag. The start offset need not have moved: Kafka 4.4 shows 0 here,
        # having written the state with the offset as it was and the records as acknowledged
        # (and "-" for both in a partition whose state holds no records yet). The LAG column
        # comes from DescribeShareGroupOffsets v1 (KIP-1226; "-" from a broker answering v0).
        rows: list[tuple[str, str]] = []

        def no_lag() -> bool:
            nonlocal rows
            rows = share_offsets()
            return all(start.isdigit() and lag == "0" for start, lag in rows)
        poll(lambda: f"START-OFFSET/LAG of the partitions are {rows}, expected a start offset and lag 0 each", no_lag)

    def share_groups_members() -> None:
        # A console share consumer left running (no records left for it) is the one member, with
        # every partition of the topic: a row GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT.
        row = re.compile(rf"^{re.escape(share_group)}\s+\S+\s+\S+\s+console-share-consumer\s+3\s+{re.escape(share_topic)}:([\d,]+)\s*$", re.M)
        consumer = t.start("console-share-consumer", "--group", share_group, "--topic", share_topic)
        out = ""
        try:
            def described() -> bool:
                nonlocal out
                if consumer.poll() is not None:
                    raise Failed(f"the console share consumer exited ({consumer.returncode})")
                out = t.run("share-groups", "--describe", "--group", share_group, "--members")
                rows = row.findall(out)
                return len(rows) == 1 and sorted(rows[0].split(",")) == ["0", "1", "2"]
            # Each describe is a JVM start too: give the consumer's JVM and its join twice WAIT_S.
            poll(lambda: f"expected one member with {share_topic}:0,1,2: {shorten(out)}", described, 2 * WAIT_S)
        finally:
            t.stop(consumer)

    def share_state() -> str:
        out = t.run("share-groups", "--describe", "--group", share_group, "--state")
        m = re.search(rf"^{re.escape(share_group)}\s+.*\(\d+\)\s+(\w+)\s+(\d+)\s*$", out, re.M)
        return f"{m.group(1)} {m.group(2)}" if m else shorten(out)

    def share_groups_reset() -> None:
        # Offsets of a share group are reset only while it has no members: the consumer of the
        # scenario before left when it stopped.
        state = ""

        def empty() -> bool:
            nonlocal state
            state = share_state()
            return state == "Empty 0"
        poll(lambda: f"state/members of the group: {state}, expected Empty 0", empty)
        out = t.run("share-groups", "--reset-offsets", "--group", share_group, "--topic", share_topic,
                    "--to-earliest", "--execute")
        reset = re.findall(rf"^{re.escape(share_group)}\s+{re.escape(share_topic)}\s+(\d+)\s+(\d+)\s*$", out, re.M)
        if sorted(reset) != [("0", "0"), ("1", "0"), ("2", "0")]:
            raise Failed(f"expected NEW-OFFSET 0 for each partition: {shorten(out)}")
        # Back at the start, every record is to be delivered again: the lags add up to them all.
        rows = share_offsets()
        lags = [lag for _, lag in rows]
        if any(start != "0" for start, _ in rows) or not all(l.isdigit() for l in lags) \
                or sum(map(int, lags)) != len(share_values):
            raise Failed(f"after the reset START-OFFSET/LAG are {rows}, expected 0 and lags adding up to {len(share_values)}")

    def share_groups_delete() -> None:
        out = t.run("share-groups", "--delete", "--group", share_group)
        if "successful" not in out:
            raise Failed(f"unexpected output: {shorten(out)}")
        poll("deleted share group still listed", lambda: share_group not in t.run("share-groups", "--list").split())

    return [
        ("kafka-topics", "create with config", topics_create),
        ("kafka-topics", "list", topics_list),
        ("kafka-topics", "describe", topics_describe),
        ("kafka-topics", "alter partitions", topics_alter),
        ("kafka-topics", "delete", topics_delete),
        ("kafka-configs", "describe topic", configs_describe),
        ("kafka-configs", "alter/delete topic config", configs_alter),
        ("kafka-configs", "describe brokers", configs_brokers),
        ("kafka-configs", "describe every group and client-metrics (ListConfigResources)", configs_list_resources),
        ("kafka-log-dirs", "describe", log_dirs_describe),
        ("kafka-console", "produce keys+headers", console_produce),
        ("kafka-console", "consume assign (--partition)", lambda: console_consume("--partition", "0", "--offset", "earliest")),
        ("kafka-console", "consume group (--group)", lambda: console_consume("--group", group, "--from-beginning")),
        ("kafka-consumer-groups", "list", groups_list),
        ("kafka-consumer-groups", "describe", groups_describe),
        ("kafka-consumer-groups", "reset-offsets", groups_reset),
        ("kafka-consumer-groups", "delete", groups_delete),
        ("kafka-transactions", "list", txn_list),
        ("kafka-transactions", "describe", txn_describe),
        ("kafka-transactions", "describe-producers", txn_describe_producers),
        ("kafka-configs", "alter/describe group config", share_config),
        ("kafka-console-share-consumer", "consume (--group)", share_consume),
        ("kafka-share-groups", "list", share_groups_list),
        ("kafka-share-groups", "describe (offsets)", share_groups_describe),
        ("kafka-share-groups", "describe --members", share_groups_members),
        ("kafka-share-groups", "reset-offsets", share_groups_reset),
        ("kafka-share-groups", "delete", share_groups_delete),
    ]


# ---------------------------------------------------------------------------------------------
# Client programs: each prints "VERSION<tab>release" (the client library it runs) and then
# "RESULT<tab>scenario<tab>PASS|FAIL<tab>reason" per scenario. Each client's release is pinned in
# one line: pom.xml (java), java-clients.txt (older Java releases, one a line), the go.mod of
# franzgo/, sarama/ and kafkago/, scripts/install-deps.sh (kafka-python, aiokafka,
# confluent-kafka) and kafkajs/package.json (with its package-lock.json).


def digest(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                h.update(f.name.encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:12]


def kafka_libs() -> Path:
    out = subprocess.run([str(BIN / "fetch-kafka.sh")], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip())


def build_java(libs: Path, release: str = "") -> Path:
    """Compiles java/*.java against the pinned kafka-clients into the cache (keyed by content);
    with a release of java-clients.txt, Conformance.java alone against that release's jars."""
    if release:
        srcs = [HERE / "java" / "Conformance.java"]
        out = CACHE / "conformance" / f"java-{release}-{digest(*srcs)}"
    else:
        srcs = sorted((HERE / "java").glob("*.java"))
        out = CACHE / "conformance" / f"java-{digest(HERE / 'java', libs.parent / 'pom.xml')}"
    if not (out / "Conformance.class").exists():
        log("compiling " + " ".join(s.name for s in srcs))
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent))
        subprocess.run(["nice", "-n", "10", "javac", "-nowarn", "-cp", f"{libs}/*", "-d", str(tmp), *map(str, srcs)], check=True)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        prune(out)
    return out


def prune(keep: Path) -> None:
    """Removes the cached builds of older sources beside `keep` (same name before the hash)."""
    kind = keep.name.rsplit("-", 1)[0]
    for old in keep.parent.glob(f"{kind}-*"):
        if old != keep and old.name.rsplit("-", 1)[0] == kind:
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)


def java_releases() -> list[str]:
    """The older Java client releases to run (java-clients.txt, one version a line)."""
    lines = (HERE / "java-clients.txt").read_text().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.startswith("#")]


def confluent_kafka_releases() -> list[str]:
    """The older confluent-kafka releases to run (confluent-kafka-releases.txt, one a line)."""
    lines = (HERE / "confluent-kafka-releases.txt").read_text().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.startswith("#")]


def confluent_kafka_python(release: str) -> str:
    """The interpreter of the virtualenv holding that release (bin/fetch-confluent-kafka.sh)."""
    out = subprocess.run([str(BIN / "fetch-confluent-kafka.sh"), release], check=True, stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


def java_client_libs(release: str, *artifacts: str) -> Path:
    # Maven's complaints go to our stderr: a failed resolution must say why.
    out = subprocess.run([str(BIN / "fetch-java-client.sh"), release, *artifacts], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip())


def java_cmd(libs: Path, classes: Path, *props: str, main: str = "Conformance", extra_cp: str = "") -> list[str]:
    return ["nice", "-n", "10", "java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256M",
            f"-Dlog4j2.configurationFile={HERE / 'log4j2-tools.properties'}", *props,
            "-cp", f"{libs}/*:{extra_cp}{classes}", main]


def connect_release() -> list[str]:
    """The Kafka Connect release and its artifacts (connect-release.txt, one line)."""
    lines = (HERE / "connect-release.txt").read_text().splitlines()
    return next(l.split() for l in lines if l.strip() and not l.startswith("#"))


def connect_cmd(libs: Path, classes: Path, main: str) -> list[str]:
    """An application on the Kafka Connect release of connect-release.txt (ConnectApp, MirrorApp),
    logging through the pinned Kafka's log4j2."""
    connect = java_client_libs(*connect_release())
    log4j = "".join(f"{j}:" for j in sorted(libs.glob("log4j-*.jar")))
    return java_cmd(connect, classes, main=main, extra_cp=log4j)


# Programs that work between two clusters: they take the peer's address before the broker's.
# MirrorMaker 2 mirrors between Apache Kafka (the peer) and kaas, so it runs only against kaas
# and only when the suite runs both brokers.
NEEDS_PEER = {"kafka-mirrormaker"}


def build_go(name: str) -> Path:
    """Builds the Go program in `name`/ (its own Go module; modules come from the Go proxy) into
    the cache, keyed by its sources, go.mod and go.sum."""
    src = HERE / name
    out = CACHE / "conformance" / f"{name}-{digest(src)}"
    if not out.exists():
        log(f"building {name}")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        subprocess.run(["nice", "-n", "10", "go", "build", "-o", str(tmp), "."], cwd=src, check=True)
        tmp.rename(out)
        prune(out)
    return out


def node_modules(client: str) -> Path:
    """node_modules for a Node.js client's directory (`kafkajs/`, `confluent-kafka-javascript/`:
    npm ci from its package-lock.json) in the cache, keyed by the lock file; `make
    conformance-deps` fills it, this only when that did not run."""
    src = HERE / client
    out = CACHE / "conformance" / f"{client}-{digest(src / 'package.json', src / 'package-lock.json')}"
    if not (out / "node_modules" / ".installed").exists():
        subprocess.run([str(BIN / "install-node-client.sh"), client], check=True, stdout=subprocess.DEVNULL)
    return out / "node_modules"


def python_for_kafka_python() -> str:
    venv = CACHE / "venv" / "bin" / "python3"
    return os.environ.get("PYTHON") or (str(venv) if venv.exists() else sys.executable)


def run_program(client: str, cmd: list[str], broker: str, logdir: Path, timeout: float) -> list[Result]:
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = "timed out", -1
    (logdir / f"{client}.log").write_text(f"$ {' '.join(cmd)}\n[exit {rc}]\n{out}\n--- stderr ---\n{err}")
    results, version = [], ""
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0] == "VERSION":
            version = parts[1].strip().removeprefix("v")
        if len(parts) >= 3 and parts[0] == "RESULT":
            results.append(Result(client, parts[1], broker, parts[2] == "PASS", shorten(parts[3] if len(parts) > 3 else "")))
    if not results or rc != 0:
        results.append(Result(client, "(program)", broker, False, f"exit {rc}: {first_error(err)}"))
    secs = (time.monotonic() - start) / max(len(results), 1)
    for r in results:
        r.seconds = secs
        r.version = version
    return results


# ---------------------------------------------------------------------------------------------
# Brokers


class Broker:
    def __init__(self, name: str, workdir: Path):
        self.name = name
        self.dir = workdir / name
        self.bootstrap = ""

    def start(self) -> None:
        script = "kafka-start.sh" if self.name == "kafka" else "kaas-start.sh"
        args = [str(BIN / script), str(self.dir)]
        if self.name == "kafka":
            # A small heap is plenty for the suite; the benchmark uses Kafka's default 1 GiB.
            env = dict(os.environ, KAFKA_HEAP_OPTS=os.environ.get("KAFKA_HEAP_OPTS", "-Xmx512M -Xms512M"))
            args = ["nice", "-n", "10", *args]
        else:
            env = dict(os.environ)
        p = subprocess.run(args, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"{self.name} did not start:\n{p.stderr}")
        self.bootstrap = p.stdout.strip().splitlines()[-1]

    def stop(self) -> None:
        subprocess.run([str(BIN / "kafka-stop.sh"), str(self.dir)], check=False)


def run_suite(broker: Broker, stem: str, programs: dict[str, list[str]], logroot: Path,
              only_clients: set[str] | None, jobs: int, tools_version: str, peer: str | None) -> list[Result]:
    logdir = logroot / broker.name
    logdir.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    # The client programs run first, `jobs` at a time (each names its topics, groups and
    # transactional id apart): the Java client's transaction is what kafka-transactions then
    # lists and describes.
    chosen = [(c, cmd) for c, cmd in programs.items() if (not only_clients or c in only_clients)
              and (c not in NEEDS_PEER or (broker.name == "kaas" and peer))]

    def one(client: str, cmd: list[str]) -> list[Result]:
        log(f"[{broker.name}] {client}")
        start = time.monotonic()
        addresses = [peer, broker.bootstrap] if client in NEEDS_PEER else [broker.bootstrap]
        rs = run_program(client, [*cmd, *addresses], broker.name, logdir, timeout=300)
        log(f"[{broker.name}] {client} done in {time.monotonic() - start:.0f} s: {sum(r.ok for r in rs)}/{len(rs)} pass")
        return rs

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for rs in list(pool.map(lambda p: one(*p), chosen)):
            results += rs
    if chosen:
        log(f"[{broker.name}] {len(chosen)} client programs took {time.monotonic() - started:.0f} s ({jobs} at a time)")
    started = time.monotonic()
    tools = Tools(broker.bootstrap, logdir)
    for client, scenario, fn in cli_scenarios(tools, stem):
        if only_clients and client not in only_clients:
            continue
        start = time.monotonic()
        try:
            fn()
            r = Result(client, scenario, broker.name, True, version=tools_version)
        except Failed as e:
            r = Result(client, scenario, broker.name, False, str(e), version=tools_version)
        r.seconds = time.monotonic() - start
        log(f"[{broker.name}] {client}: {scenario}: {'pass' if r.ok else 'FAIL ' + r.reason}")
        results.append(r)
    if tools.count:
        log(f"[{broker.name}] the CLI scenarios took {time.monotonic() - started:.0f} s")
    return results


# ---------------------------------------------------------------------------------------------
# Expectations and the table


def load_expectations(path: Path) -> dict[tuple[str, str], Expectation]:
    out = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 4:
            raise SystemExit(f"{path}:{n}: expected 4 tab-separated columns (client, scenario, issue, reason)")
        e = Expectation(*(p.strip() for p in parts))
        if (e.client, e.scenario) in out:
            raise SystemExit(f"{path}:{n}: {e.client} / {e.scenario} listed twice")
        out[(e.client, e.scenario)] = e
    return out


def judge(results: list[Result], expected: dict[tuple[str, str], Expectation],
          listed_in: str = "expected-failures.tsv") -> tuple[list[dict], list[str]]:
    """Rows of the table and the list of problems that fail the suite; listed_in names the
    expectations' file in the problems."""
    by_key: dict[tuple[str, str], dict[str, Result]] = {}
    for r in results:
        by_key.setdefault((r.client, r.scenario), {})[r.broker] = r
    rows, problems = [], []
    for (client, scenario), per in by_key.items():
        kafka, kaas = per.get("kafka"), per.get("kaas")
        exp = expected.get((client, scenario))
        note, verdict = "", ""
        if kafka and not kafka.ok:
            problems.append(f"{client} / {scenario} fails on Apache Kafka: {kafka.reason}")
            note = f"Kafka: {kafka.reason}"
        if kaas:
            if kaas.ok and exp:
                verdict = "pass (listed as expected failure!)"
                problems.append(f"{client} / {scenario} passes on kaas but {listed_in} lists it "
                                f"(#{exp.issue}): delete that line")
            elif kaas.ok:
                verdict = "pass"
            elif exp:
                verdict = f"fail (expected, #{exp.issue})"
                note = (note + "; " if note else "") + f"{exp.reason} — {kaas.reason}"
            else:
                verdict = "FAIL"
                problems.append(f"{client} / {scenario} fails on kaas: {kaas.reason}")
                note = (note + "; " if note else "") + kaas.reason
        rows.append({
            "client": client, "scenario": scenario,
            "version": " / ".join(sorted({r.version or "?" for r in per.values()})),
            "kafka": "-" if not kafka else ("pass" if kafka.ok else "FAIL"),
            "kaas": verdict or "-", "note": note,
        })
    # An expectation whose scenario no longer exists is stale too.
    ran = {(r.client, r.scenario) for r in results if r.broker == "kaas"}
    for key, e in expected.items():
        if key not in ran and any(r.client == e.client for r in results if r.broker == "kaas"):
            problems.append(f"{listed_in} lists {e.client} / {e.scenario}, which is not a scenario")
    return rows, problems


def render(rows: list[dict], header: str, brokers: list[str]) -> str:
    """A Markdown table with a verdict column for each broker that ran."""
    cols = [("client", "client"), ("version", "version"), ("scenario", "scenario"),
            *((b, BROKER_TITLE[b]) for b in BROKERS if b in brokers), ("note", "reason (kaas failures)")]
    out = [header, "", "| " + " | ".join(t for _, t in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(r[k] for k, _ in cols) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", default="kafka,kaas", help="comma-separated subset of kafka,kaas")
    ap.add_argument("--clients", default=os.environ.get("CONFORMANCE_CLIENTS", ""),
                    help="only these clients (comma-separated, or $CONFORMANCE_CLIENTS), e.g. java,kafka-topics")
    ap.add_argument("--expected", default=str(HERE / "expected-failures.tsv"),
                    help="the kaas expected failures (default: expected-failures.tsv, for local mode)")
    ap.add_argument("--out", default=str(REPO / "target" / "conformance" / "results.md"))
    ap.add_argument("--logs", help="where every tool call and its output go (default: logs/ beside --out)")
    ap.add_argument("--kafka-bootstrap", help="use this running Apache Kafka instead of starting one")
    ap.add_argument("--kaas-bootstrap", help="use this running kaas instead of starting one "
                    "(comma-separated addresses, e.g. the brokers of a cluster)")
    ap.add_argument("--kaas-label", default="kaas",
                    help='what the table calls the kaas side, e.g. "kaas (e2e cluster)"')
    ap.add_argument("--sequential", action="store_true", help="one broker after the other (default: both at once)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("CONFORMANCE_JOBS", "2")),
                    help="client programs run at once against each broker (default 2, or $CONFORMANCE_JOBS)")
    args = ap.parse_args()
    brokers = [b for b in args.brokers.split(",") if b]
    if unknown := set(brokers) - set(BROKERS):
        ap.error(f"unknown broker(s) {', '.join(sorted(unknown))}; choose from {','.join(BROKERS)}")
    BROKER_TITLE["kaas"] = args.kaas_label
    only = set(c for c in args.clients.split(",") if c) or None
    if only and "kafka-transactions" in only:
        only.add("java")  # kafka-transactions lists and describes the Java client's transaction
    wanted = (lambda c: not only or c in only)
    started = time.monotonic()

    CACHE.joinpath("conformance").mkdir(parents=True, exist_ok=True)
    libs = kafka_libs()
    java_classes = build_java(libs)
    # Each program takes the broker's bootstrap address as its last argument (run_suite adds it);
    # only the programs of the chosen clients are built. The slowest first, so that with --jobs
    # the short ones fill in beside them.
    builders: dict[str, Callable[[], list[str]]] = {
        "java": lambda: java_cmd(libs, java_classes),
        # Applications on top of the Java client (java/StreamsApp.java, java/ConnectApp.java).
        "kafka-streams": lambda: java_cmd(libs, java_classes, main="StreamsApp"),
        "kafka-connect": lambda: connect_cmd(libs, java_classes, "ConnectApp"),
        "kafka-mirrormaker": lambda: connect_cmd(libs, java_classes, "MirrorApp"),
    }
    for release in java_releases():
        # One client per older release: java-<major>.<minor> (a patch release replaces its line
        # without renaming the client), with its own transactional id.
        line = ".".join(release.split(".")[:2])
        builders[f"java-{line}"] = (lambda r=release: java_cmd(
            java_client_libs(r), build_java(libs, r), f"-Dconformance.txn.id=conformance-txn-{r}"))
    builders.update({
        "franz-go": lambda: [str(build_go("franzgo"))],
        "sarama": lambda: [str(build_go("sarama"))],
        "kafka-go": lambda: [str(build_go("kafkago"))],
        "kafka-python": lambda: [python_for_kafka_python(), str(HERE / "python" / "kafka_python_conformance.py")],
        "aiokafka": lambda: [python_for_kafka_python(), str(HERE / "python" / "aiokafka_conformance.py")],
        # librdkafka, through its Python binding (same virtualenv as kafka-python).
        "confluent-kafka": lambda: [python_for_kafka_python(), str(HERE / "python" / "confluent_kafka_conformance.py")],
        **{f"confluent-kafka-{'.'.join(r.split('.')[:2])}": (lambda r=r: [
            "env", f"CONFORMANCE_TXN_ID=conformance-ckpy-txn-{r}", confluent_kafka_python(r),
            str(HERE / "python" / "confluent_kafka_conformance.py")]) for r in confluent_kafka_releases()},
        # Debian's kcat over Debian's librdkafka (scripts/install-deps.sh installs it).
        "kcat": lambda: [python_for_kafka_python(), str(HERE / "python" / "kcat_conformance.py")],
        "kafkajs": lambda: ["env", f"NODE_PATH={node_modules('kafkajs')}", "KAFKAJS_NO_PARTITIONER_WARNING=1",
                            "nice", "-n", "10", "node", str(HERE / "kafkajs" / "conformance.js")],
        # librdkafka's Node.js binding, through its KafkaJS-compatible API: the same program.
        "confluent-kafka-javascript": lambda: ["env", f"NODE_PATH={node_modules('confluent-kafka-javascript')}",
                                               "CONFORMANCE_JS_CLIENT=confluent-kafka-javascript",
                                               "nice", "-n", "10", "node", str(HERE / "kafkajs" / "conformance.js")],
    })
    programs = {c: build() for c, build in builders.items() if wanted(c)}

    workdir = Path(tempfile.mkdtemp(prefix="kaas-conformance."))
    logroot = Path(args.logs) if args.logs else Path(args.out).parent / "logs"
    shutil.rmtree(logroot, ignore_errors=True)
    stem = uuid.uuid4().hex[:8]
    objs = {b: Broker(b, workdir) for b in brokers}
    results: list[Result] = []
    try:
        for b, o in objs.items():
            given = getattr(args, f"{b}_bootstrap")
            if given:
                o.bootstrap = given
            else:
                log(f"starting {BROKER_TITLE[b]}")
                o.start()
            log(f"{BROKER_TITLE[b]} on {o.bootstrap}")
        with concurrent.futures.ThreadPoolExecutor(max_workers=1 if args.sequential else len(objs)) as pool:
            kafka_version = libs.parent.name.removeprefix("kafka-")
            peer = objs["kafka"].bootstrap if "kafka" in objs else None
            futs = [pool.submit(run_suite, o, stem, programs, logroot, only, args.jobs, kafka_version, peer)
                    for o in objs.values()]
            for f in futs:
                results += f.result()
    finally:
        for b, o in objs.items():
            if not getattr(args, f"{b}_bootstrap"):
                o.stop()
                # Keep the brokers' logs beside the results, drop their data.
                logroot.joinpath(b).mkdir(parents=True, exist_ok=True)
                for name in ("server.log", "kaas.log", "stdout"):
                    if (o.dir / name).exists():
                        shutil.copy(o.dir / name, logroot / b / f"broker-{name}")
        shutil.rmtree(workdir, ignore_errors=True)

    expected = load_expectations(Path(args.expected))
    listed_in = Path(args.expected).name
    rows, problems = judge(results, expected if "kaas" in brokers else {}, listed_in)
    kafka_version = libs.parent.name.removeprefix("kafka-")
    ran = {"kafka": f"Apache Kafka {kafka_version} (KRaft, single node)", "kaas": f"{BROKER_TITLE['kaas']} at {git_rev()}"}
    header = (f"Conformance: {' and '.join(ran[b] for b in BROKERS if b in brokers)}, "
              f"{len(rows)} scenarios, {time.monotonic() - started:.0f} s")
    table = render(rows, header, brokers)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(table + ("\n" + "\n".join(f"- {p}" for p in problems) + "\n" if problems else ""))
    # The same rows for compat_table.py, which makes the README's compatibility table from them.
    Path(args.out).with_suffix(".json").write_text(json.dumps({"header": header, "rows": rows}, indent=1) + "\n")
    print(table)
    passed = {b: sum(1 for r in results if r.broker == b and r.ok) for b in brokers}
    counts = ", ".join(f"{BROKER_TITLE[b]} {passed[b]}/{sum(1 for r in results if r.broker == b)} pass" for b in brokers)
    print(f"{counts}; table in {args.out}, logs in {logroot}")
    if problems:
        print("\nconformance FAILED:")
        for p in problems:
            print(f"  - {p}")
        return 1
    if "kaas" in brokers:
        print(f"conformance OK (every kaas failure is listed in {listed_in})")
    else:
        print("conformance OK (every scenario passes on Apache Kafka)")
    return 0


def git_rev() -> str:
    p = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (p.stdout.strip() or "?") + ("+changes" if dirty else "")


if __name__ == "__main__":
    sys.exit(main())
