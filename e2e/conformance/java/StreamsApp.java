import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams (the kafka-streams artifact of the pinned Kafka release) as an application of the
 * conformance suite: a word count whose counts live in a state store backed by a changelog topic,
 * with processing.guarantee=exactly_once_v2 and otherwise default settings (but a shorter session). The application runs
 * in a child JVM that is killed (SIGKILL) mid-run and started again on an empty state directory,
 * so its state comes back from the changelog alone. Judged by what a read_committed consumer of
 * the output sees: each word's counts never go down and end at the count a reference computation
 * gives; the changelog is a compacted topic.
 *
 * Usage: java -cp kafka-libs/*:. StreamsApp BOOTSTRAP
 *        (StreamsApp --worker APP_ID INPUT OUTPUT STATE_DIR BOOTSTRAP runs the application)
 */
public final class StreamsApp {
    static final Duration WAIT = Duration.ofSeconds(120);
    static final String RUN = UUID.randomUUID().toString().substring(0, 8);
    static final String APP_ID = "conf-streams-" + RUN;
    static final String INPUT = "conf-streams-input-" + RUN;
    static final String OUTPUT = "conf-streams-counts-" + RUN;
    static final String STORE = "counts";
    static final int LINES = 2000;

    static String bootstrap;

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--worker")) {
            worker(args[1], args[2], args[3], args[4], args[5]);
            return;
        }
        bootstrap = args[args.length - 1];
        System.out.println("VERSION\t" + Conformance.clientVersion());
        Path work = Files.createTempDirectory("conf-streams");
        String failure = "";
        try {
            wordCountKilledAndRestarted(bootstrap, work, new HashMap<>());
        } catch (Throwable t) {
            failure = Conformance.describe(t) + " (application logs: " + work + ")";
        }
        Apps.result("word count exactly_once_v2, killed and restarted", failure);
        failure = "";
        try {
            changelogCompacted(bootstrap);
        } catch (Throwable t) {
            failure = Conformance.describe(t);
        }
        Apps.result("changelog topic compacted", failure);
        System.exit(0);
    }

    /** The application: words of INPUT's lines counted into STORE, every new count to OUTPUT. */
    static void worker(String appId, String input, String output, String stateDir, String bootstrap) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // The one setting changed for the test's sake: the killed instance's membership lapses
        // after 10 s instead of 45, so the restarted one is not kept waiting by its ghost.
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 10000);
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(input)
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word)
            .count(Materialized.as(STORE))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        CountDownLatch dead = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) dead.countDown();
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(10))));
        streams.start();
        dead.await();
        System.exit(1);
    }

    static void wordCountKilledAndRestarted(String bootstrap, Path work, Map<String, Long> reference) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(INPUT, 2, (short) -1), new NewTopic(OUTPUT, 2, (short) -1)))
                .all().get(30, TimeUnit.SECONDS);
        }
        List<String> lines = lines(reference);
        produce(bootstrap, lines.subList(0, LINES / 2));
        Process first = startWorker(work, "state-1", "worker-1.log");
        try {
            // Killed once some counts are out: its open transaction and its local state die with it.
            Apps.waitFor(WAIT, "the first run to publish counts", first,
                () -> readCommitted(bootstrap, Duration.ofSeconds(1)).isEmpty() ? "no counts yet" : "");
        } finally {
            first.destroyForcibly().waitFor();
        }
        produce(bootstrap, lines.subList(LINES / 2, LINES));
        // A new state directory: the store is restored from the changelog, not from local files.
        Process second = startWorker(work, "state-2", "worker-2.log");
        try {
            Apps.waitFor(WAIT, "the counts to reach the reference", second,
                () -> diff(readCommitted(bootstrap, Duration.ofSeconds(2)), reference));
        } finally {
            second.destroy();
            second.waitFor(30, TimeUnit.SECONDS);
            second.destroyForcibly();
        }
    }

    /** The changelog Kafka Streams created for the store must be compacted. */
    static void changelogCompacted(String bootstrap) throws Exception {
        String changelog = APP_ID + "-" + STORE + "-changelog";
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, changelog);
            String policy = admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r).get("cleanup.policy").value();
            Conformance.check(policy.contains("compact"), changelog + " has cleanup.policy=" + policy);
        }
    }

    /** LINES lines of words from a small vocabulary (seeded: the same input every run). */
    static List<String> lines(Map<String, Long> reference) {
        Random rnd = new Random(42);
        List<String> out = new ArrayList<>();
        for (int i = 0; i < LINES; i++) {
            StringBuilder line = new StringBuilder();
            int words = 1 + rnd.nextInt(8);
            for (int w = 0; w < words; w++) {
                String word = "w" + rnd.nextInt(60);
                reference.merge(word, 1L, Long::sum);
                line.append(w == 0 ? "" : " ").append(word);
            }
            out.add(line.toString());
        }
        return out;
    }

    static void produce(String bootstrap, List<String> lines) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (String line : lines) producer.send(new ProducerRecord<>(INPUT, null, line));
            producer.flush();
        }
    }

    /** Every count each word was given, in output order, as a read_committed consumer sees them. */
    static Map<String, List<Long>> readCommitted(String bootstrap, Duration idle) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Map<String, List<Long>> seen = new HashMap<>();
        try (KafkaConsumer<String, Long> c = new KafkaConsumer<>(p, new StringDeserializer(), new LongDeserializer())) {
            var parts = c.partitionsFor(OUTPUT).stream()
                .map(i -> new org.apache.kafka.common.TopicPartition(i.topic(), i.partition())).toList();
            c.assign(parts);
            c.seekToBeginning(parts);
            long quietUntil = System.nanoTime() + idle.toNanos();
            while (System.nanoTime() < quietUntil) {
                var records = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, Long> r : records) seen.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(r.value());
                if (!records.isEmpty()) quietUntil = System.nanoTime() + idle.toNanos();
            }
        }
        return seen;
    }

    /** "" when every word's counts never decrease and end at the reference; else the first difference. */
    static String diff(Map<String, List<Long>> seen, Map<String, Long> reference) {
        for (var e : seen.entrySet()) {
            List<Long> counts = e.getValue();
            for (int i = 1; i < counts.size(); i++) {
                if (counts.get(i) < counts.get(i - 1)) return e.getKey() + "'s count went down: " + counts;
            }
            if (!reference.containsKey(e.getKey())) return "a word never produced: " + e.getKey();
        }
        for (var e : reference.entrySet()) {
            List<Long> counts = seen.get(e.getKey());
            long last = counts == null ? 0 : counts.get(counts.size() - 1);
            if (last != e.getValue()) return e.getKey() + " counted " + last + ", reference " + e.getValue();
        }
        return "";
    }

    static Process startWorker(Path work, String stateDir, String log) throws Exception {
        return Apps.childJvm(work, log, "256M", "StreamsApp", "--worker", APP_ID, INPUT, OUTPUT, work.resolve(stateDir).toString(), bootstrap);
    }
}
