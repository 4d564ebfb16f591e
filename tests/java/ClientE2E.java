// Apache RocketMQ 4.9.8's own Java client against a broker group found through a name server.
//
// Rules: every kind of send a 4.9.8 producer has (sync with tags and keys, async, oneway, batch,
// ordered by a queue selector, delayed, transactional with commit, rollback and check-back),
// then a push consumer with a tag filter (one message is answered RECONSUME_LATER until it has
// been retried maxReconsumeTimes times, so it goes through %RETRY% to %DLQ%) and a lite
// pull consumer on the ordered queue, and an orderly push consumer (queue locks) on it. Prints one JSON line of what it saw; the Python test
// (tests/java/test_java_client.py) decides what is right. Bounded: every wait has a deadline.
//
// usage: ClientE2E NAMESRV TOPIC
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class ClientE2E {
    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String list(Collection<String> xs) {
        StringBuilder b = new StringBuilder("[");
        for (String x : new TreeSet<>(xs)) { if (b.length() > 1) b.append(','); b.append(quote(x)); }
        return b.append(']').toString();
    }

    static Message msg(String topic, String tag, String key) {
        Message m = new Message(topic, tag, key, ("body-" + key).getBytes(StandardCharsets.UTF_8));
        return m;
    }

    public static void main(String[] args) throws Exception {
        String ns = args[0], topic = args[1];
        Map<String, String> sent = new ConcurrentHashMap<>();  // key -> tag
        List<String> errors = Collections.synchronizedList(new ArrayList<>());

        DefaultMQProducer p = new DefaultMQProducer("E2EProducer");
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(10000);
        p.setRetryTimesWhenSendFailed(4);
        p.start();
        long deadline = System.currentTimeMillis() + 60000;
        while (true) {  // the route may need a moment after the brokers register
            try { p.send(msg(topic, "TagWarm", "warm")); sent.put("warm", "TagWarm"); break; }
            catch (Exception e) {
                if (System.currentTimeMillis() > deadline) throw e;
                Thread.sleep(500);
            }
        }
        for (int i = 0; i < 20; i++) {
            String tag = i % 2 == 0 ? "TagA" : "TagB", key = "sync-" + i;
            SendResult r = p.send(msg(topic, tag, key));
            if (r.getSendStatus() != SendStatus.SEND_OK) errors.add(key + " " + r.getSendStatus());
            sent.put(key, tag);
        }
        CountDownLatch async = new CountDownLatch(10);
        for (int i = 0; i < 10; i++) {
            String key = "async-" + i;
            sent.put(key, "TagA");
            p.send(msg(topic, "TagA", key), new SendCallback() {
                public void onSuccess(SendResult r) { async.countDown(); }
                public void onException(Throwable e) { errors.add(key + " " + e); async.countDown(); }
            });
        }
        if (!async.await(30, TimeUnit.SECONDS)) errors.add("async sends not answered in 30 s");
        for (int i = 0; i < 5; i++) { p.sendOneway(msg(topic, "TagB", "oneway-" + i)); sent.put("oneway-" + i, "TagB"); }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 10; i++) { batch.add(msg(topic, "TagA", "batch-" + i)); sent.put("batch-" + i, "TagA"); }
        SendResult br = p.send(batch);
        if (br.getSendStatus() != SendStatus.SEND_OK) errors.add("batch " + br.getSendStatus());
        List<String> ordered = new ArrayList<>();
        MessageQueue orderedQueue = null;
        for (int i = 0; i < 10; i++) {
            String key = "order-" + i;
            SendResult r = p.send(msg(topic, "TagOrder", key), (mqs, m, arg) -> mqs.get(0), null);
            orderedQueue = r.getMessageQueue();
            ordered.add(key);
        }
        Message delayed = msg(topic, "TagA", "delay-1");
        delayed.setDelayTimeLevel(1);
        p.send(delayed);
        sent.put("delay-1", "TagA");
        p.shutdown();

        TransactionMQProducer tp = new TransactionMQProducer("E2ETxProducer");
        tp.setNamesrvAddr(ns);
        tp.setSendMsgTimeout(10000);
        AtomicInteger checks = new AtomicInteger();
        tp.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                switch (m.getKeys()) {
                    case "tx-commit": return LocalTransactionState.COMMIT_MESSAGE;
                    case "tx-rollback": return LocalTransactionState.ROLLBACK_MESSAGE;
                    default: return LocalTransactionState.UNKNOW;
                }
            }
            public LocalTransactionState checkLocalTransaction(MessageExt m) {
                checks.incrementAndGet();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        tp.start();
        for (String key : new String[] {"tx-commit", "tx-rollback", "tx-check"}) {
            TransactionSendResult r = tp.sendMessageInTransaction(msg(topic, "TagA", key), null);
            if (r.getSendStatus() != SendStatus.SEND_OK) errors.add(key + " " + r.getSendStatus());
        }
        sent.put("tx-commit", "TagA");
        sent.put("tx-check", "TagA");

        // push consumer, tag filter: TagA || TagB (TagOrder and TagWarm are not delivered to it)
        Set<String> want = new TreeSet<>();
        for (Map.Entry<String, String> e : sent.entrySet())
            if (e.getValue().equals("TagA") || e.getValue().equals("TagB")) want.add(e.getKey());
        Set<String> got = ConcurrentHashMap.newKeySet();
        Set<String> wrongTag = ConcurrentHashMap.newKeySet();
        AtomicInteger retried = new AtomicInteger();
        long[] delayLatency = {-1};
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("E2EGroup");
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setMaxReconsumeTimes(1);
        c.subscribe(topic, "TagA || TagB");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (!"TagA".equals(m.getTags()) && !"TagB".equals(m.getTags())) wrongTag.add(m.getKeys());
                if (m.getKeys().equals("delay-1"))  // stored on its topic when due, not before
                    delayLatency[0] = m.getStoreTimestamp() - m.getBornTimestamp();
                if (m.getKeys().equals("sync-3")) {  // never acknowledged: retried, then dead-lettered
                    retried.incrementAndGet();
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                got.add(m.getKeys());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Set<String> wantAcked = new TreeSet<>(want);
        wantAcked.remove("sync-3");
        deadline = System.currentTimeMillis() + 90000;
        while (System.currentTimeMillis() < deadline && (!got.containsAll(wantAcked) || retried.get() < 2))
            Thread.sleep(200);
        c.shutdown();

        // lite pull consumer on the ordered queue: the order it was sent in
        DefaultLitePullConsumer lp = new DefaultLitePullConsumer("E2EPullGroup");
        lp.setNamesrvAddr(ns);
        lp.setAutoCommit(false);
        lp.start();
        lp.assign(Collections.singletonList(orderedQueue));
        lp.seek(orderedQueue, 0);
        List<String> pulledOrder = new ArrayList<>();
        deadline = System.currentTimeMillis() + 30000;
        while (System.currentTimeMillis() < deadline && pulledOrder.size() < ordered.size()) {
            for (MessageExt m : lp.poll(1000)) if ("TagOrder".equals(m.getTags())) pulledOrder.add(m.getKeys());
        }
        lp.shutdown();

        // orderly push consumer: it consumes a queue only while the broker grants it the queue's
        // lock (LOCK_BATCH_MQ), one message at a time, in queue order
        List<String> orderly = Collections.synchronizedList(new ArrayList<>());
        DefaultMQPushConsumer oc = new DefaultMQPushConsumer("E2EOrderlyGroup");
        oc.setNamesrvAddr(ns);
        oc.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        oc.subscribe(topic, "TagOrder");
        oc.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) orderly.add(m.getKeys());
            return ConsumeOrderlyStatus.SUCCESS;
        });
        oc.start();
        deadline = System.currentTimeMillis() + 60000;
        while (System.currentTimeMillis() < deadline && orderly.size() < ordered.size()) Thread.sleep(200);
        oc.shutdown();
        tp.shutdown();

        Set<String> missing = new TreeSet<>(wantAcked);
        missing.removeAll(got);
        Set<String> unexpected = new TreeSet<>(got);
        unexpected.removeAll(want);
        System.out.println("{\"sent\":" + sent.size() + ",\"wanted\":" + wantAcked.size() + ",\"got\":" + got.size()
                + ",\"missing\":" + list(missing) + ",\"unexpected\":" + list(unexpected)
                + ",\"wrongTag\":" + list(wrongTag) + ",\"retried\":" + retried.get()
                + ",\"txChecks\":" + checks.get() + ",\"delayMs\":" + delayLatency[0]
                + ",\"orderedSent\":" + quote(String.join(",", ordered))
                + ",\"orderedPulled\":" + quote(String.join(",", pulledOrder))
                + ",\"orderlyConsumed\":" + quote(String.join(",", orderly))
                + ",\"errors\":" + list(errors) + "}");
        System.exit(0);
    }
}
