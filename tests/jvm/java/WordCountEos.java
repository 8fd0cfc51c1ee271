import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams word count with processing.guarantee=exactly_once_v2: lines of `in` split into
 * words, re-keyed by word (a repartition topic), counted (a changelog topic), counts written
 * to `out`. The program feeds `in` itself at a steady pace (an idempotent producer that
 * retries through broker restarts) while the test SIGKILLs and restarts the broker; then it
 * reads `out` with read_committed until the latest count of every word equals the number of
 * times it was fed.
 *
 * Prints "fed" (per-word counts fed), "counts" (the latest count per word read from out),
 * and "state" lines for the Streams client's state changes.
 *
 * Args: bootstrap in out applicationId lines
 */
public final class WordCountEos {
    static final String[] WORDS = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"};

    public static void main(String[] args) {
        Common.main(() -> run(args[0], args[1], args[2], args[3], Integer.parseInt(args[4])));
    }

    static void run(String bootstrap, String in, String out, String appId, int lines)
            throws Exception {
        try (Admin admin = Common.admin(bootstrap)) {
            Common.createTopic(admin, in, 2);
            Common.createTopic(admin, out, 2);
        }
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(in, Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.split(" ")))
                .groupBy((key, word) -> word)
                .count()
                .toStream()
                .to(out, Produced.with(Serdes.String(), Serdes.Long()));
        Properties sp = new Properties();
        sp.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        sp.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        sp.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        sp.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        sp.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        sp.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        sp.put(StreamsConfig.STATE_DIR_CONFIG,
                Files.createTempDirectory("wordcount-state").toString());
        sp.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        sp.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.String().getClass());
        sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 10_000);
        sp.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);
        KafkaStreams streams = new KafkaStreams(builder.build(), sp);
        streams.setStateListener((now, before) ->
                Out.emit("state", "now", now.toString(), "before", before.toString()));
        streams.setUncaughtExceptionHandler(e -> {
            Out.emit("stream_error", "what", e.getClass().getName() + ": " + e.getMessage());
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                    .StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        streams.start();
        Common.waitFor("running", () -> streams.state() == KafkaStreams.State.RUNNING);

        Map<String, Long> fed = new TreeMap<>();
        try (KafkaProducer<String, String> producer = feeder(bootstrap)) {
            for (int i = 0; i < lines; i++) {
                List<String> words = new ArrayList<>();
                for (int w = 0; w < 3; w++) words.add(WORDS[(i * 3 + w * 5) % WORDS.length]);
                for (String word : words) fed.merge(word, 1L, Long::sum);
                producer.send(new ProducerRecord<>(in, "line-" + i, String.join(" ", words)));
                if (i % 10 == 9) Common.sleep(50);  // about 200 lines a second
            }
            producer.flush();
        }
        Out.emit("fed", "counts", fed);
        Out.emit("phase", "name", "fed");

        Map<String, Long> latest = new TreeMap<>();
        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, LongDeserializer.class.getName());
        try (KafkaConsumer<String, Long> reader = new KafkaConsumer<>(cp)) {
            List<TopicPartition> tps = List.of(new TopicPartition(out, 0), new TopicPartition(out, 1));
            reader.assign(tps);
            reader.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 120_000;
            while (!latest.equals(fed) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, Long> r : reader.poll(Duration.ofMillis(200))) {
                    latest.put(r.key(), r.value());
                }
            }
        }
        Out.emit("counts", "counts", latest);
        streams.close(Duration.ofSeconds(20));
    }

    static KafkaProducer<String, String> feeder(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "feeder");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }
}
