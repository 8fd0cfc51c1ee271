import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Consume-transform-produce with transactions: a group member reads `in`, writes each value
 * upper-cased to the same partition of `out` and sends its offsets to the transaction
 * (sendOffsetsToTransaction with the consumer's group metadata). The first transaction is
 * aborted and its input read again from the group's committed offsets.
 *
 * Prints "ends" (in's end offsets), "committed" (the group's offsets at the end), "aborted"
 * (records in the aborted transaction), and the values of `out` read with read_committed
 * ("out_committed") and read_uncommitted ("out_uncommitted").
 *
 * Args: bootstrap in out group protocol transactionalId
 */
public final class TxnLoop {
    static final int PARTITIONS = 3;
    static final int PER_PARTITION = 40;

    public static void main(String[] args) {
        Common.main(() -> run(args[0], args[1], args[2], args[3], args[4], args[5]));
    }

    static void run(String bootstrap, String in, String out, String group, String protocol,
            String txnId) throws Exception {
        Map<Integer, Long> ends;
        try (Admin admin = Common.admin(bootstrap)) {
            Common.createTopic(admin, in, PARTITIONS);
            Common.createTopic(admin, out, PARTITIONS);
            Map<Integer, Integer> counts = new HashMap<>();
            for (int p = 0; p < PARTITIONS; p++) counts.put(p, PER_PARTITION);
            Common.produce(bootstrap, in, counts);
            ends = Common.endOffsets(admin, in, PARTITIONS);
            Out.emit("ends", "offsets", ends);

            Properties cp = Common.consumerProps(bootstrap, group, "member", protocol,
                    protocol.equals("classic")
                            ? "org.apache.kafka.clients.consumer.RangeAssignor" : "uniform");
            cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
            cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "25");
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp);
                    KafkaProducer<String, String> producer = txnProducer(bootstrap, txnId)) {
                producer.initTransactions();
                consumer.subscribe(List.of(in));
                boolean abortedOnce = false;
                int ended = 0;  // transactions committed or aborted
                long total = ends.values().stream().mapToLong(Long::longValue).sum();
                long deadline = System.currentTimeMillis() + Common.PHASE_TIMEOUT_MS;
                while (sum(Common.committed(admin, group)) < total) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new Common.PhaseTimeout("input consumed");
                    }
                    ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                    if (records.isEmpty()) continue;
                    producer.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(out, r.partition(), r.key(),
                                r.value().toUpperCase()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    if (!abortedOnce) {
                        abortedOnce = true;
                        // Send the batches first: abortTransaction() drops what the Sender has
                        // not sent yet, and the scenario needs aborted records in the log.
                        producer.flush();
                        producer.abortTransaction();
                        ended++;
                        Out.emit("aborted", "count", records.count());
                        // Read the aborted input again from the group's committed offsets.
                        Map<TopicPartition, OffsetAndMetadata> committed =
                                consumer.committed(consumer.assignment());
                        for (TopicPartition tp : consumer.assignment()) {
                            OffsetAndMetadata om = committed.get(tp);
                            if (om != null) consumer.seek(tp, om.offset());
                            else consumer.seekToBeginning(List.of(tp));
                        }
                        continue;
                    }
                    producer.commitTransaction();
                    ended++;
                }
                Out.emit("transactions", "count", ended);
                Out.emit("phase", "name", "input consumed");
            }
            Out.emit("committed", "offsets", Common.committed(admin, group));
            Map<Integer, Long> outEnds = Common.endOffsets(admin, out, PARTITIONS);
            Out.emit("out_committed", "values", readAll(bootstrap, out, "read_committed", outEnds));
            Out.emit("out_uncommitted", "values",
                    readAll(bootstrap, out, "read_uncommitted", outEnds));
        }
    }

    static long sum(Map<Integer, Long> offsets) {
        long s = 0;
        for (Long o : offsets.values()) s += o == null ? 0 : o;
        return s;
    }

    static KafkaProducer<String, String> txnProducer(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "txn-producer");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    /** Every value of `topic` at `isolation`, read from the start of each partition until
     * the consumer's position reaches the partition's end offset (no transaction is open). */
    static List<String> readAll(String bootstrap, String topic, String isolation,
            Map<Integer, Long> ends) {
        Properties cp = Common.consumerProps(bootstrap, "reader-" + isolation, "reader",
                "classic", "org.apache.kafka.clients.consumer.RangeAssignor");
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < PARTITIONS; p++) tps.add(new TopicPartition(topic, p));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<Integer, Long> positions = new TreeMap<>();
            Common.waitFor("read " + topic + " " + isolation, () -> {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100))) {
                    values.add(r.value());
                }
                for (TopicPartition tp : tps) positions.put(tp.partition(), consumer.position(tp));
                for (int p = 0; p < PARTITIONS; p++) {
                    if (positions.get(p) < ends.get(p)) return false;
                }
                return true;
            });
        }
        return values;
    }
}
