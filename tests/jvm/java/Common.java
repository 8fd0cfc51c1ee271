import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** What the scenarios share: clients' settings, topics, a paced producer, waiting. */
final class Common {
    private Common() {}

    /** A phase did not reach its condition in time: the program prints it and exits 2. */
    static final class PhaseTimeout extends RuntimeException {
        PhaseTimeout(String phase) {
            super(phase);
        }
    }

    static final long PHASE_TIMEOUT_MS = 60_000;

    /**
     * A member's settings. protocol "classic": `assignor` is a partition.assignment.strategy
     * class, with the classic timers the tests use (session 10 s, heartbeat 500 ms);
     * "consumer": `assignor` is the server assignor (group.remote.assignor), and the timers
     * are the broker's (consumer-protocol members cannot set them).
     */
    static Properties consumerProps(
            String bootstrap, String group, String clientId, String protocol, String assignor) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        if (protocol.equals("classic")) {
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignor);
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        } else {
            p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor);
        }
        return p;
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "admin");
        return Admin.create(p);
    }

    static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
    }

    static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "producer");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    /** Sends `perPartition` records to each partition of `topic`, and waits for their acks. */
    static void produce(String bootstrap, String topic, Map<Integer, Integer> perPartition)
            throws Exception {
        try (KafkaProducer<String, String> producer = producer(bootstrap)) {
            for (Map.Entry<Integer, Integer> e : perPartition.entrySet()) {
                for (int i = 0; i < e.getValue(); i++) {
                    producer.send(new ProducerRecord<>(topic, e.getKey(), "k" + i, "v" + i));
                }
            }
            producer.flush();
        }
    }

    /** The latest offset of each partition, by partition number. */
    static Map<Integer, Long> endOffsets(Admin admin, String topic, int partitions)
            throws Exception {
        Map<TopicPartition, OffsetSpec> request = new HashMap<>();
        for (int p = 0; p < partitions; p++) {
            request.put(new TopicPartition(topic, p), OffsetSpec.latest());
        }
        Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> got =
                admin.listOffsets(request).all().get();
        Map<Integer, Long> ends = new TreeMap<>();
        got.forEach((tp, info) -> ends.put(tp.partition(), info.offset()));
        return ends;
    }

    /** A group's committed offsets, by partition number. */
    static Map<Integer, Long> committed(Admin admin, String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> got =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        Map<Integer, Long> offsets = new TreeMap<>();
        got.forEach((tp, om) -> offsets.put(tp.partition(), om == null ? null : om.offset()));
        return offsets;
    }

    static List<Integer> partitions(Set<TopicPartition> tps) {
        List<Integer> ps = new ArrayList<>();
        for (TopicPartition tp : tps) ps.add(tp.partition());
        ps.sort(null);
        return ps;
    }

    /** Polls `cond` every 50 ms; PhaseTimeout after PHASE_TIMEOUT_MS. */
    static void waitFor(String phase, BooleanSupplier cond) {
        long deadline = System.currentTimeMillis() + PHASE_TIMEOUT_MS;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > deadline) {
                throw new PhaseTimeout(phase);
            }
            sleep(50);
        }
        Out.emit("phase", "name", phase);
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RuntimeException(e);
        }
    }

    static Throwable cause(Throwable t) {
        return t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
    }

    /** Runs a scenario's body: a PhaseTimeout or any error is printed, and the exit code is 2. */
    interface Body {
        void run() throws Exception;
    }

    static void main(Body body) {
        int code = 0;
        try {
            body.run();
            Out.emit("done");
        } catch (Throwable t) {
            Throwable c = cause(t);
            Out.emit(c instanceof PhaseTimeout ? "timeout" : "error",
                    "what", c.getClass().getName() + ": " + c.getMessage());
            c.printStackTrace();
            code = 2;
        }
        System.out.flush();
        // Clients left running (after an error) must not keep the JVM alive.
        Runtime.getRuntime().halt(code);
    }
}
