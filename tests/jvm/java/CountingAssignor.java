import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Configurable;

/**
 * A classic-protocol assignor that delegates to RangeAssignor or CooperativeStickyAssignor
 * (the consumer setting `counting.delegate`: "range" or "cooperative-sticky") and prints
 * every assign() call: {"e":"assignor_run","m":client.id,"n":calls so far in this JVM}.
 * Only a group's leader runs its assignor, so the lines say when a leader computed an
 * assignment (KIP-814: a static leader that restarts into a Stable group does not).
 */
public final class CountingAssignor implements ConsumerPartitionAssignor, Configurable {
    static final AtomicInteger CALLS = new AtomicInteger();
    static volatile String lastCaller;
    private ConsumerPartitionAssignor delegate = new RangeAssignor();
    private String clientId = "?";

    @Override
    public void configure(Map<String, ?> configs) {
        Object id = configs.get("client.id");
        if (id != null) clientId = id.toString();
        Object which = configs.get("counting.delegate");
        if ("cooperative-sticky".equals(which)) {
            delegate = new CooperativeStickyAssignor();
        }
        if (delegate instanceof Configurable) {
            ((Configurable) delegate).configure(configs);
        }
    }

    @Override
    public GroupAssignment assign(Cluster metadata, GroupSubscription groupSubscription) {
        lastCaller = clientId;
        Out.emit("assignor_run", "m", clientId, "n", CALLS.incrementAndGet(),
                "members", groupSubscription.groupSubscription().size());
        return delegate.assign(metadata, groupSubscription);
    }

    @Override
    public ByteBuffer subscriptionUserData(Set<String> topics) {
        return delegate.subscriptionUserData(topics);
    }

    @Override
    public void onAssignment(Assignment assignment, ConsumerGroupMetadata metadata) {
        delegate.onAssignment(assignment, metadata);
    }

    @Override
    public List<RebalanceProtocol> supportedProtocols() {
        return delegate.supportedProtocols();
    }

    @Override
    public short version() {
        return delegate.version();
    }

    @Override
    public String name() {
        return delegate.name();
    }
}
