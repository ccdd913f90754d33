import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * MirrorMaker 2 (connect-mirror, in the release ConnectApp runs) as an application of the
 * conformance suite: a dedicated MirrorMaker between the broker under test and a peer (Apache
 * Kafka: the suite runs it against kaas when it runs both brokers), replicating one topic each way. Settings are MirrorMaker's
 * defaults but addresses, topic names, short intervals, offset.lag.max=0 (offset syncs as often as
 * MirrorMaker sends them) and a replication factor of -1.
 * Checks: each topic's records arrive in the other cluster as `<alias>.<topic>` with their keys,
 * values and partitions; a consumer group's offsets committed on the peer are translated onto the
 * test cluster's copy, never past the committed position, and exactly once the group committed
 * the ends; a topic config changed on the peer is
 * changed on its copy (MirrorMaker sends every config of the peer's topic, defaults as deletions,
 * so the test cluster must know every topic config the peer's release has).
 * MirrorMaker's own log (work/mirrormaker.log) has its offset-sync and checkpoint steps at DEBUG.
 *
 * Usage: java -cp connect-libs/*:. MirrorApp PEER_BOOTSTRAP TEST_BOOTSTRAP
 */
public final class MirrorApp {
    static final Duration WAIT = Duration.ofSeconds(90);
    static final String RUN = UUID.randomUUID().toString().substring(0, 8);
    static final String FORTH = "conf-mm2-forth-" + RUN; // peer -> test
    static final String BACK = "conf-mm2-back-" + RUN; // test -> peer
    static final String GROUP = "conf-mm2-group-" + RUN;
    static final int RECORDS = 200;
    static final int CONSUMED = 100;
    static final String RETENTION_MS = "86400001";
    // Cluster aliases: MirrorMaker keeps its own state (worker groups, internal topics) under
    // them, so a run must not meet an earlier run's.
    static final String PEER = "peer" + RUN;
    static final String TEST = "test" + RUN;

    public static void main(String[] args) throws Exception {
        String peer = args[args.length - 2];
        String test = args[args.length - 1];
        System.out.println("VERSION\t" + Conformance.clientVersion());
        Path work = Files.createTempDirectory("conf-mm2");
        Process mm2 = null;
        String scenario = "topic mirrored from the peer";
        try {
            create(peer, FORTH);
            create(test, BACK);
            Map<TopicPartition, List<String>> forth = produce(peer, FORTH);
            Map<TopicPartition, List<String>> back = produce(test, BACK);
            Map<TopicPartition, Long> committed = consumeAndCommit(peer, FORTH);

            Path props = work.resolve("mm2.properties");
            Files.writeString(props, String.join("\n",
                "clusters=" + PEER + "," + TEST,
                PEER + ".bootstrap.servers=" + peer,
                TEST + ".bootstrap.servers=" + test,
                PEER + "->" + TEST + ".enabled=true",
                PEER + "->" + TEST + ".topics=" + FORTH,
                TEST + "->" + PEER + ".enabled=true",
                TEST + "->" + PEER + ".topics=" + BACK,
                "groups=" + GROUP,
                "sync.group.offsets.enabled=true",
                "sync.group.offsets.interval.seconds=1",
                "sync.topic.configs.interval.seconds=1",
                "emit.checkpoints.interval.seconds=1",
                "offset.lag.max=0",
                // Offset syncs held back while another is in flight go out on the task's commit.
                "offset.flush.interval.ms=1000",
                "replication.factor=-1",
                "checkpoints.topic.replication.factor=-1",
                "heartbeats.topic.replication.factor=-1",
                "offset-syncs.topic.replication.factor=-1",
                "config.storage.replication.factor=-1",
                "offset.storage.replication.factor=-1",
                "status.storage.replication.factor=-1",
                ""));
            Path log4j = work.resolve("log4j2.properties");
            Files.writeString(log4j, String.join("\n",
                "status = error",
                "appender.out.type = Console",
                "appender.out.name = OUT",
                "appender.out.layout.type = PatternLayout",
                "appender.out.layout.pattern = [%d] %p %m (%c)%n",
                "rootLogger.level = warn",
                "rootLogger.appenderRef.out.ref = OUT",
                "logger.mirror.name = org.apache.kafka.connect.mirror",
                "logger.mirror.level = debug",
                "logger.log.name = org.apache.kafka.connect.util.KafkaBasedLog",
                "logger.log.level = debug",
                ""));
            mm2 = Apps.childJvmLogging(work, "mirrormaker.log", log4j.toString(), "384M", "org.apache.kafka.connect.mirror.MirrorMaker",
                props.toString());
            final Process running = mm2;

            Apps.waitFor(WAIT, PEER + "." + FORTH + " on the test cluster", running, () -> same(test, PEER + "." + FORTH, forth));
            Apps.result(scenario, "");

            scenario = "topic mirrored back to the peer";
            Apps.waitFor(WAIT, TEST + "." + BACK + " on the peer", running, () -> same(peer, TEST + "." + BACK, back));
            Apps.result(scenario, "");

            scenario = "group offsets translated";
            // MirrorMaker translates from a sparse set of offset syncs, so a translated offset may
            // lie before the committed one (a consumer moving over re-reads a little) but never
            // after it (it would skip records). Which offsets it can translate depends on which
            // syncs it chose to emit (with a whole partition copied in one batch, none below the
            // middle), so the group then commits the end of each partition, which MirrorMaker
            // always translates exactly: the test cluster must end up with exactly those offsets.
            Map<TopicPartition, Long> ends = commitEnds(peer, FORTH, forth.keySet());
            Apps.waitFor(WAIT, "the group's offsets on the test cluster", running, () -> {
                Map<TopicPartition, Long> got = groupOffsets(test, PEER + "." + FORTH);
                for (var e : ends.entrySet()) {
                    int partition = e.getKey().partition();
                    Long translated = got.get(new TopicPartition(PEER + "." + FORTH, partition));
                    if (translated == null) return "no offset for partition " + partition + " yet: " + got;
                    Long before = committed.get(e.getKey());
                    Conformance.check(translated <= e.getValue(), "partition " + partition + " translated to "
                        + translated + ", past the committed " + e.getValue());
                    if (translated < e.getValue()) return "partition " + partition + " at " + translated + " (first commit "
                        + before + "), not yet at the end " + e.getValue();
                }
                return got.size() == ends.size() ? "" : "offsets for other partitions too: " + got;
            });
            Apps.result(scenario, "");

            scenario = "topic config change mirrored";
            try (Admin admin = admin(peer)) {
                ConfigResource forthTopic = new ConfigResource(ConfigResource.Type.TOPIC, FORTH);
                var set = new AlterConfigOp(new ConfigEntry("retention.ms", RETENTION_MS), AlterConfigOp.OpType.SET);
                admin.incrementalAlterConfigs(Map.of(forthTopic, List.of(set))).all().get(30, TimeUnit.SECONDS);
            }
            Apps.waitFor(WAIT, "retention.ms of " + PEER + "." + FORTH + " on the test cluster", running, () -> {
                String now = topicConfig(test, PEER + "." + FORTH, "retention.ms");
                return now.equals(RETENTION_MS) ? "" : "retention.ms is " + now + ", not " + RETENTION_MS;
            });
            Apps.result(scenario, "");
        } catch (Throwable t) {
            Apps.result(scenario, Conformance.describe(t) + " (log: " + work + ")");
        } finally {
            if (mm2 != null) {
                mm2.destroy();
                if (!mm2.waitFor(30, TimeUnit.SECONDS)) mm2.destroyForcibly();
            }
        }
        System.exit(0);
    }

    static Admin admin(String bootstrap) {
        return Admin.create(Map.of("bootstrap.servers", bootstrap));
    }

    static void create(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) -1))).all().get(30, TimeUnit.SECONDS);
        }
    }

    /** RECORDS keyed records; what each partition holds, in order, as "key=value". */
    static Map<TopicPartition, List<String>> produce(String bootstrap, String topic) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        Map<TopicPartition, List<String>> sent = new HashMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < RECORDS; i++) {
                String key = "k" + (i % 17);
                var md = producer.send(new ProducerRecord<>(topic, key, "v" + i)).get(30, TimeUnit.SECONDS);
                sent.computeIfAbsent(new TopicPartition(topic, md.partition()), k -> new ArrayList<>()).add(key + "=v" + i);
            }
        }
        return sent;
    }

    /** The group reads CONSUMED records of the topic on the peer and commits where it stopped. */
    static Map<TopicPartition, Long> consumeAndCommit(String bootstrap, String topic) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", GROUP);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("max.poll.records", "10");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            Map<TopicPartition, Long> next = new HashMap<>();
            int read = 0;
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (read < CONSUMED) {
                Conformance.check(System.nanoTime() < deadline, "the group read " + read + " records");
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    if (read == CONSUMED) break;
                    next.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
                    read++;
                }
            }
            Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
            next.forEach((tp, offset) -> commit.put(tp, new OffsetAndMetadata(offset)));
            c.commitSync(commit);
            return next;
        }
    }

    /** The group commits the end offset of each of `partitions` (its members are gone: an assigned consumer may commit). */
    static Map<TopicPartition, Long> commitEnds(String bootstrap, String topic, java.util.Set<TopicPartition> partitions) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", GROUP);
        p.put("enable.auto.commit", "false");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> parts = new ArrayList<>(partitions);
            c.assign(parts);
            Map<TopicPartition, Long> ends = c.endOffsets(parts);
            Map<TopicPartition, OffsetAndMetadata> commit = new HashMap<>();
            ends.forEach((tp, end) -> commit.put(tp, new OffsetAndMetadata(end)));
            c.commitSync(commit);
            return ends;
        }
    }

    /** "" when the mirrored topic holds what was sent, partition by partition, in order. */
    static String same(String bootstrap, String mirrored, Map<TopicPartition, List<String>> sent) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = admin(bootstrap)) {
            if (!admin.listTopics().names().get(10, TimeUnit.SECONDS).contains(mirrored)) return "no topic " + mirrored + " yet";
        } catch (Exception e) {
            return e.toString();
        }
        Map<TopicPartition, List<String>> got = new HashMap<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> parts = c.partitionsFor(mirrored).stream().map(i -> new TopicPartition(mirrored, i.partition())).toList();
            c.assign(parts);
            c.seekToBeginning(parts);
            Map<TopicPartition, Long> end = c.endOffsets(parts);
            long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
            while (parts.stream().anyMatch(tp -> c.position(tp) < end.get(tp)) && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    got.computeIfAbsent(new TopicPartition(r.topic(), r.partition()), k -> new ArrayList<>()).add(r.key() + "=" + r.value());
                }
            }
        }
        Map<TopicPartition, List<String>> want = new HashMap<>();
        sent.forEach((tp, records) -> want.put(new TopicPartition(mirrored, tp.partition()), records));
        if (got.equals(want)) return "";
        int n = got.values().stream().mapToInt(List::size).sum();
        return mirrored + " holds " + n + " of " + RECORDS + " records" + (n == RECORDS ? " (not as sent)" : "");
    }

    /** The value a topic reports for one config. */
    static String topicConfig(String bootstrap, String topic, String name) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(resource)).all().get(10, TimeUnit.SECONDS).get(resource);
            ConfigEntry entry = config.get(name);
            return entry == null ? "absent" : entry.value();
        }
    }

    /** The group's committed offsets on the topic (with one broker as both clusters, the group holds the source's too). */
    static Map<TopicPartition, Long> groupOffsets(String bootstrap, String topic) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            Map<TopicPartition, Long> out = new HashMap<>();
            admin.listConsumerGroupOffsets(GROUP).partitionsToOffsetAndMetadata().get(10, TimeUnit.SECONDS)
                .forEach((tp, om) -> {
                    if (om != null && tp.topic().equals(topic)) out.put(tp, om.offset());
                });
            return out;
        }
    }
}
