import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The kafka-clients part of the conformance suite: each scenario talks to one broker (Apache
 * Kafka or kaas) with the Java client's DEFAULT settings (so the producer is idempotent with
 * acks=all, as Kafka 3+ clients are by default) and prints one line
 *
 *   RESULT <tab> scenario <tab> PASS|FAIL <tab> reason
 *
 * The only settings changed are timeouts, so that a missing feature fails in seconds instead
 * of the client's minute-long defaults; group and transaction ids are the only other additions.
 *
 * Usage: java -cp kafka-libs/*:. Conformance BOOTSTRAP [scenario ...]
 */
public final class Conformance {
    /** How long a scenario may wait for something that should happen (records, a rebalance). */
    static final Duration WAIT = Duration.ofSeconds(Long.getLong("conformance.wait.s", 15));
    static final int RECORDS = 200;

    static String bootstrap;
    static final String RUN = UUID.randomUUID().toString().substring(0, 8);

    interface Scenario {
        void run() throws Exception;
    }

    /**
     * The transactional id of the transactions scenario, which kafka-transactions then lists and
     * describes; another release of the client run beside this one passes its own.
     */
    static final String TXN_ID = System.getProperty("conformance.txn.id", "conformance-txn");

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        // The client release that runs (the suite compiles this file against several).
        System.out.println("VERSION\t" + clientVersion());
        Map<String, Scenario> all = new java.util.LinkedHashMap<>();
        all.put("admin", Conformance::admin);
        all.put("produce idempotent", Conformance::produceIdempotent);
        all.put("consume assign", Conformance::consumeAssign);
        all.put("group classic", () -> group("classic"));
        // KIP-848's group.protocol arrived in 3.7: an older client has no consumer protocol.
        if (ConsumerConfig.configNames().contains("group.protocol")) {
            all.put("group consumer", () -> group("consumer"));
        }
        all.put("transactions", Conformance::transactions);
        // Share groups (KIP-932) need KafkaShareConsumer (4.1+): ShareConformance.java is
        // compiled against the pinned client only, so an older release's build lacks the class.
        try {
            Class.forName("ShareConformance").getMethod("register", Map.class).invoke(null, all);
        } catch (ClassNotFoundException e) {
            // an older client: no share group scenarios
        }
        List<String> chosen = args.length > 1 ? List.of(args).subList(1, args.length) : new ArrayList<>(all.keySet());
        ExecutorService pool = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r);
            t.setDaemon(true);
            return t;
        });
        for (String name : chosen) {
            Scenario s = all.get(name);
            if (s == null) throw new IllegalArgumentException("unknown scenario " + name);
            Future<?> f = pool.submit(() -> {
                s.run();
                return null;
            });
            String verdict;
            try {
                f.get(4 * WAIT.toSeconds() + 30, TimeUnit.SECONDS);
                verdict = "PASS\t";
            } catch (TimeoutException e) {
                f.cancel(true);
                verdict = "FAIL\tscenario timed out";
            } catch (java.util.concurrent.ExecutionException e) {
                verdict = "FAIL\t" + describe(e.getCause());
            }
            System.out.println("RESULT\t" + name + "\t" + verdict);
            System.out.flush();
        }
        System.exit(0);
    }

    /** kafka-clients' own version file (what AppInfoParser reads; that class moved in 4.x). */
    static String clientVersion() throws Exception {
        Properties v = new Properties();
        try (var in = KafkaProducer.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in != null) v.load(in);
        }
        return v.getProperty("version", "?");
    }

    /** One line naming the innermost cause, which is where Kafka puts the broker's error. */
    static String describe(Throwable t) {
        Throwable root = t;
        while (root.getCause() != null && root.getCause() != root) root = root.getCause();
        String msg = root.getClass().getSimpleName() + ": " + root.getMessage();
        if (root != t && !(t instanceof AssertionError)) msg = t.getClass().getSimpleName() + " <- " + msg;
        if (t instanceof AssertionError) msg = t.getMessage();
        return msg.replace('\t', ' ').replace('\n', ' ');
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static String topic(String scenario) {
        return "conf-java-" + scenario.replace(' ', '-') + "-" + RUN;
    }

    static Properties common() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        // Fail within the scenario's budget instead of the default 60 s.
        p.put("default.api.timeout.ms", Long.toString(WAIT.toMillis()));
        p.put("request.timeout.ms", Long.toString(WAIT.toMillis()));
        return p;
    }

    static Admin adminClient() {
        Properties p = common();
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Long.toString(WAIT.toMillis()));
        return Admin.create(p);
    }

    static KafkaProducer<String, String> producer(Properties extra) {
        Properties p = common();
        p.remove("default.api.timeout.ms");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Long.toString(WAIT.toMillis()));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(WAIT.toMillis() + 1000));
        p.putAll(extra);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(Properties extra) {
        Properties p = common();
        p.remove("request.timeout.ms");
        p.putAll(extra);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    /**
     * Closes a consumer within `timeout`: with CloseOptions where the client has it (4.1+,
     * KIP-1092, which deprecates close(Duration)), else with close(Duration), so that this one
     * file compiles against older releases too.
     */
    static void close(KafkaConsumer<String, String> c, Duration timeout) throws Exception {
        try {
            Class<?> options = Class.forName("org.apache.kafka.clients.consumer.CloseOptions");
            Object o = options.getMethod("timeout", Duration.class).invoke(null, timeout);
            KafkaConsumer.class.getMethod("close", options).invoke(c, o);
        } catch (ClassNotFoundException e) {
            KafkaConsumer.class.getMethod("close", Duration.class).invoke(c, timeout);
        }
    }

    /**
     * One topic's description: DescribeTopicsResult.allTopicNames() where the client has it
     * (3.1+), else all(), which 4.0 removed; by reflection, so this file compiles against both.
     */
    @SuppressWarnings("unchecked")
    static TopicDescription describeTopic(Admin admin, String t) throws Exception {
        Object result = admin.describeTopics(List.of(t));
        java.lang.reflect.Method names;
        try {
            names = result.getClass().getMethod("allTopicNames");
        } catch (NoSuchMethodException e) {
            names = result.getClass().getMethod("all");
        }
        try {
            var future = (org.apache.kafka.common.KafkaFuture<Map<String, TopicDescription>>) names.invoke(result);
            return future.get().get(t);
        } catch (java.lang.reflect.InvocationTargetException e) {
            throw e.getCause() instanceof Exception ex ? ex : e;
        }
    }

    /**
     * Creates a topic and returns once every partition's leader serves it: CreateTopics returns
     * when the controller committed the topic, and a produce that reaches a KRaft broker before it
     * has created the partition's log can leave an idempotent producer of an old client (3.0) with
     * an OutOfOrderSequence it never recovers from (seen on Apache Kafka 4.4 in a busy run). A
     * leader answers ListOffsets only once the partition is there. Test setup, the same for both
     * brokers: no scenario's verdict depends on it.
     */
    static void createTopic(String name, int partitions) throws Exception {
        try (Admin admin = adminClient()) {
            admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all().get();
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int p = 0; p < partitions; p++) {
                latest.put(new TopicPartition(name, p), OffsetSpec.latest());
            }
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (true) {
                try {
                    admin.listOffsets(latest).all().get();
                    return;
                } catch (java.util.concurrent.ExecutionException e) {
                    if (System.nanoTime() > deadline) {
                        throw e;
                    }
                    Thread.sleep(100);
                }
            }
        }
    }

    /** Produces RECORDS keyed records with a header to a new 3-partition topic; returns it. */
    static String produce(String scenario) throws Exception {
        String t = topic(scenario);
        createTopic(t, 3);
        try (KafkaProducer<String, String> producer = producer(new Properties())) {
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(t, i % 3, "k" + i, "v" + i);
                r.headers().add("h", ("x" + i).getBytes(StandardCharsets.UTF_8));
                acks.add(producer.send(r));
            }
            Map<Integer, Long> next = new HashMap<>();
            for (Future<RecordMetadata> f : acks) {
                RecordMetadata m = f.get();
                long expected = next.getOrDefault(m.partition(), 0L);
                check(m.offset() == expected, "partition " + m.partition() + " acked offset " + m.offset() + ", expected " + expected);
                next.put(m.partition(), expected + 1);
            }
        }
        return t;
    }

    /** Checks that records are exactly what produce() wrote, in order within each partition. */
    static void verify(List<ConsumerRecord<String, String>> got, int expected) {
        check(got.size() == expected, "consumed " + got.size() + " records, expected " + expected);
        Map<Integer, Integer> lastIndex = new HashMap<>();
        for (ConsumerRecord<String, String> r : got) {
            int i = Integer.parseInt(r.key().substring(1));
            check(r.value().equals("v" + i), "record " + r.key() + " has value " + r.value());
            Header h = r.headers().lastHeader("h");
            check(h != null && new String(h.value(), StandardCharsets.UTF_8).equals("x" + i), "record " + r.key() + " lost its header");
            check(i % 3 == r.partition(), "record " + r.key() + " on partition " + r.partition());
            check(lastIndex.getOrDefault(r.partition(), -1) < i, "partition " + r.partition() + " out of order at " + r.key());
            lastIndex.put(r.partition(), i);
        }
    }

    static List<ConsumerRecord<String, String>> pollUntil(KafkaConsumer<String, String> c, int n) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (got.size() < n && System.nanoTime() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) got.add(r);
        }
        return got;
    }

    // ---- scenarios ----

    static void admin() throws Exception {
        String t = topic("admin");
        try (Admin admin = adminClient()) {
            check(!admin.describeCluster().nodes().get().isEmpty(), "describeCluster returned no nodes");
            admin.createTopics(List.of(new NewTopic(t, 2, (short) 1).configs(Map.of("retention.ms", "3600000")))).all().get();
            // The broker answering describeTopics may learn of the topic a moment after the
            // controller created it (Apache Kafka 4.4 was seen to answer UNKNOWN_TOPIC_OR_PARTITION
            // right after createTopics): ask again until it knows, within WAIT.
            TopicDescription d = null;
            for (long until = System.nanoTime() + WAIT.toNanos(); d == null; ) {
                try {
                    d = describeTopic(admin, t);
                } catch (java.util.concurrent.ExecutionException e) {
                    if (!(e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException) || System.nanoTime() > until) {
                        throw e;
                    }
                    Thread.sleep(100);
                }
            }
            check(d.partitions().size() == 2, "describeTopics: " + d.partitions().size() + " partitions, expected 2");
            admin.createPartitions(Map.of(t, org.apache.kafka.clients.admin.NewPartitions.increaseTo(4))).all().get();
            // createPartitions completes when the controller has committed the change; the broker
            // that answers describeTopics applies it from the metadata log a moment later (Kafka
            // 4.4 was seen to answer with the old count right after): read until it shows, within WAIT.
            long deadline = System.nanoTime() + WAIT.toNanos();
            while ((d = describeTopic(admin, t)).partitions().size() != 4) {
                check(System.nanoTime() < deadline, "after createPartitions: " + d.partitions().size() + " partitions, expected 4");
                Thread.sleep(100);
            }
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, t);
            String retention = admin.describeConfigs(List.of(res)).all().get().get(res).get("retention.ms").value();
            check("3600000".equals(retention), "retention.ms is " + retention);
            admin.incrementalAlterConfigs(Map.of(res, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET)))).all().get();
            // The same for a config change.
            deadline = System.nanoTime() + WAIT.toNanos();
            while (!"7200000".equals(retention = admin.describeConfigs(List.of(res)).all().get().get(res).get("retention.ms").value())) {
                check(System.nanoTime() < deadline, "after incrementalAlterConfigs retention.ms is " + retention);
                Thread.sleep(100);
            }
            TopicPartition tp = new TopicPartition(t, 0);
            long end = admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get().get(tp).offset();
            check(end == 0, "latest offset of an empty partition is " + end);
            admin.deleteTopics(List.of(t)).all().get();
            deadline = System.nanoTime() + WAIT.toNanos();
            while (admin.listTopics().names().get().contains(t)) {
                check(System.nanoTime() < deadline, "deleted topic still listed");
                Thread.sleep(100);
            }
        }
    }

    static void produceIdempotent() throws Exception {
        // Default settings: enable.idempotence=true, acks=all. produce() checks that every
        // record was acknowledged at the next offset of its partition.
        produce("produce idempotent");
    }

    static void consumeAssign() throws Exception {
        String t = produce("consume assign");
        try (KafkaConsumer<String, String> c = consumer(new Properties())) {
            List<TopicPartition> tps = List.of(new TopicPartition(t, 0), new TopicPartition(t, 1), new TopicPartition(t, 2));
            c.assign(tps);
            c.seekToBeginning(tps);
            verify(pollUntil(c, RECORDS), RECORDS);
        }
    }

    static void group(String protocol) throws Exception {
        String t = produce("group " + protocol);
        String group = "conf-java-" + protocol + "-" + RUN;
        Properties p = new Properties();
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        if (ConsumerConfig.configNames().contains("group.protocol")) {
            p.put("group.protocol", protocol);
        }
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        KafkaConsumer<String, String> c = consumer(p);
        try {
            c.subscribe(List.of(t));
            List<ConsumerRecord<String, String>> got = pollUntil(c, RECORDS);
            check(!got.isEmpty() || !c.assignment().isEmpty(), "no partitions assigned within " + WAIT.toSeconds() + " s (group never joined)");
            verify(got, RECORDS);
            c.commitSync();
        } finally {
            close(c, Duration.ofSeconds(5));
        }
        try (Admin admin = adminClient()) {
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
            check(committed.size() == 3 && total == RECORDS, "committed offsets " + committed);
            var desc = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            // ConsumerGroupDescription.type() arrived with KIP-848's admin changes (3.7+).
            Object type = null;
            try {
                type = desc.getClass().getMethod("type").invoke(desc);
            } catch (NoSuchMethodException e) {
                // An older client cannot tell; the group's working is checked above.
            }
            check(type == null || type.toString().equalsIgnoreCase(protocol), "group type " + type + ", expected " + protocol);
        }
    }

    static void transactions() throws Exception {
        String t = topic("transactions");
        createTopic(t, 1);
        Properties p = new Properties();
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, TXN_ID);
        try (KafkaProducer<String, String> producer = producer(p)) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(t, "c" + i, "committed"));
            producer.commitTransaction();
            producer.beginTransaction();
            for (int i = 0; i < 10; i++) producer.send(new ProducerRecord<>(t, "a" + i, "aborted"));
            producer.flush();
            producer.abortTransaction();
            // A last committed record, so that the aborted batch is followed by something, with a
            // group's offsets in the transaction (AddOffsetsToTxn and TxnOffsetCommit; with
            // transactions v2 the commit alone adds the group).
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(t, "c10", "committed"));
            producer.sendOffsetsToTransaction(Map.of(new TopicPartition(t, 0), new OffsetAndMetadata(5)),
                new org.apache.kafka.clients.consumer.ConsumerGroupMetadata(t + "-offsets"));
            producer.commitTransaction();
        }
        try (Admin admin = adminClient()) {
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(t + "-offsets").partitionsToOffsetAndMetadata().get();
            OffsetAndMetadata o = committed.get(new TopicPartition(t, 0));
            check(o != null && o.offset() == 5, "offsets committed with the transaction: " + committed);
        }
        TopicPartition tp = new TopicPartition(t, 0);
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            Properties cp = new Properties();
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
            try (KafkaConsumer<String, String> c = consumer(cp)) {
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                int want = isolation.equals("read_committed") ? 11 : 21;
                List<ConsumerRecord<String, String>> got = pollUntil(c, want);
                // Wait a little longer: a read_committed consumer must not see the aborted ones.
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) got.add(r);
                check(got.size() == want, isolation + " consumer read " + got.size() + " records, expected " + want);
                if (isolation.equals("read_committed")) {
                    check(got.stream().allMatch(r -> r.value().equals("committed")), "read_committed consumer saw aborted records");
                }
            }
        }
    }
}
