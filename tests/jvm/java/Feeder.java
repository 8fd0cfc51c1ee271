import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

/** Produces to every partition of a topic in turn, a few records every 20 ms, until stopped:
 * the records the members consume while the group changes. */
final class Feeder implements Runnable {
    private final String bootstrap;
    private final String topic;
    private final int partitions;
    private final Thread thread;
    private volatile boolean stop;
    final AtomicLong sent = new AtomicLong();
    volatile Throwable failure;

    Feeder(String bootstrap, String topic, int partitions) {
        this.bootstrap = bootstrap;
        this.topic = topic;
        this.partitions = partitions;
        this.thread = new Thread(this, "feeder");
    }

    Feeder start() {
        thread.start();
        return this;
    }

    @Override
    public void run() {
        try (KafkaProducer<String, String> producer = Common.producer(bootstrap)) {
            long i = 0;
            while (!stop) {
                for (int p = 0; p < partitions; p++, i++) {
                    producer.send(new ProducerRecord<>(topic, p, "k" + i, "v" + i), (md, e) -> {
                        if (e != null) failure = e;
                    });
                }
                sent.addAndGet(partitions);
                Common.sleep(20);
            }
            producer.flush();
        } catch (Throwable t) {
            failure = t;
        }
    }

    /** Stops producing; returns once every record sent is acknowledged. */
    void stop() throws Exception {
        stop = true;
        thread.join(Common.PHASE_TIMEOUT_MS);
        if (thread.isAlive()) throw new Common.PhaseTimeout("feeder stop");
        if (failure != null) throw new RuntimeException("produce failed", failure);
        Out.emit("produced", "n", sent.get());
    }
}
