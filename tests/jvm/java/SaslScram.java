import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.config.SslConfigs;

/**
 * The Java client over SASL_SSL with a SCRAM mechanism: produces COUNT records, consumes
 * them in a classic group, commits, reads the commit back; then a producer with a wrong
 * password, which must fail with SaslAuthenticationException.
 *
 * <p>Args: BOOTSTRAP MECHANISM USER PASSWORD CA_PEM TOPIC GROUP COUNT. Prints "produced",
 * "consumed", "committed" (offset), "auth_failed" (exception class and message), "done".
 */
public final class SaslScram {
    private SaslScram() {}

    static Properties secure(String bootstrap, String mechanism, String user, String password, String ca) {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_SSL");
        p.put(SaslConfigs.SASL_MECHANISM, mechanism);
        p.put(
                SaslConfigs.SASL_JAAS_CONFIG,
                "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                        + user + "\" password=\"" + password + "\";");
        p.put(SslConfigs.SSL_TRUSTSTORE_TYPE_CONFIG, "PEM");
        p.put(SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG, ca);
        return p;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], mechanism = args[1], user = args[2], password = args[3];
        String ca = args[4], topic = args[5], group = args[6];
        int count = Integer.parseInt(args[7]);
        Properties pp = secure(bootstrap, mechanism, user, password, ca);
        pp.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        pp.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        pp.put("acks", "all");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i)).get();
            }
        }
        Out.emit("produced", "count", count);
        Properties cp = secure(bootstrap, mechanism, user, password, ca);
        cp.put("key.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        cp.put("value.deserializer", "org.apache.kafka.common.serialization.StringDeserializer");
        cp.put("group.id", group);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        List<String> seen = new ArrayList<>();
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    seen.add(r.value());
                }
            }
            Out.emit("consumed", "count", seen.size());
            consumer.commitSync();
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(java.util.Set.of(tp));
            Out.emit("committed", "offset", committed.get(tp).offset());
        }
        Properties bad = secure(bootstrap, mechanism, user, password + "-wrong", ca);
        bad.put("key.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        bad.put("value.serializer", "org.apache.kafka.common.serialization.StringSerializer");
        bad.put("max.block.ms", "20000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(bad)) {
            producer.send(new ProducerRecord<>(topic, "k", "v")).get();
            Out.emit("auth_failed", "class", null, "message", "sent without authentication");
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            Out.emit("auth_failed", "class", cause.getClass().getSimpleName(), "message", cause.getMessage());
        }
        Out.emit("done");
    }
}
