import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * End-to-end latency (produce -> consume) at a fixed rate, for bench_compare.py.
 *
 * One producer (default settings: acks=all, idempotent, linger.ms 5) sends SIZE-byte records at
 * RATE per second to partition 0 of TOPIC for SECONDS; each record carries its send time
 * (System.nanoTime). A consumer in the same process (default settings, assign, no group) reads
 * the partition from its end and records now - send time for each record. Kafka's own
 * EndToEndLatency tool sends one record at a time and waits for it, which measures an idle
 * broker; this one measures a loaded one. The first second is warm-up and not counted.
 *
 * Prints: E2E <tab> count <tab> rate <tab> p50_ms <tab> p99_ms <tab> p999_ms <tab> max_ms
 *
 * Usage: java E2ELatency BOOTSTRAP TOPIC RATE SIZE SECONDS
 */
public final class E2ELatency {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int rate = Integer.parseInt(args[2]);
        int size = Integer.parseInt(args[3]);
        int seconds = Integer.parseInt(args[4]);
        TopicPartition tp = new TopicPartition(topic, 0);

        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        consumer.assign(List.of(tp));
        consumer.seekToEnd(List.of(tp));
        consumer.position(tp); // resolve the end offset before producing

        long warmupNanos = 1_000_000_000L;
        long total = (long) rate * seconds;
        long[] latencies = new long[(int) Math.min(total, 50_000_000L)];
        int[] n = {0};
        AtomicBoolean done = new AtomicBoolean();
        long start = System.nanoTime();
        Thread reader = new Thread(() -> {
            long seen = 0;
            while (!done.get() || seen < total) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    long now = System.nanoTime();
                    long sent = ByteBuffer.wrap(r.value()).getLong();
                    seen++;
                    if (sent - start >= warmupNanos && n[0] < latencies.length) latencies[n[0]++] = now - sent;
                }
                if (done.get() && System.nanoTime() - start > (seconds + 30) * 1_000_000_000L) break;
            }
        });
        reader.start();

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            long interval = 1_000_000_000L / rate;
            for (long i = 0; i < total; i++) {
                long due = start + i * interval;
                long wait;
                while ((wait = due - System.nanoTime()) > 0) {
                    if (wait > 200_000) java.util.concurrent.locks.LockSupport.parkNanos(wait - 100_000); else Thread.onSpinWait();
                }
                byte[] value = new byte[size];
                ByteBuffer.wrap(value).putLong(System.nanoTime());
                producer.send(new ProducerRecord<>(topic, 0, null, value));
            }
            producer.flush();
        }
        double achieved = total / ((System.nanoTime() - start) / 1e9);
        done.set(true);
        reader.join();
        consumer.close();
        long[] l = Arrays.copyOf(latencies, n[0]);
        Arrays.sort(l);
        System.out.printf("E2E\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f%n", l.length, achieved,
                pct(l, 0.50), pct(l, 0.99), pct(l, 0.999), l.length == 0 ? Double.NaN : l[l.length - 1] / 1e6);
    }

    static double pct(long[] sorted, double p) {
        if (sorted.length == 0) return Double.NaN;
        return sorted[(int) Math.min(sorted.length - 1, Math.floor(p * sorted.length))] / 1e6;
    }
}
