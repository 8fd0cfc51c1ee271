import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListConsumerGroupsOptions;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupResult;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;

/**
 * AdminClient's group operations (scenario e).
 *
 * Usage: AdminOps BOOTSTRAP PREFIX
 *
 * Three groups named PREFIX-static (a classic group of two static members, s1 and s2),
 * PREFIX-consumer (a consumer-protocol group of one member, k1) and PREFIX-empty (offsets
 * committed by alterConsumerGroupOffsets, no member) over the topic PREFIX-t of 3
 * partitions. The program lists, describes, computes lag, removes the static members,
 * alters offsets and deletes groups, printing each answer with the prefix taken off the
 * group ids (so both brokers print the same lines); errors print as the exception's simple
 * class name.
 */
public final class AdminOps {
    static final int PARTITIONS = 3;

    public static void main(String[] args) {
        Common.main(() -> run(args[0], args[1]));
    }

    static void run(String bootstrap, String prefix) throws Exception {
        String topic = prefix + "-t";
        String staticGroup = prefix + "-static";
        String consumerGroup = prefix + "-consumer";
        String emptyGroup = prefix + "-empty";
        try (Admin admin = Common.admin(bootstrap)) {
            Common.createTopic(admin, topic, PARTITIONS);
            Common.produce(bootstrap, topic, Map.of(0, 10, 1, 10, 2, 10));

            AtomicLong staticRecords = new AtomicLong();
            Member s1 = staticMember(bootstrap, topic, staticGroup, "s1", staticRecords).start();
            Member s2 = staticMember(bootstrap, topic, staticGroup, "s2", staticRecords).start();
            Common.waitFor("static consumed", () -> staticRecords.get() >= 30
                    && !s1.owned.isEmpty() && !s2.owned.isEmpty());
            s1.commitNow();
            s2.commitNow();

            AtomicLong consumerRecords = new AtomicLong();
            Member k1 = new Member("k1", Common.consumerProps(
                    bootstrap, consumerGroup, "k1", "consumer", "uniform"),
                    topic, consumerRecords).start();
            Common.waitFor("consumer consumed", () -> consumerRecords.get() >= 30);
            k1.commitNow();

            Map<TopicPartition, OffsetAndMetadata> emptyOffsets = new HashMap<>();
            emptyOffsets.put(new TopicPartition(topic, 0), new OffsetAndMetadata(3));
            emptyOffsets.put(new TopicPartition(topic, 1), new OffsetAndMetadata(4));
            Out.emit("alter_offsets", "group", "empty",
                    "result", outcome(admin.alterConsumerGroupOffsets(emptyGroup, emptyOffsets).all()));

            // Records nobody has consumed yet: the lag.
            Common.produce(bootstrap, topic, Map.of(0, 5, 1, 2));
            Map<Integer, Long> ends = Common.endOffsets(admin, topic, PARTITIONS);
            Out.emit("ends", "offsets", ends);
            for (String g : List.of(staticGroup, emptyGroup)) {
                Map<Integer, Long> committed = Common.committed(admin, g);
                Map<Integer, Long> lag = new TreeMap<>();
                committed.forEach((p, o) -> lag.put(p, ends.get(p) - o));
                Out.emit("lag", "group", strip(prefix, g), "committed", committed, "lag", lag);
            }

            list(admin, prefix, "all", new ListGroupsOptions());
            list(admin, prefix, "consumer-groups", ListGroupsOptions.forConsumerGroups());
            list(admin, prefix, "classic", ListGroupsOptions.forConsumerGroups()
                    .withTypes(Set.of(GroupType.CLASSIC)));
            list(admin, prefix, "consumer", ListGroupsOptions.forConsumerGroups()
                    .withTypes(Set.of(GroupType.CONSUMER)));
            list(admin, prefix, "stable", ListGroupsOptions.forConsumerGroups()
                    .inGroupStates(Set.of(GroupState.STABLE)));
            list(admin, prefix, "empty", ListGroupsOptions.forConsumerGroups()
                    .inGroupStates(Set.of(GroupState.EMPTY)));
            listConsumerGroups(admin, prefix, "stable-classic", new ListConsumerGroupsOptions()
                    .inGroupStates(Set.of(GroupState.STABLE)).withTypes(Set.of(GroupType.CLASSIC)));
            listConsumerGroups(admin, prefix, "empty-or-stable-consumer",
                    new ListConsumerGroupsOptions()
                            .inGroupStates(Set.of(GroupState.EMPTY, GroupState.STABLE))
                            .withTypes(Set.of(GroupType.CONSUMER)));
            describe(admin, prefix, "active", List.of(staticGroup, consumerGroup, emptyGroup));

            Out.emit("describe_unknown", "result",
                    outcome(admin.describeConsumerGroups(List.of(prefix + "-nosuch")).all()));
            Out.emit("offsets", "group", "nosuch", "committed",
                    Common.committed(admin, prefix + "-nosuch"));
            Out.emit("delete_offsets", "group", "empty", "result", outcome(
                    admin.deleteConsumerGroupOffsets(emptyGroup,
                            Set.of(new TopicPartition(topic, 0))).all()));
            Out.emit("delete_offsets", "group", "consumer", "result", outcome(
                    admin.deleteConsumerGroupOffsets(consumerGroup,
                            Set.of(new TopicPartition(topic, 0))).all()));
            Out.emit("offsets", "group", "empty", "committed", Common.committed(admin, emptyGroup));

            // Closed static members stay in the group until removed (or their session ends);
            // they commit what they consumed when they close.
            Common.waitFor("static consumed the rest", () -> staticRecords.get() >= 37);
            s1.close();
            s2.close();
            describe(admin, prefix, "static closed", List.of(staticGroup));
            RemoveMembersFromConsumerGroupResult removed = admin.removeMembersFromConsumerGroup(
                    staticGroup, new RemoveMembersFromConsumerGroupOptions(List.of(
                            new MemberToRemove("s1"), new MemberToRemove("s2"),
                            new MemberToRemove("nobody"))));
            Map<String, String> perMember = new TreeMap<>();
            for (String id : List.of("s1", "s2", "nobody")) {
                perMember.put(id, outcome(removed.memberResult(new MemberToRemove(id))));
            }
            Out.emit("remove_members", "group", "static", "result", perMember);
            describe(admin, prefix, "static removed", List.of(staticGroup));

            Out.emit("alter_offsets", "group", "static", "result", outcome(
                    admin.alterConsumerGroupOffsets(staticGroup, Map.of(
                            new TopicPartition(topic, 2), new OffsetAndMetadata(1))).all()));
            Out.emit("alter_offsets", "group", "consumer", "result", outcome(
                    admin.alterConsumerGroupOffsets(consumerGroup, Map.of(
                            new TopicPartition(topic, 2), new OffsetAndMetadata(1))).all()));
            Out.emit("offsets", "group", "static", "committed", Common.committed(admin, staticGroup));
            Out.emit("offsets", "group", "consumer", "committed",
                    Common.committed(admin, consumerGroup));

            delete(admin, prefix, List.of(staticGroup, consumerGroup, prefix + "-nosuch"));
            list(admin, prefix, "after delete", ListGroupsOptions.forConsumerGroups());

            k1.close();
            Common.waitFor("consumer group empty", () -> state(admin, consumerGroup).equals("Empty"));
            delete(admin, prefix, List.of(consumerGroup, emptyGroup));
            list(admin, prefix, "all deleted", new ListGroupsOptions());
        }
    }

    static Member staticMember(String bootstrap, String topic, String group, String name,
            AtomicLong records) {
        Properties props = Common.consumerProps(bootstrap, group, name, "classic",
                "org.apache.kafka.clients.consumer.RangeAssignor");
        props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, name);
        return new Member(name, props, topic, records);
    }

    static String strip(String prefix, String group) {
        return group.startsWith(prefix + "-") ? group.substring(prefix.length() + 1) : group;
    }

    /** "ok", or the simple class name of the failure's cause. */
    static String outcome(Future<?> future) {
        try {
            future.get();
            return "ok";
        } catch (Exception e) {
            return Common.cause(e).getClass().getSimpleName();
        }
    }

    static void list(Admin admin, String prefix, String name, ListGroupsOptions options)
            throws Exception {
        printListing(prefix, name, admin.listGroups(options).all().get());
    }

    /** The older call (deprecated since 4.1, still what many tools use). */
    @SuppressWarnings("removal")
    static void listConsumerGroups(Admin admin, String prefix, String name,
            ListConsumerGroupsOptions options) throws Exception {
        Map<String, Object> ours = new TreeMap<>();
        for (ConsumerGroupListing g : admin.listConsumerGroups(options).all().get()) {
            if (!g.groupId().startsWith(prefix + "-")) continue;
            ours.put(strip(prefix, g.groupId()), listed(g.type(), g.groupState(), null,
                    g.isSimpleConsumerGroup()));
        }
        Out.emit("list", "name", name, "groups", ours);
    }

    static void printListing(String prefix, String name, Collection<GroupListing> listings) {
        Map<String, Object> ours = new TreeMap<>();
        for (GroupListing g : listings) {
            if (!g.groupId().startsWith(prefix + "-")) continue;
            ours.put(strip(prefix, g.groupId()), listed(g.type(), g.groupState(), g.protocol(),
                    g.isSimpleConsumerGroup()));
        }
        Out.emit("list", "name", name, "groups", ours);
    }

    static Map<String, Object> listed(Optional<GroupType> type, Optional<GroupState> state,
            String protocol, boolean simple) {
        Map<String, Object> item = new LinkedHashMap<>();
        item.put("type", type.map(Object::toString).orElse(null));
        item.put("state", state.map(Object::toString).orElse(null));
        if (protocol != null) item.put("protocol", protocol);
        item.put("simple", simple);
        return item;
    }

    static String state(Admin admin, String group) {
        try {
            return admin.describeConsumerGroups(List.of(group)).all().get().get(group)
                    .groupState().toString();
        } catch (Exception e) {
            return Common.cause(e).getClass().getSimpleName();
        }
    }

    static void describe(Admin admin, String prefix, String name, List<String> groups)
            throws Exception {
        Map<String, ConsumerGroupDescription> got =
                admin.describeConsumerGroups(groups).all().get();
        Map<String, Object> out = new TreeMap<>();
        for (String g : groups) {
            ConsumerGroupDescription d = got.get(g);
            Map<String, Object> item = new LinkedHashMap<>();
            item.put("state", d.groupState().toString());
            item.put("type", d.type().toString());
            item.put("assignor", d.partitionAssignor());
            item.put("simple", d.isSimpleConsumerGroup());
            item.put("coordinator", d.coordinator() == null ? null : d.coordinator().id());
            item.put("group_epoch", d.groupEpoch());
            item.put("target_epoch", d.targetAssignmentEpoch());
            Map<String, Object> members = new TreeMap<>();
            for (MemberDescription m : d.members()) {
                Map<String, Object> member = new LinkedHashMap<>();
                member.put("instance", m.groupInstanceId());
                member.put("assigned", Common.partitions(m.assignment().topicPartitions()));
                member.put("has_member_id", !m.consumerId().isEmpty());
                member.put("epoch", m.memberEpoch());
                member.put("target", m.targetAssignment().map(
                        a -> Common.partitions(a.topicPartitions())));
                member.put("upgraded", m.upgraded());
                members.put(m.clientId(), member);
            }
            item.put("members", members);
            out.put(strip(prefix, g), item);
        }
        Out.emit("describe", "name", name, "groups", out);
    }

    static void delete(Admin admin, String prefix, List<String> groups) {
        Map<String, String> out = new TreeMap<>();
        Map<String, ? extends Future<?>> futures =
                admin.deleteConsumerGroups(groups).deletedGroups();
        for (String g : groups) out.put(strip(prefix, g), outcome(futures.get(g)));
        Out.emit("delete", "result", out);
    }
}
