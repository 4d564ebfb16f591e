// Apache RocketMQ 4.9.8's Java client against our brokers: what ClientE2E does not cover (issue 25).
//
// Rules: three modes, each prints JSON lines; the last line starting with {"result" is what it saw,
// and the Python test (tests/java/test_java_client_more.py) decides what is right. Every wait is
// bounded.
//
//   round NS TOPIC GROUP PREFIX N [AK SK]
//       sends N sync messages with keys PREFIX-0..N-1, shuts the producer down, then starts a push
//       consumer (CLUSTERING, CONSUME_FROM_FIRST_OFFSET) of GROUP, consumes until every PREFIX key
//       has been seen (then 2 s more, to see what else comes), shuts it down cleanly (its offsets
//       go to the broker) and reports every key it was given, PREFIX's and any other.
//   acl NS TOPIC GROUP GOOD_AK GOOD_SK BAD_SK NOPUB_AK NOPUB_SK
//       AclClientRPCHook: the good account sends and consumes; the same access key with a wrong
//       secret and an account without PUB on TOPIC send and are refused (the error chain is reported).
//   failover NS TOPIC GROUP
//       sends sync, keyed (fo-0, fo-1, ...) one after the other until its stdin closes (or 120 s),
//       printing {"progress": acked} lines; then a push consumer reads the whole topic and reports
//       the acknowledged keys and UNIQ_KEYs, the longest gap without a successful send (and how many
//       sends had been acknowledged when it began), what was consumed.
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.RPCHook;

public class ClientMore {
    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') b.append('\\').append(ch);
            else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
            else b.append(ch);
        }
        return b.append('"').toString();
    }

    static String list(Collection<String> xs) {
        StringBuilder b = new StringBuilder("[");
        for (String x : xs) { if (b.length() > 1) b.append(','); b.append(quote(x)); }
        return b.append(']').toString();
    }

    static String counts(Map<String, Integer> m) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, Integer> e : new TreeMap<>(m).entrySet()) {
            if (b.length() > 1) b.append(',');
            b.append(quote(e.getKey())).append(':').append(e.getValue());
        }
        return b.append('}').toString();
    }

    static void out(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static String chain(Throwable e) {  // every message of the cause chain: the broker's remark is in a cause
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (b.length() > 0) b.append(" <- ");
            b.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
        }
        return b.toString();
    }

    static RPCHook hook(String ak, String sk) {
        return ak == null ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    static Message msg(String topic, String key) {
        return new Message(topic, "TagMore", key, ("body-" + key).getBytes(StandardCharsets.UTF_8));
    }

    static DefaultMQProducer producer(String ns, String group, RPCHook h) throws Exception {
        DefaultMQProducer p = h == null ? new DefaultMQProducer(group) : new DefaultMQProducer(group, h);
        p.setNamesrvAddr(ns);
        p.setInstanceName(group + "-" + System.nanoTime());
        return p;
    }

    /** Push consumer of GROUP on TOPIC; every key it is given is counted in {@code seen}. */
    static DefaultMQPushConsumer consumer(String ns, String topic, String group, RPCHook h, Map<String, Integer> seen)
            throws Exception {
        DefaultMQPushConsumer c = h == null ? new DefaultMQPushConsumer(group)
                : new DefaultMQPushConsumer(group, h, new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(ns);
        c.setInstanceName(group + "-" + System.nanoTime());
        c.setMessageModel(MessageModel.CLUSTERING);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) seen.merge(String.valueOf(m.getKeys()), 1, Integer::sum);
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        return c;
    }

    /** The first send may need a moment: the route appears after the brokers register. */
    static SendResult firstSend(DefaultMQProducer p, Message m, long ms) throws Exception {
        long deadline = System.currentTimeMillis() + ms;
        while (true) {
            try { return p.send(m); }
            catch (Exception e) {
                if (System.currentTimeMillis() > deadline) throw e;
                Thread.sleep(500);
            }
        }
    }

    static boolean waitFor(Callable<Boolean> cond, long ms) throws Exception {
        long deadline = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < deadline) {
            if (cond.call()) return true;
            Thread.sleep(100);
        }
        return cond.call();
    }

    static void round(String ns, String topic, String group, String prefix, int n, RPCHook h) throws Exception {
        List<String> errors = new ArrayList<>();
        DefaultMQProducer p = producer(ns, "MoreProducer", h);
        p.setSendMsgTimeout(10000);
        p.start();
        for (int i = 0; i < n; i++) {
            String key = prefix + "-" + i;
            SendResult r = i == 0 ? firstSend(p, msg(topic, key), 60000) : p.send(msg(topic, key));
            if (r.getSendStatus() != SendStatus.SEND_OK) errors.add(key + " " + r.getSendStatus());
        }
        p.shutdown();

        Map<String, Integer> seen = new ConcurrentHashMap<>();
        DefaultMQPushConsumer c = consumer(ns, topic, group, h, seen);
        long t0 = System.currentTimeMillis();
        c.start();
        boolean all = waitFor(() -> {
            for (int i = 0; i < n; i++) if (!seen.containsKey(prefix + "-" + i)) return false;
            return true;
        }, 60000);
        long consumeMs = System.currentTimeMillis() - t0;
        Thread.sleep(2000);  // the last consume's offset update, and whatever else would come
        c.shutdown();  // persists the offsets to the broker (RemoteBrokerOffsetStore.persistAll)
        int mine = 0, again = 0;
        List<String> others = new ArrayList<>();
        for (Map.Entry<String, Integer> e : new TreeMap<>(seen).entrySet()) {
            if (e.getKey().startsWith(prefix + "-")) { mine++; again += e.getValue() - 1; }
            else for (int k = 0; k < e.getValue(); k++) others.add(e.getKey());
        }
        out("{\"result\":\"round\",\"prefix\":" + quote(prefix) + ",\"sent\":" + n + ",\"got\":" + mine
                + ",\"all\":" + all + ",\"consumeMs\":" + consumeMs + ",\"gotTwice\":" + again
                + ",\"others\":" + list(others) + ",\"errors\":" + list(errors) + "}");
    }

    static void acl(String ns, String topic, String group, String goodAk, String goodSk, String badSk,
                    String noPubAk, String noPubSk) throws Exception {
        List<String> errors = new ArrayList<>();
        DefaultMQProducer good = producer(ns, "AclGoodProducer", hook(goodAk, goodSk));
        good.setSendMsgTimeout(10000);
        good.start();
        int n = 5;
        for (int i = 0; i < n; i++) {
            String key = "acl-" + i;
            try {
                SendResult r = i == 0 ? firstSend(good, msg(topic, key), 60000) : good.send(msg(topic, key));
                if (r.getSendStatus() != SendStatus.SEND_OK) errors.add(key + " " + r.getSendStatus());
            } catch (Exception e) {
                errors.add(key + " " + chain(e));
            }
        }
        good.shutdown();

        String[] refusal = new String[2];
        String[][] accounts = {{goodAk, badSk}, {noPubAk, noPubSk}};
        for (int a = 0; a < 2; a++) {
            DefaultMQProducer bad = producer(ns, "AclBadProducer" + a, hook(accounts[a][0], accounts[a][1]));
            bad.setSendMsgTimeout(5000);
            bad.start();
            try {
                SendResult r = bad.send(msg(topic, "refused-" + a));
                refusal[a] = "SENT " + r.getSendStatus() + " " + r.getMsgId();
            } catch (Exception e) {
                refusal[a] = chain(e);
            }
            bad.shutdown();
        }

        Map<String, Integer> seen = new ConcurrentHashMap<>();
        DefaultMQPushConsumer c = consumer(ns, topic, group, hook(goodAk, goodSk), seen);
        c.start();
        waitFor(() -> {
            for (int i = 0; i < n; i++) if (!seen.containsKey("acl-" + i)) return false;
            return true;
        }, 60000);
        Thread.sleep(500);
        c.shutdown();
        out("{\"result\":\"acl\",\"sent\":" + n + ",\"consumed\":" + counts(seen) + ",\"wrongSecret\":"
                + quote(refusal[0]) + ",\"noPub\":" + quote(refusal[1]) + ",\"errors\":" + list(errors) + "}");
    }

    static void failover(String ns, String topic, String group) throws Exception {
        DefaultMQProducer p = producer(ns, "FailoverProducer", null);
        p.setSendMsgTimeout(3000);
        p.setRetryTimesWhenSendFailed(16);
        p.setPollNameServerInterval(1000);
        p.start();
        Thread stdin = new Thread(() -> {  // ends when the test closes our stdin
            try { while (System.in.read() >= 0) { } } catch (Exception e) { }
        });
        stdin.setDaemon(true);
        stdin.start();

        List<String> acked = new ArrayList<>(), ackedIds = new ArrayList<>();
        Map<String, Integer> failures = new TreeMap<>();
        int failed = 0;
        long lastOk = -1, maxGap = 0, gapEnd = 0, gapAfter = 0, start = System.currentTimeMillis(), lastPrint = 0;
        for (int i = 0; stdin.isAlive() && System.currentTimeMillis() - start < 120000; i++) {
            String key = "fo-" + i;
            try {
                SendResult r = acked.isEmpty() && failed == 0 ? firstSend(p, msg(topic, key), 60000)
                        : p.send(msg(topic, key));
                if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("status " + r.getSendStatus());
                long now = System.currentTimeMillis();
                if (lastOk >= 0 && now - lastOk > maxGap) { maxGap = now - lastOk; gapEnd = now; gapAfter = acked.size(); }
                lastOk = now;
                acked.add(key);
                ackedIds.add(r.getMsgId());
            } catch (Exception e) {
                failed++;
                String what = chain(e);
                failures.merge(what.length() > 160 ? what.substring(0, 160) : what, 1, Integer::sum);
                Thread.sleep(20);
            }
            if (System.currentTimeMillis() - lastPrint > 200) {
                lastPrint = System.currentTimeMillis();
                out("{\"progress\":" + acked.size() + ",\"failed\":" + failed + "}");
            }
        }
        p.shutdown();
        out("{\"progress\":" + acked.size() + ",\"failed\":" + failed + ",\"stopped\":true}");

        Map<String, Integer> seen = new ConcurrentHashMap<>();
        DefaultMQPushConsumer c = consumer(ns, topic, group, null, seen);
        c.setConsumeMessageBatchMaxSize(32);
        c.setPullBatchSize(64);
        long t0 = System.currentTimeMillis();
        c.start();
        boolean all = waitFor(() -> seen.keySet().containsAll(acked), 60000);
        long consumeMs = System.currentTimeMillis() - t0;
        c.shutdown();
        List<String> missing = new ArrayList<>();
        for (String k : acked) if (!seen.containsKey(k)) missing.add(k);
        int consumedTwice = 0;
        for (int v : seen.values()) consumedTwice += v - 1;
        out("{\"result\":\"failover\",\"acked\":" + list(acked) + ",\"ackedIds\":" + list(ackedIds)
                + ",\"failed\":" + failed + ",\"failures\":" + counts(failures) + ",\"maxGapMs\":" + maxGap
                + ",\"gapEndMs\":" + (gapEnd - start) + ",\"gapAfterAcked\":" + gapAfter + ",\"consumed\":" + seen.size() + ",\"consumedTwice\":"
                + consumedTwice + ",\"all\":" + all + ",\"consumeMs\":" + consumeMs + ",\"missing\":" + list(missing) + "}");
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "round":
                round(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]),
                      args.length > 7 ? hook(args[6], args[7]) : null);
                break;
            case "acl":
                acl(args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8]);
                break;
            case "failover":
                failover(args[1], args[2], args[3]);
                break;
            default:
                throw new IllegalArgumentException(args[0]);
        }
        System.exit(0);
    }
}
