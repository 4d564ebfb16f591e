// Prints, one case a line (hex of the UTF-8 bytes), what fastjson 1.2.83 writes for beans shaped
// like Apache RocketMQ 5.3.3's controller events (with BrowserSecure, as its FastJsonSerializer)
// and remoting bodies (default features, as RemotingSerializable.encode). The beans below are
// written for this test: same property names, types and copy semantics as Apache's classes.
// tests/controller/test_fastjson_java.py builds the same cases in Python and compares.
import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.serializer.SerializeConfig;
import com.alibaba.fastjson.serializer.SerializeFilter;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.nio.charset.StandardCharsets;
import java.util.*;

public class FastjsonProbe {
    public enum EventType { ALTER_SYNC_STATE_SET_EVENT, APPLY_BROKER_ID_EVENT, ELECT_MASTER_EVENT, READ_EVENT, CLEAN_BROKER_DATA_EVENT, UPDATE_BROKER_ADDRESS }

    public static class Alter {
        private final String brokerName; private final Set<Long> set;
        Alter(String b, Set<Long> s) { brokerName = b; set = new HashSet<>(s); }
        public EventType getEventType() { return EventType.ALTER_SYNC_STATE_SET_EVENT; }
        public String getBrokerName() { return brokerName; }
        public Set<Long> getNewSyncStateSet() { return new HashSet<>(set); }
    }
    public static class Apply {
        private final String c, b, a, r; private final long id;
        Apply(String c, String b, String a, long id, String r) { this.c = c; this.b = b; this.a = a; this.id = id; this.r = r; }
        public EventType getEventType() { return EventType.APPLY_BROKER_ID_EVENT; }
        public String getClusterName() { return c; } public String getBrokerName() { return b; }
        public String getBrokerAddress() { return a; } public long getNewBrokerId() { return id; }
        public String getRegisterCheckCode() { return r; }
    }
    public static class Elect {
        private final boolean e; private final String b; private final Long id;
        Elect(boolean e, String b, Long id) { this.e = e; this.b = b; this.id = id; }
        public EventType getEventType() { return EventType.ELECT_MASTER_EVENT; }
        public boolean getNewMasterElected() { return e; } public String getBrokerName() { return b; }
        public Long getNewMasterBrokerId() { return id; }
    }
    public static class Clean {
        private final String b; private final Set<Long> ids;
        Clean(String b, Set<Long> ids) { this.b = b; this.ids = ids; }
        public EventType getEventType() { return EventType.CLEAN_BROKER_DATA_EVENT; }
        public String getBrokerName() { return b; } public Set<Long> getBrokerIdSetToClean() { return ids; }
    }
    public static class Update {
        private final String c, b, a; private final Long id;
        Update(String c, String b, String a, Long id) { this.c = c; this.b = b; this.a = a; this.id = id; }
        public EventType getEventType() { return EventType.UPDATE_BROKER_ADDRESS; }
        public String getClusterName() { return c; } public String getBrokerName() { return b; }
        public String getBrokerAddress() { return a; } public Long getBrokerId() { return id; }
    }
    public static class SyncStateSet {
        private final Set<Long> s; private final int epoch;
        SyncStateSet(Set<Long> s, int epoch) { this.s = new HashSet<>(s); this.epoch = epoch; }
        public Set<Long> getSyncStateSet() { return new HashSet<>(s); } public int getSyncStateSetEpoch() { return epoch; }
    }
    public static class Group {
        private final String cluster, brokerName; private final Map<Long, String> addrs = new HashMap<>();
        Group(String c, String b) { cluster = c; brokerName = b; }
        public String getCluster() { return cluster; } public String getBrokerName() { return brokerName; }
        public Map<Long, String> getBrokerAddrs() { return addrs; }
    }
    public static class ElectBody {
        private final Group g; private final Set<Long> s;
        ElectBody(Group g, Set<Long> s) { this.g = g; this.s = s; }
        public Group getBrokerMemberGroup() { return g; } public Set<Long> getSyncStateSet() { return s; }
    }
    public static class Replica {
        private final String b, a; private final Long id; private final Boolean alive;
        Replica(String b, Long id, String a, Boolean alive) { this.b = b; this.id = id; this.a = a; this.alive = alive; }
        public String getBrokerName() { return b; } public String getBrokerAddress() { return a; }
        public Long getBrokerId() { return id; } public Boolean getAlive() { return alive; }
    }
    public static class ReplicasInfo {
        private final Long m; private final String ma; private final Integer me, se; private final List<Replica> in, out;
        ReplicasInfo(Long m, String ma, int me, int se, List<Replica> in, List<Replica> out) { this.m = m; this.ma = ma; this.me = me; this.se = se; this.in = in; this.out = out; }
        public Long getMasterBrokerId() { return m; } public String getMasterAddress() { return ma; }
        public int getMasterEpoch() { return me; } public int getSyncStateSetEpoch() { return se; }
        public List<Replica> getInSyncReplicas() { return in; } public List<Replica> getNotInSyncReplicas() { return out; }
    }
    public static class Table {
        private final Map<String, ReplicasInfo> t = new HashMap<>();
        public Map<String, ReplicasInfo> getReplicasInfoTable() { return t; }
    }

    static Set<Long> grown(long... ids) { Set<Long> s = new HashSet<>(); for (long i : ids) s.add(i); return s; }

    static void event(Object o) {
        print(JSON.toJSONBytes(StandardCharsets.UTF_8, o, SerializeConfig.getGlobalInstance(), new SerializeFilter[0], null,
            JSON.DEFAULT_GENERATE_FEATURE, SerializerFeature.BrowserSecure));
    }
    static void body(Object o) { print(JSON.toJSONString(o, false).getBytes(StandardCharsets.UTF_8)); }
    static void print(byte[] b) { StringBuilder sb = new StringBuilder(); for (byte x : b) sb.append(String.format("%02x", x)); System.out.println(sb); }

    public static void main(String[] args) {
        // the request's SyncStateSet as fastjson reads it (a grown HashSet), then Apache's copies
        long[] twelve = {16, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
        event(new Alter("broker-a", new SyncStateSet(grown(100, 17, 1), 1).getSyncStateSet()));
        event(new Alter("broker-a", new SyncStateSet(grown(twelve), 1).getSyncStateSet()));
        event(new Apply("DefaultCluster", "broker-a", "127.0.0.1:30911", 1L, "127.0.0.1:30911;1700000000000"));
        event(new Apply("c<>()&'\"\u00e9\u2028\u0001\u007f\u0085", "b", null, 1L, "x\t\n/\\"));
        event(new Elect(true, "broker-a", 2L));
        event(new Elect(false, "broker-a", null));
        event(new Clean("broker-a", null));
        event(new Clean("broker-a", grown(33, 1, 17)));
        event(new Update("DefaultCluster", "broker-a", "127.0.0.1:30921", 2L));
        body(new SyncStateSet(grown(twelve), 7));
        Group g = new Group("DefaultCluster", "broker-a");
        for (long i : new long[]{17, 1, 2}) g.getBrokerAddrs().put(i, "10.0.0." + i + ":1<");
        body(new ElectBody(g, grown(2)));
        body(new ElectBody(null, grown(3, 1)));
        Table t = new Table();
        for (String name : new String[]{"broker-b", "broker-a", "zz"}) {
            t.getReplicasInfoTable().put(name, new ReplicasInfo(name.equals("zz") ? null : 1L, name.equals("zz") ? null : "a:1", 2, 3,
                Arrays.asList(new Replica(name, 1L, "a:1", true)), Arrays.asList(new Replica(name, 2L, "b:2", false))));
        }
        body(t);
    }
}
