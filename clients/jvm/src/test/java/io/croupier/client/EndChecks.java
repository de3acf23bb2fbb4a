package io.croupier.client;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import io.croupier.proto.PartitionBitmap;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * {@link EndCoalescer}: concurrent ends share requests, each caller gets its own entry's answer.
 * Without arguments, against a scripted master; with {@code <master url> <shuffle handle> <k>},
 * {@code k} ends of maps {@code 0..k-1} (no data) sent to a real master, all but the first in
 * one {@code MAPPER_END_BATCH}. Prints "ok ..." or exits 1 naming the failed check.
 */
public final class EndChecks {
  private static final byte[] KEY = new byte[32];

  private EndChecks() {}

  /** A scripted master: records each request and answers with {@code answer}. */
  private static final class Script implements EndCoalescer.Call {
    final List<int[]> sent = new ArrayList<>(); // [msgType, entries]
    final CountDownLatch hold = new CountDownLatch(1);
    final CountDownLatch holdBatch = new CountDownLatch(1);
    volatile boolean holdBatches;
    final Function<ObjectNode, ObjectNode> answer;
    volatile boolean holdFirst;
    long requests;

    Script(Function<ObjectNode, ObjectNode> answer) {
      this.answer = answer;
    }

    @Override
    public ObjectNode call(int msgType, ObjectNode body, byte[] key) {
      boolean first;
      synchronized (this) {
        first = sent.isEmpty();
        sent.add(new int[] {msgType, body.has("ends") ? body.get("ends").size() : 1});
      }
      if (first && holdFirst) {
        await(hold);
      }
      if (msgType == MsgType.MAPPER_END_BATCH && holdBatches) {
        await(holdBatch);
      }
      if (msgType == MsgType.MAPPER_END) {
        return won(body.get("map_id").asInt());
      }
      return answer.apply(body);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length == 3) {
      real(args[0], args[1], Integer.parseInt(args[2]));
      return;
    }
    Script echo = new Script(EndChecks::echo);
    EndCoalescer alone = new EndCoalescer(echo, true);
    ObjectNode r = alone.end(end("a", 1, 7));
    check(r.get("winner").asInt() == 7 && echo.sent.size() == 1 && echo.sent.get(0)[0] == MsgType.MAPPER_END,
        "one caller alone sends one MAPPER_END: " + r);

    Script held = new Script(EndChecks::echo);
    List<Object> got = together(held, 6, 1000, m -> end("a", 1, m));
    check(held.sent.size() == 2 && held.sent.get(1)[0] == MsgType.MAPPER_END_BATCH && held.sent.get(1)[1] == 5,
        "5 ends queued behind the first go as one batch: " + sizes(held));
    check(held.requests == 2, "two requests counted, not " + held.requests);
    for (int m = 0; m < 6; m++) {
      check(((ObjectNode) got.get(m)).get("winner").asInt() == m, "caller " + m + " got another's reply: " + got.get(m));
    }

    Script oneFails = new Script(body -> {
      ObjectNode reply = echo(body);
      ObjectNode error = Json.object().put("status", 14).put("code", "CONFLICT").put("message", "map 2 is lost");
      ((ArrayNode) reply.get("results")).set(1, Json.object().set("error", error));
      return reply;
    });
    got = together(oneFails, 4, 1000, m -> end("a", 1, m));
    check(got.get(2) instanceof CroupierException e && e.code() == ErrorCode.CONFLICT && e.getMessage().contains("map 2"),
        "entry 1 of the batch (map 2) gets its own error: " + got.get(2));
    check(got.get(1) instanceof ObjectNode && got.get(3) instanceof ObjectNode, "the other entries are answered: " + got);

    Script old = new Script(body -> {
      throw new CroupierException(ErrorCode.BAD_REQUEST, "msg_type 43 unknown");
    });
    got = together(old, 4, 1000, m -> end("a", 1, m));
    for (int m = 0; m < 4; m++) {
      check(got.get(m) instanceof ObjectNode o && o.get("winner").asInt() == m, "refused batch resent one by one: " + got);
    }
    check(sizes(old).equals("32:1 43:3 32:1 32:1 32:1"), "the resends are single MAPPER_ENDs: " + sizes(old));
    check(old.requests == 2, "the resends are not counted as turns: " + old.requests);

    Script down = new Script(body -> {
      throw new CroupierException(ErrorCode.UNAVAILABLE, "no leader");
    });
    got = together(down, 4, 1000, m -> end("a", 1, m));
    for (int m = 1; m < 4; m++) {
      check(got.get(m) instanceof CroupierException e && e.code() == ErrorCode.UNAVAILABLE, "a failed call reaches every caller in it: " + got);
    }

    Script mixed = new Script(EndChecks::echo);
    got = together(mixed, 5, 1000, m -> end(m % 2 == 0 ? "a" : "b", 1, m));
    check(sizes(mixed).equals("32:1 43:2 43:2"), "ends of two shuffles never share a request: " + sizes(mixed));
    for (int m = 0; m < 5; m++) {
      check(((ObjectNode) got.get(m)).get("winner").asInt() == m, "mixed: caller " + m + " got " + got.get(m));
    }

    Script capped = new Script(EndChecks::echo);
    together(capped, 6, 3, m -> end("a", 1, m));
    check(sizes(capped).equals("32:1 43:3 43:2"), "at most max_ends per batch: " + sizes(capped));
    Script off = new Script(EndChecks::echo);
    off.holdFirst = true;
    EndCoalescer unbatched = new EndCoalescer(off, false);
    ExecutorService pool = Executors.newFixedThreadPool(4);
    try {
      List<Future<ObjectNode>> f = new ArrayList<>();
      for (int m = 0; m < 4; m++) {
        int map = m;
        f.add(pool.submit(() -> unbatched.end(end("a", 1, map))));
      }
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      while (off.sent.size() < 4 && System.nanoTime() < deadline) {
        Thread.sleep(1);
      }
      check(sizes(off).equals("32:1 32:1 32:1 32:1"), "without batching each end goes alone, at once: " + sizes(off));
      off.hold.countDown();
      for (int m = 0; m < 4; m++) {
        check(f.get(m).get(30, TimeUnit.SECONDS).get("winner").asInt() == m, "unbatched reply " + m);
      }
      check(unbatched.requests() == 4, "unbatched requests counted: " + unbatched.requests());
    } finally {
      pool.shutdownNow();
    }
    interrupts();
    System.out.println("ok");
  }

  /** A task interrupted while its end is queued stops, unsent; one whose end is in flight gets its reply. */
  private static void interrupts() throws Exception {
    Script s = new Script(EndChecks::echo);
    s.holdFirst = true;
    s.holdBatches = true;
    EndCoalescer c = new EndCoalescer(s, true);
    Object[] out = new Object[4];
    boolean[] flagged = new boolean[4];
    Thread[] t = new Thread[4];
    for (int m = 0; m < 4; m++) {
      int map = m;
      t[m] = new Thread(() -> {
        try {
          out[map] = c.end(end("a", 1, map));
        } catch (CroupierException e) {
          out[map] = e;
        }
        flagged[map] = Thread.currentThread().isInterrupted();
      });
    }
    t[0].start();
    while (s.sent.isEmpty()) {
      Thread.sleep(1);
    }
    for (int m = 1; m < 4; m++) { // one at a time: the queue's order is 1, 2, 3, so map 2 leads
      t[m].start();
      while (c.queued() < m) {
        Thread.sleep(1);
      }
    }
    t[1].interrupt(); // queued: it stops
    t[1].join(30_000);
    check(out[1] instanceof CroupierException e && e.code() == ErrorCode.UNAVAILABLE && flagged[1],
        "a queued end interrupted stops with UNAVAILABLE, its interrupt kept: " + out[1]);
    s.hold.countDown(); // the first returns; maps 2 and 3 go as one batch, held
    while (s.sent.size() < 2) {
      Thread.sleep(1);
    }
    t[3].interrupt(); // in flight: it waits for its reply
    Thread.sleep(50);
    check(t[3].isAlive(), "an end in flight is awaited, interrupt or not");
    s.holdBatch.countDown();
    for (Thread x : t) {
      x.join(30_000);
    }
    check(sizes(s).equals("32:1 43:2"), "the interrupted queued end was never sent: " + sizes(s));
    check(out[3] instanceof ObjectNode o && o.get("winner").asInt() == 3 && flagged[3],
        "the end in flight got its reply, its interrupt kept: " + out[3]);
    check(out[2] instanceof ObjectNode o && o.get("winner").asInt() == 2 && !flagged[2], "map 2: " + out[2]);
  }

  /** {@code n} callers: the first's request is held until the others have queued. */
  private static List<Object> together(Script script, int n, int maxEnds, Function<Integer, EndCoalescer.End> ends)
      throws Exception {
    script.holdFirst = true;
    EndCoalescer c = new EndCoalescer(script, maxEnds, EndCoalescer.MAX_BYTES);
    ExecutorService pool = Executors.newFixedThreadPool(n);
    try {
      List<Future<Object>> futures = new ArrayList<>();
      futures.add(pool.submit(() -> outcome(c, ends.apply(0))));
      while (script.sent.isEmpty()) {
        Thread.sleep(1);
      }
      // one at a time, each queued before the next starts: the batch holds maps 1..n-1 in order
      // (started at once, any of them could queue first, and a check of entry i see another map)
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      for (int m = 1; m < n; m++) {
        int map = m;
        futures.add(pool.submit(() -> outcome(c, ends.apply(map))));
        while (c.queued() < m && System.nanoTime() < deadline) {
          Thread.sleep(1);
        }
      }
      check(c.queued() == n - 1, "only " + c.queued() + " of " + (n - 1) + " callers queued");
      script.hold.countDown();
      List<Object> out = new ArrayList<>();
      for (Future<Object> f : futures) {
        out.add(f.get(30, TimeUnit.SECONDS));
      }
      script.requests = c.requests();
      return out;
    } finally {
      pool.shutdownNow();
    }
  }

  private static Object outcome(EndCoalescer c, EndCoalescer.End end) {
    try {
      return c.end(end);
    } catch (CroupierException e) {
      return e;
    }
  }

  private static String sizes(Script s) {
    StringBuilder b = new StringBuilder();
    for (int[] r : s.sent) {
      b.append(b.length() == 0 ? "" : " ").append(r[0]).append(':').append(r[1]);
    }
    return b.toString();
  }

  private static EndCoalescer.End end(String app, long shuffle, int map) {
    return new EndCoalescer.End(app, shuffle, KEY, map, 0, 0, PartitionBitmap.encode(new BitSet(), 4));
  }

  private static ObjectNode won(int map) {
    return Json.object().put("winner", map).put("won", true).put("all_ended", false);
  }

  private static ObjectNode echo(ObjectNode body) {
    ObjectNode reply = Json.object();
    ArrayNode results = reply.putArray("results");
    for (var e : body.get("ends")) {
      results.add(won(e.get(0).asInt()));
    }
    return reply;
  }

  /** {@code k} ends sent to a real master, the first held until the others queued. */
  private static void real(String url, String handle, int k) throws Exception {
    try (CroupierClient client = CroupierClient.connect(url, new ClientOptions())) {
      Shuffle sh = client.openShuffle(handle);
      CountDownLatch hold = new CountDownLatch(1);
      int[] calls = new int[2];
      EndCoalescer.Call call = (type, body, key) -> {
        boolean first;
        synchronized (calls) {
          first = calls[0] + calls[1] == 0;
          calls[type == MsgType.MAPPER_END_BATCH ? 1 : 0]++;
        }
        if (first) {
          await(hold);
        }
        return client.master().call(type, body, key);
      };
      EndCoalescer c = new EndCoalescer(call, true);
      ExecutorService pool = Executors.newFixedThreadPool(k);
      try {
        List<Future<ObjectNode>> futures = new ArrayList<>();
        for (int m = 0; m < k; m++) {
          EndCoalescer.End e = new EndCoalescer.End(sh.appId(), sh.id(), sh.key(), m, 0, 0,
              PartitionBitmap.encode(new BitSet(), sh.numPartitions()));
          futures.add(pool.submit(() -> c.end(e)));
          if (m == 0) {
            while (calls[0] == 0) {
              Thread.sleep(1);
            }
          }
        }
        while (c.queued() < k - 1) {
          Thread.sleep(1);
        }
        hold.countDown();
        int won = 0;
        for (Future<ObjectNode> f : futures) {
          won += f.get(60, TimeUnit.SECONDS).get("won").asBoolean() ? 1 : 0;
        }
        System.out.println("ok requests=" + c.requests() + " batches=" + calls[1] + " won=" + won);
      } finally {
        pool.shutdownNow();
      }
    }
  }

  private static void await(CountDownLatch latch) {
    try {
      latch.await(30, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static void check(boolean ok, String what) {
    if (!ok) {
      System.out.println("FAILED: " + what);
      System.exit(1);
    }
  }
}
