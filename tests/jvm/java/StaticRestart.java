import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;

/**
 * Static members restart within session.timeout.ms (scenarios b and c).
 *
 * Usage: StaticRestart BOOTSTRAP TOPIC GROUP ASSIGNOR MODE
 *   ASSIGNOR: range or cooperative-sticky (run through CountingAssignor)
 *   MODE rolling: each of s1, s2, s3 is closed and started again in turn;
 *   MODE leader: the member whose assignor ran last (the leader) is, twice.
 *
 * A closed static member does not leave (KafkaConsumer.close keeps a static member), and
 * its new incarnation rejoins with the same group.instance.id: the group must not
 * rebalance. The program prints "stable" (the generation, the leader, each member's
 * partitions) once the group has settled, "restart"/"restarted" around each restart, and
 * the test checks that after "stable" nobody's listener saw a revoke and only the restarted
 * member an assign (of the partitions it had), that no assignor ran again (KIP-814 for the
 * leader), that every member ends in the same generation, and that every record was
 * consumed once.
 */
public final class StaticRestart {
    static final int PARTITIONS = 6;
    static final String[] NAMES = {"s1", "s2", "s3"};

    public static void main(String[] args) {
        Common.main(() -> run(args[0], args[1], args[2], args[3], args[4]));
    }

    static void run(String bootstrap, String topic, String group, String assignor, String mode)
            throws Exception {
        AtomicLong consumed = new AtomicLong();
        try (Admin admin = Common.admin(bootstrap)) {
            Common.createTopic(admin, topic, PARTITIONS);
            Feeder feeder = new Feeder(bootstrap, topic, PARTITIONS).start();
            Member[] members = new Member[NAMES.length];
            for (int i = 0; i < NAMES.length; i++) {
                members[i] = member(bootstrap, topic, group, assignor, NAMES[i], consumed).start();
            }
            Common.waitFor("formed", () -> Churn.converged(List.of(members)));
            // Settled: the same partitions and no listener call for a while (a cooperative
            // group may need a second rebalance to hand over what the first revoked).
            String before = owners(members);
            Common.sleep(2_000);
            if (!owners(members).equals(before) || !Churn.converged(List.of(members))) {
                Common.waitFor("settled", () -> false);
            }
            Map<String, List<Integer>> stable = ownersMap(members);
            Out.emit("stable", "gen", members[0].generation, "leader",
                    CountingAssignor.lastCaller, "owners", stable);

            List<Integer> order = new ArrayList<>();
            if (mode.equals("rolling")) {
                for (int i = 0; i < NAMES.length; i++) order.add(i);
            } else {
                int leader = List.of(NAMES).indexOf(CountingAssignor.lastCaller);
                order.add(leader);
                order.add(leader);
            }
            for (int i : order) {
                Member old = members[i];
                Out.emit("restart", "m", old.name);
                old.close();
                Member fresh = member(bootstrap, topic, group, assignor, old.name, consumed);
                members[i] = fresh.start();
                Common.waitFor(old.name + " restarted", () -> !fresh.owned.isEmpty());
                Out.emit("restarted", "m", old.name, "gen", fresh.generation);
                Churn.consumedByEach(List.of(members));
            }
            Common.sleep(1_000);
            feeder.stop();
            long produced = feeder.sent.get();
            Common.waitFor("all consumed", () -> consumed.get() >= produced);
            Out.emit("teardown");
            for (Member m : members) m.commitNow();
            Out.emit("ends", "offsets", Common.endOffsets(admin, topic, PARTITIONS));
            Out.emit("committed", "offsets", Common.committed(admin, group));
            for (Member m : members) m.close();
        }
    }

    static Member member(String bootstrap, String topic, String group, String assignor,
            String name, AtomicLong consumed) {
        Properties props = Common.consumerProps(
                bootstrap, group, name, "classic", CountingAssignor.class.getName());
        props.put("counting.delegate", assignor);
        props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, name);
        return new Member(name, props, topic, consumed);
    }

    static Map<String, List<Integer>> ownersMap(Member[] members) {
        Map<String, List<Integer>> owners = new java.util.TreeMap<>();
        for (Member m : members) {
            List<Integer> ps = new ArrayList<>(m.owned);
            ps.sort(null);
            owners.put(m.name, ps);
        }
        return owners;
    }

    static String owners(Member[] members) {
        return ownersMap(members).toString();
    }
}
