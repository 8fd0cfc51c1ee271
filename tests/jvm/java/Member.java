import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * One group member: a KafkaConsumer in its own thread, subscribed to one topic, printing
 * every listener call ("assign", "revoke", "lost": the partitions and the generation or
 * member epoch) and every record it consumes ("rec": partition and offset).
 *
 * It commits only what it has consumed, with commitSync: in onPartitionsRevoked for the
 * partitions it gives up (so the next owner starts after them), when asked (commitNow), and
 * before close. A commit that fails is printed ("commit_failed"): the test fails on it.
 */
final class Member implements Runnable, ConsumerRebalanceListener {
    final String name;
    private final Properties props;
    private final String topic;
    private final Thread thread;
    private volatile boolean stop;
    private volatile boolean commitRequested;
    private volatile boolean committed;
    private KafkaConsumer<String, String> consumer;
    /** The next offset to commit of each partition consumed from (the poll thread's only). */
    private final Map<TopicPartition, OffsetAndMetadata> consumed = new HashMap<>();
    final Set<Integer> owned = ConcurrentHashMap.newKeySet();
    final AtomicLong records;
    /** The records this member consumed. */
    final AtomicLong mine = new AtomicLong();
    volatile int generation = -1;
    volatile Throwable failure;
    volatile boolean closed;

    Member(String name, Properties props, String topic, AtomicLong records) {
        this.name = name;
        this.props = props;
        this.topic = topic;
        this.records = records;
        this.thread = new Thread(this, name);
    }

    Member start() {
        thread.start();
        return this;
    }

    @Override
    public void run() {
        try {
            consumer = new KafkaConsumer<>(props);
            consumer.subscribe(java.util.List.of(topic), this);
            while (!stop) {
                ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<String, String> r : batch) {
                    Out.emit("rec", "m", name, "p", r.partition(), "o", r.offset());
                    consumed.put(new TopicPartition(r.topic(), r.partition()),
                            new OffsetAndMetadata(r.offset() + 1));
                    records.incrementAndGet();
                    mine.incrementAndGet();
                }
                if (commitRequested) {
                    commit(new ArrayList<>(consumed.keySet()), "request");
                    commitRequested = false;
                    committed = true;
                }
            }
            commit(new ArrayList<>(consumed.keySet()), "close");
            generation = consumer.groupMetadata().generationId();
            Out.emit("final", "m", name, "gen", generation, "owned", sorted(owned));
            consumer.close();
            Out.emit("closed", "m", name);
        } catch (Throwable t) {
            failure = t;
            Out.emit("member_error", "m", name, "what", t.toString());
            t.printStackTrace();
        } finally {
            closed = true;
        }
    }

    /** Commits (synchronously) what was consumed of `partitions`. */
    private void commit(Collection<TopicPartition> partitions, String why) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : partitions) {
            OffsetAndMetadata next = consumed.get(tp);
            if (next != null) offsets.put(tp, next);
        }
        if (offsets.isEmpty()) return;
        try {
            consumer.commitSync(offsets);
            Map<Integer, Long> printed = new java.util.TreeMap<>();
            offsets.forEach((tp, om) -> printed.put(tp.partition(), om.offset()));
            Out.emit("commit", "m", name, "why", why, "offsets", printed);
        } catch (RuntimeException e) {
            Out.emit("commit_failed", "m", name, "why", why, "what", e.toString());
        }
    }

    @Override
    public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
        commit(partitions, "revoke");
        for (TopicPartition tp : partitions) {
            owned.remove(tp.partition());
            consumed.remove(tp);
        }
        Out.emit("revoke", "m", name, "ps", Common.partitions(Set.copyOf(partitions)),
                "gen", consumer.groupMetadata().generationId());
    }

    @Override
    public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
        generation = consumer.groupMetadata().generationId();
        Out.emit("assign", "m", name, "ps", Common.partitions(Set.copyOf(partitions)),
                "gen", generation);
        for (TopicPartition tp : partitions) owned.add(tp.partition());
    }

    @Override
    public void onPartitionsLost(Collection<TopicPartition> partitions) {
        for (TopicPartition tp : partitions) {
            owned.remove(tp.partition());
            consumed.remove(tp);
        }
        Out.emit("lost", "m", name, "ps", Common.partitions(Set.copyOf(partitions)),
                "gen", consumer.groupMetadata().generationId());
    }

    /** Asks the poll thread for a commitSync of everything consumed; waits for it. */
    void commitNow() {
        committed = false;
        commitRequested = true;
        Common.waitFor(name + " committed", () -> committed || closed);
    }

    /** Commits what was consumed, closes the consumer, and waits for the thread to end. */
    void close() throws InterruptedException {
        stop = true;
        thread.join(Common.PHASE_TIMEOUT_MS);
        if (thread.isAlive()) throw new Common.PhaseTimeout(name + " close");
    }

    private static java.util.List<Integer> sorted(Set<Integer> ps) {
        java.util.List<Integer> list = new ArrayList<>(ps);
        list.sort(null);
        return list;
    }
}
