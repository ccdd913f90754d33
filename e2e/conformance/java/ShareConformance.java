import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Share groups (KIP-932, "queues for Kafka"): the Java client's scenarios that need
 * KafkaShareConsumer and the share-group admin calls, which older releases lack. The suite
 * compiles this file only against the pinned kafka-clients (build_java: every java/*.java against
 * it, Conformance.java alone against each older release), and Conformance finds it by name, so
 * Conformance.java still compiles against 3.0 and an older client simply has no such scenarios.
 */
public final class ShareConformance {
    private ShareConformance() {}

    static final int PARTITIONS = 3;
    static final int RECORDS = 300;
    /** How many of the first records it sees consumer B releases (once each). */
    static final int RELEASES = 5;

    /** Called by Conformance.main (by reflection) to add the scenarios, in this order. */
    public static void register(Map<String, Conformance.Scenario> all) {
        all.put("share group", ShareConformance::shareGroup);
        all.put("share group admin", ShareConformance::shareGroupAdmin);
    }

    /** The records consumer B rejects when it sees them: two in each partition (i % 3). */
    static boolean toReject(String key) {
        return Integer.parseInt(key.substring(1)) % 50 == 7;
    }

    // ---- scenarios ----

    /**
     * Two share consumers of one group read a 3-partition topic at once, in explicit
     * acknowledgement mode. A accepts everything; B releases the first records it sees (whoever
     * gets them again accepts them) and rejects chosen keys. Every record not rejected must be
     * accepted exactly once in all, no record may be held by both consumers at once, a rejected
     * record never comes back, a record delivered again carries a higher delivery count, and
     * neither commitSync nor the acknowledgement callback may report an error.
     */
    static void shareGroup() throws Exception {
        String topic = Conformance.topic("share group");
        String group = "conf-java-share-" + Conformance.RUN;
        Conformance.createTopic(topic, PARTITIONS);
        Ledger ledger = new Ledger();
        ExecutorService pool = Executors.newFixedThreadPool(2, r -> {
            Thread t = new Thread(r);
            t.setDaemon(true);
            return t;
        });
        try (Admin admin = Conformance.adminClient()) {
            // share.auto.offset.reset is latest by default; the lock duration is the shortest
            // the broker allows (group.share.min.record.lock.duration.ms), so that a record a
            // broker failed to redeliver on release would still come back within the scenario.
            setGroupConfigs(admin, group, Map.of("share.auto.offset.reset", "earliest",
                "share.record.lock.duration.ms", "15000"));
            Future<?> a = pool.submit(() -> ledger.consume("A", group, topic));
            Future<?> b = pool.submit(() -> ledger.consume("B", group, topic));
            // The records are produced once both consumers hold partitions: with one member the
            // first could take every record before the second joined, and B would see none. Both
            // must also have heartbeated since (member epoch = group epoch): until A's next
            // heartbeat it still fetches every partition it was first given, B's among them.
            describedUntil(admin, group, "both consumers assigned, each at the group epoch", d -> {
                Set<TopicPartition> union = new HashSet<>();
                d.members().forEach(m -> union.addAll(m.assignment().topicPartitions()));
                return d.members().size() == 2 && union.equals(partitions(topic))
                    && d.members().stream().noneMatch(m -> m.assignment().topicPartitions().isEmpty())
                    && d.members().stream().allMatch(m -> m.memberEpoch() == d.groupEpoch());
            }, () -> ledger.failure());
            // A ShareFetch a consumer sent before its heartbeat brought this assignment may still
            // wait at a leader (up to fetch.max.wait.ms, 500 ms) for the partitions it had then;
            // records produced meanwhile could all go to A's, and B would see none (the broker
            // does not check assignments, as in Kafka). Each consumer polls past that first: a
            // poll takes 200 ms when nothing comes.
            ledger.pollsPast(5, Conformance.WAIT);
            produce(topic);
            a.get(4 * Conformance.WAIT.toSeconds(), TimeUnit.SECONDS);
            b.get(4 * Conformance.WAIT.toSeconds(), TimeUnit.SECONDS);
            ledger.verify();
        } finally {
            // Each consumer leaves within a poll and closes itself (an interrupt would cut its close short).
            ledger.done.set(true);
            pool.shutdown();
            pool.awaitTermination(Conformance.WAIT.toSeconds(), TimeUnit.SECONDS);
        }
    }

    /**
     * The admin calls of a share group: listGroups by type and describeShareGroups while a
     * consumer is a member; on the empty group listShareGroupOffsets (every partition settled
     * once everything is acknowledged), alterShareGroupOffsets back to 0 (a consumer then gets
     * every record again), and deleteShareGroups.
     */
    static void shareGroupAdmin() throws Exception {
        String topic = Conformance.topic("share group admin");
        String group = "conf-java-share-admin-" + Conformance.RUN;
        Conformance.createTopic(topic, PARTITIONS);
        produce(topic);
        try (Admin admin = Conformance.adminClient()) {
            setGroupConfigs(admin, group, Map.of("share.auto.offset.reset", "earliest"));
            int got = consumeAll(group, topic, () -> {
                describedUntil(admin, group, "the consumer a member with every partition", d ->
                    d.groupState() == GroupState.STABLE && d.members().size() == 1
                        && d.members().iterator().next().assignment().topicPartitions().equals(partitions(topic)), () -> "");
                Optional<GroupListing> listed = shareGroups(admin).stream().filter(g -> g.groupId().equals(group)).findFirst();
                Conformance.check(listed.isPresent(), "listGroups(forShareGroups()) does not list the group");
                Conformance.check(listed.get().type().equals(Optional.of(GroupType.SHARE)), "listGroups: type " + listed.get().type());
            });
            Conformance.check(got == RECORDS, "the share consumer got " + got + " records, expected " + RECORDS);
            // Its consumer closed, the group is empty (a member leaves with its last heartbeat).
            describedUntil(admin, group, "the group empty once its consumer closed",
                d -> d.groupState() == GroupState.EMPTY && d.members().isEmpty(), () -> "");
            // Every record acknowledged, so each share-partition is settled to its end. The lag
            // (DescribeShareGroupOffsets v1, KIP-1226) says so, 0, while the start offset may not
            // have moved: Kafka 4.4 persists a share-partition's start offset as it was before the
            // write (here 0, with deliveryCompleteCount 100) and computes the lag as end offset -
            // start offset - deliveryCompleteCount. The state is written before the
            // acknowledgement is answered; still read until it shows.
            long end = RECORDS / PARTITIONS;
            offsetsUntil(admin, group, topic, "lag 0",
                o -> o.lag().map(lag -> lag == 0).orElse(false));
            Map<TopicPartition, Long> zero = new HashMap<>();
            partitions(topic).forEach(tp -> zero.put(tp, 0L));
            admin.alterShareGroupOffsets(group, zero).all().get();
            offsetsUntil(admin, group, topic, "start offset 0 and lag " + end,
                o -> o.startOffset() == 0 && o.lag().map(lag -> lag == end).orElse(false));
            got = consumeAll(group, topic, () -> {});
            Conformance.check(got == RECORDS, "after alterShareGroupOffsets to 0 the share consumer got " + got + " records, expected " + RECORDS);
            admin.deleteShareGroups(List.of(group)).all().get();
            long deadline = System.nanoTime() + Conformance.WAIT.toNanos();
            while (shareGroups(admin).stream().anyMatch(g -> g.groupId().equals(group))) {
                Conformance.check(System.nanoTime() < deadline, "deleted share group still listed");
                Thread.sleep(100);
            }
        }
    }

    // ---- the two consumers of the `share group` scenario ----

    /** What the consumers of `share group` did, shared between their threads. */
    static final class Ledger {
        final AtomicBoolean done = new AtomicBoolean();
        /** The consumer holding each record now: from its delivery until its acknowledgement. */
        final Map<String, String> inFlight = new ConcurrentHashMap<>();
        final Map<String, Integer> accepted = new ConcurrentHashMap<>();
        final Set<String> rejected = ConcurrentHashMap.newKeySet();
        final Set<String> released = ConcurrentHashMap.newKeySet();
        final Map<String, Short> lastDeliveryCount = new ConcurrentHashMap<>();
        final Map<String, Integer> deliveredTo = new ConcurrentHashMap<>();
        /** The acknowledgements each consumer's AcknowledgementCommitCallback saw completed. */
        final Map<String, Integer> completed = new ConcurrentHashMap<>();
        final ConcurrentLinkedQueue<String> violations = new ConcurrentLinkedQueue<>();
        /** How many polls each consumer has made. */
        final Map<String, Integer> polls = new ConcurrentHashMap<>();

        /** Waits until each consumer has polled `n` times more than now. */
        void pollsPast(int n, Duration wait) throws InterruptedException {
            Map<String, Integer> before = new HashMap<>(polls);
            long deadline = System.nanoTime() + wait.toNanos();
            for (String name : List.of("A", "B")) {
                while (polls.getOrDefault(name, 0) < before.getOrDefault(name, 0) + n) {
                    Conformance.check(System.nanoTime() < deadline, "consumer " + name + " did not poll " + n + " times: " + failure());
                    Thread.sleep(20);
                }
            }
        }

        String failure() {
            String v = violations.peek();
            return v == null ? "" : v;
        }

        /** One consumer's thread: polls, acknowledges every record, commits, until all are settled. */
        void consume(String name, String group, String topic) {
            Properties p = shareProps(group, "explicit");
            try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
                // Called from poll, commitSync and close, in this thread.
                c.setAcknowledgementCommitCallback((offsets, e) -> {
                    if (e != null) violations.add(name + ": the acknowledgement callback reported " + Conformance.describe(e));
                    completed.merge(name, offsets.values().stream().mapToInt(Set::size).sum(), Integer::sum);
                });
                c.subscribe(List.of(topic));
                long deadline = System.nanoTime() + 3 * Conformance.WAIT.toNanos();
                while (!done.get()) {
                    if (System.nanoTime() > deadline) {
                        violations.add("not every record settled in time: " + accepted.size() + " accepted, " + rejected.size()
                            + " rejected of " + RECORDS + " (" + deliveredTo.getOrDefault("A", 0) + " deliveries to A, "
                            + deliveredTo.getOrDefault("B", 0) + " to B)");
                        done.set(true);
                        break;
                    }
                    var records = c.poll(Duration.ofMillis(200));
                    polls.merge(name, 1, Integer::sum);
                    for (ConsumerRecord<String, String> r : records) {
                        c.acknowledge(r, settle(name, r));
                    }
                    if (!records.isEmpty()) {
                        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : c.commitSync().entrySet()) {
                            e.getValue().ifPresent(ex -> violations.add(name + ": commitSync for " + e.getKey() + ": " + Conformance.describe(ex)));
                        }
                    }
                    if (accepted.size() + rejected.size() >= RECORDS) {
                        done.set(true);
                    }
                }
            } catch (RuntimeException e) {
                violations.add(name + ": " + Conformance.describe(e));
                done.set(true);
            }
        }

        /** Checks one delivery and decides its acknowledgement. */
        AcknowledgeType settle(String name, ConsumerRecord<String, String> r) {
            String key = r.key();
            deliveredTo.merge(name, 1, Integer::sum);
            String holder = inFlight.putIfAbsent(key, name);
            if (holder != null) violations.add(key + " delivered to " + name + " while " + holder + " held it");
            if (rejected.contains(key)) violations.add(key + " delivered again to " + name + " after it was rejected");
            if (accepted.containsKey(key)) violations.add(key + " delivered again to " + name + " after it was accepted");
            // The delivery count: 1 at the first delivery, higher at each one after.
            short count = r.deliveryCount().orElse((short) -1);
            Short before = lastDeliveryCount.put(key, count);
            if (count < 1 || (before != null && count <= before)) {
                violations.add(key + " delivered to " + name + " with deliveryCount " + r.deliveryCount()
                    + (before == null ? "" : " after a delivery with " + before));
            }
            AcknowledgeType type = AcknowledgeType.ACCEPT;
            if (name.equals("B") && toReject(key)) {
                type = AcknowledgeType.REJECT;
            } else if (name.equals("B") && released.size() < RELEASES && !released.contains(key)) {
                type = AcknowledgeType.RELEASE;
            }
            switch (type) {
                case REJECT -> rejected.add(key);
                case RELEASE -> released.add(key);
                default -> accepted.merge(key, 1, Integer::sum);
            }
            // No longer held from here on: once B's release reaches the broker, A may get it.
            inFlight.remove(key, name);
            return type;
        }

        void verify() {
            Conformance.check(violations.isEmpty(), violations.size() + " violations, first: " + failure());
            Conformance.check(!released.isEmpty() && !rejected.isEmpty(), "consumer B released " + released.size()
                + " and rejected " + rejected.size() + " records: it got " + deliveredTo.getOrDefault("B", 0) + " deliveries");
            List<String> wrong = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                String key = "k" + i;
                int n = accepted.getOrDefault(key, 0);
                if (rejected.contains(key) ? n != 0 : n != 1) wrong.add(key + " accepted " + n + "x" + (rejected.contains(key) ? " (rejected)" : ""));
            }
            Conformance.check(wrong.isEmpty(), wrong.size() + " records not accepted exactly once: " + String.join(", ", wrong.subList(0, Math.min(5, wrong.size()))));
            // Every acknowledgement (one per delivery) completed, as the callback tells (by close).
            for (String name : List.of("A", "B")) {
                Conformance.check(completed.getOrDefault(name, 0).equals(deliveredTo.getOrDefault(name, 0)), "consumer " + name
                    + "'s acknowledgement callback saw " + completed.getOrDefault(name, 0) + " acknowledgements of "
                    + deliveredTo.getOrDefault(name, 0) + " deliveries");
            }
            for (String key : released) {
                short count = lastDeliveryCount.getOrDefault(key, (short) 0);
                Conformance.check(count >= 2, "released " + key + " was delivered again with deliveryCount " + count);
            }
        }
    }

    // ---- helpers ----

    static Properties shareProps(String group, String ackMode) {
        Properties p = Conformance.common();
        p.remove("request.timeout.ms");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, ackMode);
        return p;
    }

    static Set<TopicPartition> partitions(String topic) {
        Set<TopicPartition> tps = new HashSet<>();
        for (int p = 0; p < PARTITIONS; p++) tps.add(new TopicPartition(topic, p));
        return tps;
    }

    /** RECORDS keyed records k<i> = v<i>, record i in partition i % 3. */
    static void produce(String topic) throws Exception {
        try (KafkaProducer<String, String> producer = Conformance.producer(new Properties())) {
            List<Future<?>> acks = new ArrayList<>();
            for (int i = 0; i < RECORDS; i++) {
                acks.add(producer.send(new ProducerRecord<>(topic, i % PARTITIONS, "k" + i, "v" + i)));
            }
            for (Future<?> f : acks) f.get();
        }
    }

    /** Sets group configs and reads them back until they show (the broker applies them from its metadata). */
    static void setGroupConfigs(Admin admin, String group, Map<String, String> configs) throws Exception {
        ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
        List<AlterConfigOp> ops = new ArrayList<>();
        configs.forEach((k, v) -> ops.add(new AlterConfigOp(new ConfigEntry(k, v), AlterConfigOp.OpType.SET)));
        admin.incrementalAlterConfigs(Map.of(res, ops)).all().get();
        long deadline = System.nanoTime() + Conformance.WAIT.toNanos();
        while (true) {
            var described = admin.describeConfigs(List.of(res)).all().get().get(res);
            Map<String, String> now = new HashMap<>();
            configs.keySet().forEach(k -> now.put(k, described.get(k) == null ? null : described.get(k).value()));
            if (now.equals(configs)) return;
            Conformance.check(System.nanoTime() < deadline, "describeConfigs of the group: " + now + ", expected " + configs);
            Thread.sleep(100);
        }
    }

    interface Check<T> {
        boolean ok(T t) throws Exception;
    }

    interface Failure {
        String get();
    }

    /** Describes the group until `ok` holds, within WAIT (or until `failure` says something went wrong). */
    static void describedUntil(Admin admin, String group, String what, Check<ShareGroupDescription> ok, Failure failure) throws Exception {
        long deadline = System.nanoTime() + Conformance.WAIT.toNanos();
        while (true) {
            String now;
            try {
                ShareGroupDescription d = admin.describeShareGroups(List.of(group)).all().get().get(group);
                if (ok.ok(d)) return;
                now = d.groupState() + ", members " + members(d.members());
            } catch (ExecutionException e) {
                // A share group exists from its first member's heartbeat on; before that Kafka
                // answers GROUP_ID_NOT_FOUND (where a consumer group would be described as Dead).
                if (!(e.getCause() instanceof GroupIdNotFoundException)) throw e;
                now = "no such group yet";
            }
            String failed = failure.get();
            Conformance.check(failed.isEmpty(), failed);
            Conformance.check(System.nanoTime() < deadline, "describeShareGroups, waiting for " + what + ": " + now);
            Thread.sleep(200);
        }
    }

    static String members(Collection<ShareMemberDescription> members) {
        List<String> out = new ArrayList<>();
        for (ShareMemberDescription m : members) out.add(m.clientId() + " " + m.assignment().topicPartitions());
        return out.toString();
    }

    static Collection<GroupListing> shareGroups(Admin admin) throws Exception {
        return admin.listGroups(ListGroupsOptions.forShareGroups()).all().get();
    }

    /** Lists the group's share-partition offsets until every partition's satisfy `ok`, within WAIT. */
    static void offsetsUntil(Admin admin, String group, String topic, String what, Check<SharePartitionOffsetInfo> ok) throws Exception {
        long deadline = System.nanoTime() + Conformance.WAIT.toNanos();
        while (true) {
            var spec = new ListShareGroupOffsetsSpec().topicPartitions(partitions(topic));
            Map<TopicPartition, SharePartitionOffsetInfo> offsets =
                admin.listShareGroupOffsets(Map.of(group, spec)).partitionsToOffsetInfo(group).get();
            boolean all = offsets.keySet().equals(partitions(topic));
            for (SharePartitionOffsetInfo o : offsets.values()) all &= o != null && ok.ok(o);
            if (all) return;
            Conformance.check(System.nanoTime() < deadline, "listShareGroupOffsets: " + offsets + ", expected " + what + " in each partition");
            Thread.sleep(200);
        }
    }

    interface WhileMember {
        void run() throws Exception;
    }

    /**
     * One share consumer in the default (implicit) acknowledgement mode: commitSync accepts what
     * each poll delivered. Polls until RECORDS distinct records came (running `whileMember` once
     * the first arrive) and returns how many distinct ones did.
     */
    static int consumeAll(String group, String topic, WhileMember whileMember) throws Exception {
        Set<String> keys = new HashSet<>();
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(shareProps(group, "implicit"),
                new StringDeserializer(), new StringDeserializer())) {
            c.subscribe(List.of(topic));
            boolean checked = false;
            long deadline = System.nanoTime() + 2 * Conformance.WAIT.toNanos();
            while (keys.size() < RECORDS && System.nanoTime() < deadline) {
                var records = c.poll(Duration.ofMillis(200));
                records.forEach(r -> keys.add(r.key()));
                if (!records.isEmpty()) {
                    for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : c.commitSync().entrySet()) {
                        if (e.getValue().isPresent()) throw new AssertionError("commitSync for " + e.getKey() + ": " + Conformance.describe(e.getValue().get()));
                    }
                }
                if (!keys.isEmpty() && !checked) {
                    whileMember.run();
                    checked = true;
                }
            }
        }
        return keys.size();
    }
}
