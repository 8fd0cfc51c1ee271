import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;

/**
 * Members consume a topic while one joins and one leaves (scenarios a and d).
 *
 * Usage: Churn BOOTSTRAP TOPIC GROUP PROTOCOL ASSIGNOR
 *   PROTOCOL classic: ASSIGNOR is a partition.assignment.strategy class (eager range or
 *   cooperative-sticky); consumer: ASSIGNOR is group.remote.assignor (uniform or range).
 *
 * c1, c2 and c3 start and converge (each owns 2 of the 6 partitions); c1 leaves (close:
 * revoke, commit, leave) and c2 and c3 converge (3 each); c4 joins and the three converge
 * again. A producer writes throughout, and each step waits for every member to consume before the
 * next. At the end every
 * record is consumed, everything consumed is committed, and the program prints the end
 * offsets and the committed offsets. The test checks the printed lines: nothing consumed
 * twice or lost, every record consumed by the member owning its partition at the time.
 */
public final class Churn {
    static final int PARTITIONS = 6;

    public static void main(String[] args) {
        Common.main(() -> run(args[0], args[1], args[2], args[3], args[4]));
    }

    /** Converged: every partition owned by exactly one of `members`, the same number each
     * (6 partitions: 3 each of 2 members, 2 each of 3; every assignor here balances). */
    static boolean converged(List<Member> members) {
        Set<Integer> all = new HashSet<>();
        for (Member m : members) {
            Set<Integer> owned = Set.copyOf(m.owned);
            if (owned.size() != PARTITIONS / members.size()) return false;
            all.addAll(owned);
        }
        return all.size() == PARTITIONS;
    }

    static void run(String bootstrap, String topic, String group, String protocol,
            String assignor) throws Exception {
        AtomicLong consumed = new AtomicLong();
        try (Admin admin = Common.admin(bootstrap)) {
            Common.createTopic(admin, topic, PARTITIONS);
            Feeder feeder = new Feeder(bootstrap, topic, PARTITIONS).start();
            Member c1 = member(bootstrap, topic, group, protocol, assignor, "c1", consumed);
            Member c2 = member(bootstrap, topic, group, protocol, assignor, "c2", consumed);
            Member c3 = member(bootstrap, topic, group, protocol, assignor, "c3", consumed);
            for (Member m : List.of(c1, c2, c3)) m.start();
            converge("three members", List.of(c1, c2, c3));

            Out.emit("leaving", "m", "c1");
            c1.close();
            converge("c1 left", List.of(c2, c3));

            Member c4 = member(bootstrap, topic, group, protocol, assignor, "c4", consumed);
            Out.emit("joining", "m", "c4");
            c4.start();
            converge("c4 joined", List.of(c2, c3, c4));

            feeder.stop();
            long produced = feeder.sent.get();
            Common.waitFor("all consumed", () -> consumed.get() >= produced);
            Out.emit("teardown");
            for (Member m : List.of(c2, c3, c4)) m.commitNow();
            Out.emit("ends", "offsets", Common.endOffsets(admin, topic, PARTITIONS));
            Out.emit("committed", "offsets", Common.committed(admin, group));
            for (Member m : List.of(c2, c3, c4)) m.close();
        }
    }

    /** Waits for `members` to converge, then for each to consume from its partitions. */
    static void converge(String phase, List<Member> members) {
        Common.waitFor(phase, () -> converged(members));
        Out.emit("converged", "owners", StaticRestart.ownersMap(members.toArray(new Member[0])));
        consumedByEach(members);
    }

    /** Waits until each of `members` has consumed 10 more records. */
    static void consumedByEach(List<Member> members) {
        long[] before = new long[members.size()];
        for (int i = 0; i < before.length; i++) before[i] = members.get(i).mine.get();
        Common.waitFor("consuming", () -> {
            for (int i = 0; i < before.length; i++) {
                if (members.get(i).mine.get() < before[i] + 10) return false;
            }
            return true;
        });
    }

    static Member member(String bootstrap, String topic, String group, String protocol,
            String assignor, String name, AtomicLong consumed) {
        return new Member(name, Common.consumerProps(bootstrap, group, name, protocol, assignor),
                topic, consumed);
    }
}
