import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DeleteRecordsResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * AdminClient.deleteRecords (KIP-107; what kafka-delete-records.sh calls).
 *
 * Usage: DeleteRecordsOps BOOTSTRAP PREFIX
 *
 * Topic PREFIX-t of 2 partitions, 10 records each: deletes partition 0 before offset 4 and
 * partition 1 up to its high watermark (RecordsToDelete.beforeOffset(-1)), then asks again
 * below the log start (unchanged) and past the high watermark (refused), printing the low
 * watermarks and errors (an error as the exception's simple class name), the earliest
 * offsets ListOffsets answers after, and the first offset a new group's consumer with
 * auto.offset.reset=earliest reads from partition 0.
 */
public final class DeleteRecordsOps {
    public static void main(String[] args) {
        Common.main(() -> run(args[0], args[1]));
    }

    static void run(String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-t";
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (Admin admin = Common.admin(bootstrap)) {
            Common.createTopic(admin, topic, 2);
            Common.produce(bootstrap, topic, Map.of(0, 10, 1, 10));
            delete(admin, "first", Map.of(
                    p0, RecordsToDelete.beforeOffset(4), p1, RecordsToDelete.beforeOffset(-1)));
            delete(admin, "backwards", Map.of(p0, RecordsToDelete.beforeOffset(2)));
            delete(admin, "past the end", Map.of(p0, RecordsToDelete.beforeOffset(11)));
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> earliest = admin
                    .listOffsets(Map.of(p0, OffsetSpec.earliest(), p1, OffsetSpec.earliest()))
                    .all().get();
            Map<Integer, Long> starts = new TreeMap<>();
            earliest.forEach((tp, info) -> starts.put(tp.partition(), info.offset()));
            Out.emit("earliest", "offsets", starts);
        }
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(Common.consumerProps(
                bootstrap, prefix + "-g", "reader", "classic",
                "org.apache.kafka.clients.consumer.RangeAssignor"))) {
            consumer.assign(List.of(p0));
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> record : records) {
                    Out.emit("first", "offset", record.offset(), "value", record.value());
                    return;
                }
            }
            Out.emit("first", "offset", -1);
        }
    }

    static void delete(Admin admin, String name, Map<TopicPartition, RecordsToDelete> what)
            throws InterruptedException {
        DeleteRecordsResult result = admin.deleteRecords(what);
        Map<Integer, Object> perPartition = new TreeMap<>();
        result.lowWatermarks().forEach((tp, future) -> {
            try {
                perPartition.put(tp.partition(), future.get().lowWatermark());
            } catch (ExecutionException e) {
                perPartition.put(tp.partition(), Common.cause(e).getClass().getSimpleName());
            } catch (InterruptedException e) {
                throw new RuntimeException(e);
            }
        });
        Out.emit("delete", "name", name, "result", perPartition);
    }
}
