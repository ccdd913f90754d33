#!/usr/bin/env python3
"""Side-by-side benchmark: kaas and Apache Kafka (pinned in pom.xml) on this machine, in one run.

Both brokers run at once on the same local disk; the workloads alternate between them (the order
rotates from one workload to the next). Three targets:

  kaas         local mode, every acks=all produce answered after its bytes are fsynced
  kafka        Apache Kafka with its shipped defaults: acknowledged from the page cache
  kafka-fsync  the same broker, topics created with flush.messages=1: Kafka fsyncs every append
               before answering, the durability kaas gives

For each message size (100 B, 1 KiB, 16 KiB) and partition count (1, 8), acks=all:
  - kaas-bench produce (librdkafka, flat out for BENCH_SECONDS) and kaas-bench consume,
  - Kafka's ProducerPerformance (Java client, flat out; it has no duration option, so a 5 MB
    probe measures its rate on the target first and the run gets BENCH_SECONDS worth of records)
    and ConsumerPerformance on what it wrote (which subscribes, so it needs consumer groups);
    every target produces first, then each consumer reads the same number of records on every
    target (the fewest any target took in), so consumer figures compare equal work,
then end-to-end latency (produce -> consume, java/E2ELatency.java) at a fixed rate: 50 % of
the slowest target's flat-out ProducerPerformance rate for 1 KiB on 1 partition, the same
offered load for all three.

Broker CPU (% of one core: utime+stime over wall time, from /proc/PID/stat), peak RSS (VmRSS
sampled every 200 ms) and the client's CPU (the same, from the tool's rusage once it exited) are
measured for each run: broker and client share two cores, so a cell where the client takes a
whole core is bound by the client, whichever broker it talks to. Results go to --out (Markdown)
and stdout.

Environment: BENCH_SECONDS (default 10; 3 gives a quick run), BENCH_SIZES (e.g. "1024"),
BENCH_PARTITIONS (e.g. "1"), BENCH_TARGETS (e.g. "kaas,kafka-fsync"), BENCH_ROUNDS (default 1:
every produce run that many times, the targets alternating; the ratios compare medians),
BENCH_TOOLS (default "kaas-bench,ProducerPerformance"), BENCH_CONSUME (default 1; 0 measures
producers only, without the consumers and the end-to-end latency).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import resource
import statistics
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conformance as conf  # noqa: E402  (shared: paths, jar fetch, builds, broker start/stop)

HERE = conf.HERE
REPO = conf.REPO
BIN = conf.BIN
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGET_TITLE = {"kaas": "kaas", "kafka": "Kafka (defaults)", "kafka-fsync": "Kafka (flush.messages=1)"}
# Each producing tool writes its own topics, named with this prefix.
TOOL_PREFIX = {"kaas-bench": "kb", "ProducerPerformance": "pp"}


def topic_of(tool: str, target: str, size: int, parts: int, rnd: int = 0) -> str:
    """The topic `tool` writes on `target` in round `rnd` of a workload."""
    return f"{TOOL_PREFIX[tool]}-{target}-{size}-{parts}p" + (f"-r{rnd}" if rnd else "")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclasses.dataclass
class Figures:
    workload: str
    tool: str
    target: str
    mb_s: float | None = None
    msg_s: float | None = None
    p50: float | None = None
    p99: float | None = None
    p999: float | None = None
    cpu: float | None = None
    rss_mib: float | None = None
    client_cpu: float | None = None
    error: str = ""


class BrokerDied(Exception):
    """The broker process under measurement is gone."""

    def __init__(self, pid: int):
        super().__init__(f"the broker (pid {pid}) died during the run")


class Meter:
    """Broker CPU and peak RSS over one run, from /proc."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_kib = 0
        self._stop = threading.Event()

    def _cpu_ticks(self) -> int:
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except FileNotFoundError:
            raise BrokerDied(self.pid) from None
        fields = stat.rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)

    def _rss_kib(self) -> int:
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except FileNotFoundError:
            return 0  # the run's end reports it
        m = re.search(r"^VmRSS:\s+(\d+)", status, re.M)
        return int(m.group(1)) if m else 0

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak_kib = max(self.peak_kib, self._rss_kib())

    def __enter__(self) -> "Meter":
        self.t0, self.c0 = time.monotonic(), self._cpu_ticks()
        self.peak_kib = self._rss_kib()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu = 100.0 * (self._cpu_ticks() - self.c0) / CLK_TCK / max(time.monotonic() - self.t0, 1e-9)
        self.rss_mib = max(self.peak_kib, self._rss_kib()) / 1024


def sh(cmd: list[str], timeout: float, env: dict | None = None) -> tuple[int, str, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return -1, out, "timed out"


PERF_ENV = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx512M", KAFKA_JVM_FAST="")


class Bench:
    def __init__(self, seconds: int, out_dir: Path):
        self.seconds = seconds
        self.out_dir = out_dir
        self.results: list[Figures] = []
        self.logf = open(out_dir / "bench.log", "w")

    def record(self, cmd: list[str], rc: int, out: str, err: str) -> None:
        self.logf.write(f"$ {' '.join(cmd)}\n[exit {rc}]\n{out}\n{err[-4000:]}\n")
        self.logf.flush()

    def kafka_tool(self, *args: str, timeout: float = 600) -> tuple[int, str, str]:
        cmd = ["nice", "-n", "10", str(BIN / "kafka-class.sh"), *args]
        rc, out, err = sh(cmd, timeout, PERF_ENV)
        self.record(cmd, rc, out, err)
        return rc, out, err

    def create_topic(self, bootstrap: str, topic: str, partitions: int, fsync: bool) -> None:
        extra = ["--config", "flush.messages=1"] if fsync else []
        rc, out, err = self.kafka_tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                                       "--partitions", str(partitions), "--replication-factor", "1", *extra)
        if rc != 0:
            raise RuntimeError(f"creating {topic}: {conf.first_error(err + out)}")

    def delete_topic(self, bootstrap: str, topic: str) -> None:
        # Best effort: a topic left behind costs disk space, not correctness.
        self.kafka_tool("topics", "--bootstrap-server", bootstrap, "--delete", "--topic", topic)

    def delete_topics(self, bootstrap: str, topics: list[str]) -> None:
        for topic in topics:
            self.delete_topic(bootstrap, topic)

    def kaas_bench(self, bootstrap: str, *args: str) -> tuple[dict | None, str]:
        cmd = ["nice", "-n", "10", str(REPO / "target" / "release" / "kaas-bench"), "--bootstrap", bootstrap, *args]
        rc, out, err = sh(cmd, self.seconds * 6 + 120)
        self.record(cmd, rc, out, err)
        rows = [l.split() for l in out.splitlines() if l and not l.startswith("scenario")]
        if rc != 0 or not rows:
            return None, conf.first_error(err or out)
        r = rows[-1]
        num = lambda s: None if s == "-" else float(s)  # noqa: E731
        return {"mb_s": num(r[-5]), "msg_s": num(r[-4]), "p50": num(r[-3]), "p99": num(r[-2]), "p999": num(r[-1])}, ""

    def measure(self, fig: Figures, pid: int, fn) -> Figures:
        # The client is a child this process waits for (through `nice` and, for Kafka's tools,
        # a shell): its CPU is in RUSAGE_CHILDREN once it exited.
        before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        with Meter(pid) as m:
            vals, err = fn()
        after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), max(time.monotonic() - t0, 1e-9)
        fig.client_cpu = 100.0 * ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / wall
        if vals:
            for k, v in vals.items():
                setattr(fig, k, v)
        fig.error = err
        fig.cpu, fig.rss_mib = m.cpu, m.rss_mib
        self.results.append(fig)
        status = f"{fig.mb_s:.1f} MB/s" if fig.mb_s is not None else f"failed: {err}"
        log(f"  {fig.workload:<14} {fig.tool:<22} {fig.target:<12} {status}; broker CPU {fig.cpu:.0f} %, "
            f"RSS {fig.rss_mib:.0f} MiB, client CPU {fig.client_cpu:.0f} %")
        return fig

    def producer_perf(self, bootstrap: str, topic: str, records: int, size: int) -> tuple[dict | None, str]:
        rc, out, err = self.kafka_tool(
            "producer-perf", "--topic", topic, "--num-records", str(records), "--record-size", str(size),
            "--throughput", "-1", "--command-property", f"bootstrap.servers={bootstrap}", "acks=all")
        m = re.search(r"records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
                      r"(\d+) ms 50th, \d+ ms 95th, (\d+) ms 99th, (\d+) ms 99.9th", out)
        if rc != 0 or not m:
            return None, conf.first_error(err + out)
        return {"msg_s": float(m[1]), "mb_s": float(m[2]), "p50": float(m[3]), "p99": float(m[4]), "p999": float(m[5])}, ""

    def consumer_perf(self, bootstrap: str, topic: str, records: int) -> tuple[dict | None, str]:
        rc, out, err = self.kafka_tool("consumer-perf", "--bootstrap-server", bootstrap, "--topic", topic,
                                       "--num-records", str(records), "--timeout", "20000", timeout=300)
        lines = [l for l in out.splitlines() if re.match(r"^\d{4}-", l)]
        if rc != 0 or not lines or re.search(r"^Error|\] ERROR ", err + out, re.M):
            return None, conf.first_error(err + out)
        # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
        # fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec: the fetch.* figures leave the group join out.
        f = [x.strip() for x in lines[-1].split(",")]
        return {"mb_s": float(f[8]), "msg_s": float(f[9])}, ""

    def e2e(self, java_cp: str, bootstrap: str, topic: str, rate: int, size: int) -> tuple[dict | None, str]:
        cmd = ["nice", "-n", "10", "java", "-Xmx1G", f"-Dlog4j2.configurationFile={HERE / 'log4j2-tools.properties'}",
               "-cp", java_cp, "E2ELatency", bootstrap, topic, str(rate), str(size), str(self.seconds)]
        rc, out, err = sh(cmd, self.seconds * 4 + 120)
        self.record(cmd, rc, out, err)
        m = re.search(r"^E2E\t(\d+)\t([\d.]+)\t([\d.]+)\t([\d.]+)\t([\d.]+)", out, re.M)
        if rc != 0 or not m or int(m[1]) == 0:
            return None, conf.first_error(err + out)
        return {"msg_s": float(m[2]), "mb_s": float(m[2]) * size / 1e6, "p50": float(m[3]), "p99": float(m[4]), "p999": float(m[5])}, ""


def fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def median_run(runs: list[Figures]) -> Figures:
    """Each figure's median over a target's runs of one cell (failed runs left out)."""
    ok = [f for f in runs if f.mb_s is not None] or runs[:1]
    med = lambda vals: statistics.median(vals) if vals else None  # noqa: E731
    return dataclasses.replace(ok[0], **{
        k: med([getattr(f, k) for f in ok if getattr(f, k) is not None])
        for k in ("mb_s", "msg_s", "p50", "p99", "p999", "cpu", "rss_mib", "client_cpu")})


def render(results: list[Figures], targets: list[str], header: str) -> str:
    out = [header, "", "### Every run", "",
           "| workload | tool | broker | MB/s | msg/s | p50 ms | p99 ms | p99.9 ms | broker CPU % | broker RSS MiB | client CPU % | note |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in results:
        out.append(f"| {f.workload} | {f.tool} | {TARGET_TITLE[f.target]} | {fmt(f.mb_s)} | {fmt(f.msg_s, 0)} | {fmt(f.p50, 2)} | "
                   f"{fmt(f.p99, 2)} | {fmt(f.p999, 2)} | {fmt(f.cpu, 0)} | {fmt(f.rss_mib, 0)} | {fmt(f.client_cpu, 0)} | "
                   f"{conf.shorten(f.error, 90)} |")
    # Ratios kaas / Kafka: throughput (>1: kaas faster), p99 latency (<1: kaas faster).
    others = [t for t in targets if t != "kaas"]
    if "kaas" in targets and others:
        cols = []
        for t in others:
            cols += [f"MB/s vs {TARGET_TITLE[t]}", f"p99 vs {TARGET_TITLE[t]}", f"CPU vs {TARGET_TITLE[t]}"]
        out += ["", "### kaas / Kafka (throughput above 1 and latency or CPU below 1 favour kaas; "
                "the median of each target's runs)", "",
                "| workload | tool | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
        runs: dict[tuple[str, str, str], list[Figures]] = {}
        for f in results:
            runs.setdefault((f.workload, f.tool, f.target), []).append(f)
        index = {key: median_run(fs) for key, fs in runs.items()}
        for (w, tool) in dict.fromkeys((f.workload, f.tool) for f in results):
            k = index.get((w, tool, "kaas"))
            cells = []
            for t in others:
                o = index.get((w, tool, t))
                cells += [ratio(k and k.mb_s, o and o.mb_s), ratio(k and k.p99, o and o.p99),
                          ratio(k and k.cpu if k and k.mb_s else None, o and o.cpu)]
            out.append(f"| {w} | {tool} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "target" / "bench-compare" / "results.md"))
    args = ap.parse_args()
    seconds = int(os.environ.get("BENCH_SECONDS", "10"))
    sizes = [int(s) for s in os.environ.get("BENCH_SIZES", "100,1024,16384").split(",")]
    partition_counts = [int(p) for p in os.environ.get("BENCH_PARTITIONS", "1,8").split(",")]
    targets = os.environ.get("BENCH_TARGETS", "kaas,kafka,kafka-fsync").split(",")
    rounds = max(int(os.environ.get("BENCH_ROUNDS", "1")), 1)
    tools = os.environ.get("BENCH_TOOLS", "kaas-bench,ProducerPerformance").split(",")
    unknown = set(tools) - set(TOOL_PREFIX)
    if unknown:
        raise SystemExit(f"BENCH_TOOLS: unknown {', '.join(sorted(unknown))} ({', '.join(TOOL_PREFIX)})")
    consume = os.environ.get("BENCH_CONSUME", "1") != "0"
    out_dir = Path(args.out).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    load_before = Path("/proc/loadavg").read_text().split()[:3]

    libs = conf.kafka_libs()
    java_cp = f"{libs}/*:{conf.build_java(libs)}"
    for exe in ("kaas", "kaas-bench"):
        if not (REPO / "target" / "release" / exe).exists():
            raise SystemExit(f"target/release/{exe} is missing: cargo build --release -p kaas -p kaas-bench")

    work = Path(tempfile.mkdtemp(prefix="kaas-bench-compare."))
    brokers = {}
    if "kaas" in targets:
        brokers["kaas"] = conf.Broker("kaas", work)
    if "kafka" in targets or "kafka-fsync" in targets:
        brokers["kafka"] = conf.Broker("kafka", work)
    bench = Bench(seconds, out_dir)
    try:
        for name, b in brokers.items():
            env = dict(os.environ)
            script = "kafka-start.sh" if name == "kafka" else "kaas-start.sh"
            # Kafka with its distribution's JVM settings (1 GiB heap); both brokers niced alike.
            env.pop("KAFKA_HEAP_OPTS", None)
            # Kafka removes a deleted topic's files a minute later by default: a second here, so
            # that flat-out runs one after another do not fill the disk (no effect on the runs).
            extra = ["log.segment.delete.delay.ms=1000"] if name == "kafka" else []
            p = subprocess.run(["nice", "-n", "10", str(BIN / script), str(b.dir), *extra], capture_output=True, text=True, env=env)
            if p.returncode != 0:
                raise SystemExit(f"{name} did not start:\n{p.stderr}")
            b.bootstrap = p.stdout.strip().splitlines()[-1]
            b.pid = int((b.dir / "pid").read_text())
            log(f"{name} on {b.bootstrap} (pid {b.pid})")

        def broker_of(target: str):
            return brokers["kaas" if target == "kaas" else "kafka"]

        rotation = 0
        pp_rate: dict[str, float] = {}
        for size in sizes:
            for parts in partition_counts:
                workload = f"{size} B, {parts} p"
                order = targets[rotation % len(targets):] + targets[: rotation % len(targets)]
                rotation += 1
                # Produce on every target first (BENCH_ROUNDS times, alternating), then consume
                # the same number of records everywhere: the fewest any target took in (a
                # faster producer must not make its broker's consumer read more). Consumers
                # read the first round's topics; the others go as soon as they are written
                # (flat-out runs write gigabytes).
                produced_kb: dict[str, int] = {}
                produced_pp: dict[str, int] = {}
                for rnd in range(rounds):
                    for target in order:
                        b = broker_of(target)
                        kb_topic, pp_topic = (topic_of(t, target, size, parts, rnd) for t in TOOL_PREFIX)
                        fsync = target == "kafka-fsync"
                        if "kaas-bench" in tools:
                            bench.create_topic(b.bootstrap, kb_topic, parts, fsync)
                            kb = bench.measure(Figures(workload, "kaas-bench produce", target), b.pid,
                                               lambda: bench.kaas_bench(b.bootstrap, "produce", "--topic", kb_topic, "--partitions",
                                                                        str(parts), "--size", str(size), "--seconds", str(seconds), "--acks", "all"))
                            if kb.msg_s and rnd == 0:
                                produced_kb[target] = int(kb.msg_s * seconds)
                        if "ProducerPerformance" in tools:
                            bench.create_topic(b.bootstrap, pp_topic, parts, fsync)
                            # ProducerPerformance has no duration option: a probe of 5 MB (not
                            # counted) measures its rate on this target, and the run gets
                            # BENCH_SECONDS of that.
                            probe, _ = bench.producer_perf(b.bootstrap, pp_topic, max(5_000_000 // size, 100), size)
                            rate = probe["msg_s"] if probe else 1000
                            records = int(min(max(rate * seconds, 1000), 20_000_000))
                            pf = bench.measure(Figures(workload, "ProducerPerformance", target), b.pid,
                                               lambda: bench.producer_perf(b.bootstrap, pp_topic, records, size))
                            if pf.msg_s and rnd == 0:
                                produced_pp[target] = records
                            if size == 1024 and parts == 1 and pf.msg_s:
                                pp_rate[target] = min(pf.msg_s, pp_rate.get(target, pf.msg_s))
                        if rnd > 0 or not consume:
                            bench.delete_topics(b.bootstrap, [topic_of(t, target, size, parts, rnd) for t in tools])
                # kaas-bench's figure is a rate over a timed run: its count is approximate, so
                # read a little less than the smallest.
                consume_kb = max(int(min(produced_kb.values(), default=0) * 0.95), 1)
                consume_pp = max(min(produced_pp.values(), default=0), 1)
                for target in order if consume else []:
                    b = broker_of(target)
                    kb_topic, pp_topic = (topic_of(t, target, size, parts) for t in TOOL_PREFIX)
                    if "kaas-bench" in tools:
                        bench.measure(Figures(workload, "kaas-bench consume", target), b.pid,
                                      lambda: bench.kaas_bench(b.bootstrap, "consume", "--topic", kb_topic, "--partitions", str(parts),
                                                               "--messages", str(consume_kb)))
                    if "ProducerPerformance" in tools:
                        bench.measure(Figures(workload, "ConsumerPerformance", target), b.pid,
                                      lambda: bench.consumer_perf(b.bootstrap, pp_topic, consume_pp))
                    # Free the disk before the next workload.
                    bench.delete_topics(b.bootstrap, [topic_of(t, target, size, parts) for t in tools])

        if pp_rate and consume:
            rate = int(0.5 * min(pp_rate.values()))
            workload = f"e2e 1024 B @ {rate:,}/s"
            log(f"end-to-end latency at {rate} msg/s (50 % of the slowest ProducerPerformance 1 KiB/1 p rate)")
            for target in targets:
                b = broker_of(target)
                topic = f"e2e-{target}"
                bench.create_topic(b.bootstrap, topic, 1, target == "kafka-fsync")
                bench.measure(Figures(workload, "E2ELatency", target), b.pid,
                              lambda: bench.e2e(java_cp, b.bootstrap, topic, rate, 1024))
    except BrokerDied as e:
        for b in brokers.values():
            for f in sorted(b.dir.glob("*.log")):
                log(f"--- last lines of {f}:\n" + "\n".join(f.read_text(errors="replace").splitlines()[-30:]))
        raise SystemExit(f"bench-compare stopped: {e} (disk: {shutil.disk_usage(work).free // 2**30} GiB free)")
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(work, ignore_errors=True)

    disk = subprocess.run(["df", "--output=source", tempfile.gettempdir()], capture_output=True, text=True).stdout.split()[-1]
    kafka_version = libs.parent.name.removeprefix("kafka-")
    header = (f"## bench-compare: kaas {conf.git_rev()} vs Apache Kafka {kafka_version}, BENCH_SECONDS={seconds}, "
              f"BENCH_ROUNDS={rounds}, {os.cpu_count()} cores, data on {disk} ({time.monotonic() - started:.0f} s; load average "
              f"{' '.join(load_before)} before, {' '.join(Path('/proc/loadavg').read_text().split()[:3])} after)\n\n"
              "acks=all everywhere; clients with default settings; broker and clients share the machine. "
              "CPU is the broker's, in % of one core; RSS its peak; client CPU the load generator's. ConsumerPerformance subscribes (a consumer "
              "group); kaas-bench consume assigns. Each consumer reads the same number of records from every broker (the fewest any "
              "broker took in that workload's produce phase). E2ELatency: produce->consume at the same fixed rate for every broker.")
    table = render(bench.results, targets, header)
    Path(args.out).write_text(table)
    print(table)
    print(f"written to {args.out}; every command and its output in {out_dir / 'bench.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
