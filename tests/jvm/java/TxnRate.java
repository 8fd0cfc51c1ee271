import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * One transactional producer's rate with the Java client (tests/bench/bench_transactions.py
 * --client java): bench_transactions' part (a) with kafka-clients 4.x, which uses
 * transactions V2 where the broker finalizes it (no AddPartitionsToTxn or AddOffsetsToTxn:
 * Produce and TxnOffsetCommit add the partitions; EndTxn v5). Each transaction: 10 records
 * over 2 partitions of `out` (linger.ms 0), flush, sendOffsetsToTransaction for `in`
 * partition 0 with an unjoined consumer's group metadata, commitTransaction (timed alone).
 *
 * Prints "rate" with txn_per_s, commit_p50_ms, commit_p99_ms, transactions and ms per
 * transaction in each phase (produce_ms_per_txn, offsets_ms_per_txn, commit_ms_per_txn).
 *
 * Args: bootstrap out in group transactionalId seconds
 */
public final class TxnRate {
    static final int RECORDS = 10;
    static final int WARMUP = 20;

    public static void main(String[] args) {
        Common.main(() -> run(args[0], args[1], args[2], args[3], args[4],
                Double.parseDouble(args[5])));
    }

    static void run(String bootstrap, String out, String in, String group, String txnId,
            double seconds) throws Exception {
        try (Admin admin = Common.admin(bootstrap)) {
            Common.createTopic(admin, out, 2);
            Common.createTopic(admin, in, 1);
        }
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "txn-rate");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        TopicPartition input = new TopicPartition(in, 0);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p);
                KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            producer.initTransactions();
            ConsumerGroupMetadata metadata = consumer.groupMetadata();
            long[] phases = new long[3];
            List<Long> commits = new ArrayList<>();
            for (int i = 0; i < WARMUP; i++) {
                transaction(producer, out, input, metadata, i, phases, commits);
            }
            phases[0] = phases[1] = phases[2] = 0;
            commits.clear();
            long started = System.nanoTime();
            long until = started + (long) (seconds * 1e9);
            int count = 0;
            while (System.nanoTime() < until) {
                transaction(producer, out, input, metadata, WARMUP + count, phases, commits);
                count++;
            }
            double elapsedS = (System.nanoTime() - started) / 1e9;
            Collections.sort(commits);
            Out.emit("rate", "txn_per_s", count / elapsedS,
                    "commit_p50_ms", commits.get(commits.size() / 2) / 1e6,
                    "commit_p99_ms",
                    commits.get(Math.min(commits.size() - 1, (int) (0.99 * commits.size()))) / 1e6,
                    "transactions", count,
                    "produce_ms_per_txn", phases[0] / 1e6 / count,
                    "offsets_ms_per_txn", phases[1] / 1e6 / count,
                    "commit_ms_per_txn", phases[2] / 1e6 / count);
        }
    }

    static void transaction(KafkaProducer<String, String> producer, String out,
            TopicPartition input, ConsumerGroupMetadata metadata, int i, long[] phases,
            List<Long> commits) {
        long t0 = System.nanoTime();
        producer.beginTransaction();
        for (int r = 0; r < RECORDS; r++) {
            producer.send(new ProducerRecord<>(out, r % 2, null, i + "-" + r));
        }
        producer.flush();
        long t1 = System.nanoTime();
        producer.sendOffsetsToTransaction(
                Map.of(input, new OffsetAndMetadata(i + 1)), metadata);
        long t2 = System.nanoTime();
        producer.commitTransaction();
        long t3 = System.nanoTime();
        phases[0] += t1 - t0;
        phases[1] += t2 - t1;
        phases[2] += t3 - t2;
        commits.add(t3 - t2);
    }
}
