import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;

/**
 * Kafka Connect (connect-runtime of the pinned Kafka release) as an application of the conformance
 * suite: a distributed worker in a child JVM with its default settings (only addresses, names and
 * a replication factor of -1, the broker's default, so that one broker serves it), a FileStream
 * source connector copying a file into a topic and a FileStream sink connector copying the topic
 * into another file, all through the worker's REST API. The worker is stopped (SIGTERM) and
 * started again: the connectors come back from the config topic without being created again, the
 * source resumes from the offset topic (the topic holds every line once) and the sink file ends
 * as a copy of the source file. Connect itself refuses to start unless its three internal topics
 * are compacted; the suite checks that too.
 *
 * Usage: java -cp kafka-libs/*:. ConnectApp BOOTSTRAP
 */
public final class ConnectApp {
    static final Duration WAIT = Duration.ofSeconds(90);
    static final String RUN = UUID.randomUUID().toString().substring(0, 8);
    static final String GROUP = "conf-connect-" + RUN;
    static final String TOPIC = "conf-connect-lines-" + RUN;
    static final List<String> INTERNAL = List.of(GROUP + "-configs", GROUP + "-offsets", GROUP + "-status");
    static final int LINES = 100;

    static String bootstrap;
    static {
        // The pool keeps REST connections open for 20 minutes by default. A worker stopping on
        // SIGTERM was seen waiting in Jetty's shutdown (RestServer.stop → Server.join) against
        // Apache Kafka as well; idle keep-alive connections are the suspect, so they close after
        // a second here and the worker is stopped only once they have.
        System.setProperty("jdk.httpclient.keepalive.timeout", "1");
    }
    static final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    public static void main(String[] args) throws Exception {
        bootstrap = args[args.length - 1];
        System.out.println("VERSION\t" + Conformance.clientVersion());
        Path work = Files.createTempDirectory("conf-connect");
        Path source = work.resolve("source.txt");
        Path sink = work.resolve("sink.txt");
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        Path props = work.resolve("worker.properties");
        Files.writeString(props, String.join("\n",
            "bootstrap.servers=" + bootstrap,
            "group.id=" + GROUP,
            "config.storage.topic=" + INTERNAL.get(0),
            "offset.storage.topic=" + INTERNAL.get(1),
            "status.storage.topic=" + INTERNAL.get(2),
            "config.storage.replication.factor=-1",
            "offset.storage.replication.factor=-1",
            "status.storage.replication.factor=-1",
            "key.converter=org.apache.kafka.connect.storage.StringConverter",
            "value.converter=org.apache.kafka.connect.storage.StringConverter",
            "listeners=http://127.0.0.1:" + port,
            "offset.flush.interval.ms=1000",
            ""));
        String rest = "http://127.0.0.1:" + port;
        Files.writeString(source, lines(0, LINES));

        Process worker = null;
        String scenario = "distributed worker starts, internal topics compacted";
        try {
            worker = start(work, props, "worker-1.log");
            Apps.waitFor(WAIT, "the REST API", worker, () -> get(rest + "/connectors") == null ? "no answer" : "");
            compacted();
            Apps.result(scenario, "");

            scenario = "source and sink connectors RUNNING";
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
                // One partition: the sink file then keeps the source file's order.
                admin.createTopics(List.of(new NewTopic(TOPIC, 1, (short) -1))).all().get(30, TimeUnit.SECONDS);
            }
            create(rest, "source", "org.apache.kafka.connect.file.FileStreamSourceConnector",
                "\"file\": \"" + source + "\", \"topic\": \"" + TOPIC + "\"");
            create(rest, "sink", "org.apache.kafka.connect.file.FileStreamSinkConnector",
                "\"file\": \"" + sink + "\", \"topics\": \"" + TOPIC + "\"");
            Apps.waitFor(WAIT, "the sink file to copy the source file", worker, () -> sameLines(source, sink));
            for (String name : List.of("source", "sink")) {
                Apps.waitFor(WAIT, name + " RUNNING", worker, () -> running(rest, name));
            }
            Apps.result(scenario, "");

            scenario = "worker restarted: configs and offsets kept";
            Thread.sleep(2000); // the REST client's idle connections close (see the pool above)
            worker.destroy(); // SIGTERM: a clean stop, which commits the source's offsets
            if (!worker.waitFor(60, TimeUnit.SECONDS)) {
                // What the worker waits for is the diagnosis: its threads, beside its log.
                Path dump = work.resolve("worker-1-threads.txt");
                Process jcmd = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "jcmd").toString(),
                    String.valueOf(worker.pid()), "Thread.print").redirectErrorStream(true).redirectOutput(dump.toFile()).start();
                jcmd.waitFor(30, TimeUnit.SECONDS);
                Conformance.check(false, "the worker did not stop on SIGTERM (its threads: " + dump + ")");
            }
            Files.writeString(source, lines(LINES, 2 * LINES), StandardOpenOption.APPEND);
            worker = start(work, props, "worker-2.log");
            final Process second = worker;
            Apps.waitFor(WAIT, "the REST API after the restart", second, () -> get(rest + "/connectors") == null ? "no answer" : "");
            // Not created again: the connectors must come back from the config topic.
            for (String name : List.of("source", "sink")) {
                Apps.waitFor(WAIT, name + " RUNNING after the restart", second, () -> running(rest, name));
            }
            Apps.waitFor(WAIT, "the sink file to copy the grown source file", second, () -> sameLines(source, sink));
            long records = endOffset();
            Conformance.check(records == 2 * LINES, TOPIC + " holds " + records + " records, not " + (2 * LINES)
                + " (the source did not resume from its stored offset)");
            Apps.result(scenario, "");
        } catch (Throwable t) {
            Apps.result(scenario, Conformance.describe(t) + " (worker log: " + work + ")");
        } finally {
            if (worker != null) {
                worker.destroy();
                if (!worker.waitFor(30, TimeUnit.SECONDS)) worker.destroyForcibly();
            }
        }
        System.exit(0);
    }

    static String lines(int from, int to) {
        return IntStream.range(from, to).mapToObj(i -> "line " + i + "\n").collect(Collectors.joining());
    }

    static Process start(Path work, Path props, String log) throws Exception {
        return Apps.childJvm(work, log, "384M", "org.apache.kafka.connect.cli.ConnectDistributed", props.toString());
    }

    /** Connect's internal topics must be compacted (the worker checks this itself at start). */
    static void compacted() throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            List<ConfigResource> rs = INTERNAL.stream().map(t -> new ConfigResource(ConfigResource.Type.TOPIC, t)).toList();
            var configs = admin.describeConfigs(rs).all().get(30, TimeUnit.SECONDS);
            for (ConfigResource r : rs) {
                String policy = configs.get(r).get("cleanup.policy").value();
                Conformance.check(policy.equals("compact"), r.name() + " has cleanup.policy=" + policy);
            }
        }
    }

    static long endOffset() throws Exception {
        TopicPartition tp = new TopicPartition(TOPIC, 0);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            return admin.listOffsets(Map.of(tp, OffsetSpec.latest())).all().get(30, TimeUnit.SECONDS).get(tp).offset();
        }
    }

    static void create(String rest, String name, String connectorClass, String settings) throws Exception {
        String body = "{\"name\": \"" + name + "\", \"config\": {\"connector.class\": \"" + connectorClass
            + "\", \"tasks.max\": \"1\", " + settings + "}}";
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(rest + "/connectors"))
            .header("Content-Type", "application/json").timeout(Duration.ofSeconds(60))
            .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
        Conformance.check(r.statusCode() == 201, "creating " + name + ": HTTP " + r.statusCode() + " " + r.body());
    }

    /** "" when the connector and its task are RUNNING, else their status. */
    static String running(String rest, String name) {
        String status = get(rest + "/connectors/" + name + "/status");
        if (status == null) return "no status";
        String compact = status.replaceAll("\\s", "");
        boolean connector = compact.matches(".*\"connector\":\\{\"state\":\"RUNNING\".*");
        boolean task = compact.matches(".*\"tasks\":\\[\\{\"id\":0,\"state\":\"RUNNING\".*");
        return connector && task ? "" : status;
    }

    /** The body of a 200 answer, else null. */
    static String get(String url) {
        try {
            HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(5)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
            return r.statusCode() == 200 ? r.body() : null;
        } catch (Exception e) {
            return null;
        }
    }

    static String sameLines(Path source, Path sink) throws Exception {
        List<String> want = Files.readAllLines(source);
        List<String> got = Files.exists(sink) ? Files.readAllLines(sink) : List.of();
        return got.equals(want) ? "" : "sink has " + got.size() + " of " + want.size() + " lines"
            + (got.size() <= want.size() && want.subList(0, got.size()).equals(got) ? "" : ", not in the source's order");
    }
}
