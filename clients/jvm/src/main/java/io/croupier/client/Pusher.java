package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import io.croupier.proto.Reply;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A writer's pushes (PROTOCOL §5.2): batches are staged per target (primary and replica), merged
 * into PUSH messages of up to {@code pushMergeSize} bytes, and sent with at most {@code
 * maxInFlightPerWorker} messages in flight per primary. Every reply is settled on the writer's
 * own thread (the transport only queues results), so a writer blocks exactly when the window it
 * needs is full.
 *
 * <ul>
 *   <li>OK: the batches are stored on both copies; {@code soft_split} partitions are revived in
 *       the background ({@link SoftSplits}), the following batches go to the new epoch.
 *   <li>CONGESTED: the same message again after a back-off (5 ms doubling to 0.5 s), given up
 *       after 300 s.
 *   <li>STALE_LOCATION, TIMEOUT, UNAVAILABLE (+ {@code failed_worker}): revive every partition
 *       of the message (unless already moved past that epoch) and resend its batches, same ids, to
 *       the new location. HARD_SPLIT: the same for the locations it names only (the others are
 *       resent where they were), blaming only its {@code failed_worker}; 100 split revives are
 *       allowed per partition, {@code maxRevivesPerPartition} others.
 *   <li>anything else ({@code DATA_LOST}, {@code BAD_REQUEST}, ...): raised.
 * </ul>
 */
final class Pusher {
  private static final long BACKOFF_MIN_MS = 5;
  private static final long BACKOFF_MAX_MS = 500;
  private static final long CONGESTION_LIMIT_MS = 300_000;
  private static final int MAX_SPLIT_REVIVES = 100;

  /** One PUSH message. */
  private static final class Message {
    final Location location;
    final List<OutBatch> batches;
    final List<Integer> epochs;
    long backoffMs;
    long congestedSince = -1;
    long dueNanos;

    Message(Location location, List<OutBatch> batches, List<Integer> epochs) {
      this.location = location;
      this.batches = batches;
      this.epochs = epochs;
    }

    String worker() {
      return location.primary().workerId();
    }
  }

  private record Result(Message message, Reply reply, CroupierException error) {}

  private record Staged(Location location, List<OutBatch> batches, long[] size) {}

  private final Shuffle shuffle;
  private final Reviver reviver;
  private final SoftSplits soft;
  private final int window;
  private final long mergeSize;
  private final int maxRevives;
  private final Map<String, Staged> staged = new LinkedHashMap<>();
  private final Map<String, Integer> inFlight = new HashMap<>();
  private final PriorityQueue<Message> delayed = new PriorityQueue<>((a, b) -> Long.compare(a.dueNanos, b.dueNanos));
  private final LinkedBlockingQueue<Result> done = new LinkedBlockingQueue<>();
  private final Map<Integer, Integer> revives = new HashMap<>();
  private final Map<Integer, Integer> splitRevives = new HashMap<>();
  private final Map<Integer, Set<String>> failedWorkers = new HashMap<>();
  private int unacked;
  private boolean aborted;
  private long messages;

  Pusher(Shuffle shuffle) {
    ClientOptions o = shuffle.client().options();
    this.shuffle = shuffle;
    this.reviver = new Reviver(shuffle);
    this.soft = new SoftSplits(shuffle, reviver);
    this.window = Math.max(1, o.maxInFlightPerWorker());
    this.mergeSize = Math.max(1, o.pushMergeSize());
    this.maxRevives = o.maxRevivesPerPartition();
  }

  /** Stages batches and sends what is ready; blocks while a full target waits for its window. */
  void submit(List<OutBatch> batches) {
    for (OutBatch b : batches) {
      unacked++;
      stage(b);
    }
    settleReady();
    pump(false);
    while (mustWait()) {
      waitOne();
      pump(false);
    }
  }

  /** Sends everything and waits until every batch is acknowledged. */
  void drain() {
    pump(true);
    while (unacked > 0) {
      waitOne();
      pump(true);
    }
    soft.finish();
  }

  /** Drops everything not yet acknowledged; late replies are ignored. */
  void abort() {
    aborted = true;
    staged.clear();
    delayed.clear();
    soft.finish();
  }

  /** PUSH messages sent so far (resends included). */
  long messages() {
    return messages;
  }

  private void stage(OutBatch b) {
    Location loc = shuffle.routing().current(b.partition());
    Staged s = staged.computeIfAbsent(loc.target(), k -> new Staged(loc, new ArrayList<>(), new long[1]));
    s.batches().add(b);
    s.size()[0] += b.size();
  }

  private int inFlight(String worker) {
    return inFlight.getOrDefault(worker, 0);
  }

  private boolean mustWait() {
    for (Staged s : staged.values()) {
      if (s.size()[0] >= mergeSize && inFlight(s.location().primary().workerId()) >= window) {
        return true;
      }
    }
    return false;
  }

  private void pump(boolean force) {
    boolean progress = true;
    while (progress) {
      progress = false;
      for (String key : new ArrayList<>(staged.keySet())) {
        Staged s = staged.get(key);
        if (s == null) {
          continue;
        }
        int busy = inFlight(s.location().primary().workerId());
        if (busy < window && (force || busy == 0 || s.size()[0] >= mergeSize)) {
          sendStaged(key, s);
          progress = true;
        }
      }
    }
  }

  private void sendStaged(String key, Staged s) {
    List<OutBatch> taken = new ArrayList<>();
    long size = 0;
    Iterator<OutBatch> it = s.batches().iterator();
    while (it.hasNext()) {
      OutBatch b = it.next();
      if (!taken.isEmpty() && size + b.size() > mergeSize) {
        break;
      }
      taken.add(b);
      size += b.size();
      it.remove();
    }
    s.size()[0] -= size;
    if (s.batches().isEmpty()) {
      staged.remove(key);
    }
    List<OutBatch> batches = new ArrayList<>();
    List<Integer> epochs = new ArrayList<>();
    for (OutBatch b : taken) {
      Location now = shuffle.routing().current(b.partition());
      if (!now.target().equals(key)) {
        stage(b); // revived since it was staged: route it anew
      } else {
        batches.add(b);
        epochs.add(now.epoch());
      }
    }
    if (batches.isEmpty()) {
      return;
    }
    Message m = new Message(s.location(), batches, epochs);
    inFlight.merge(m.worker(), 1, Integer::sum);
    if (!m.location.primary().known()) {
      settle(new Result(m, null, new CroupierException(ErrorCode.UNAVAILABLE,
          "worker " + m.worker() + " is no longer registered")));
      return;
    }
    transmit(m);
  }

  private void transmit(Message m) {
    messages++;
    Location loc = m.location;
    ObjectNode body = shuffle.body().put("incarnation", loc.primary().incarnation());
    ArrayNode pe = body.putArray("batches");
    for (int i = 0; i < m.batches.size(); i++) {
      pe.addArray().add(m.batches.get(i).partition()).add(m.epochs.get(i));
    }
    if (loc.replica() == null) {
      body.putNull("replica");
    } else {
      body.putObject("replica").put("worker_id", loc.replica().workerId())
          .put("url", loc.replica().replicateUrl()).put("incarnation", loc.replica().incarnation());
    }
    ByteBuffer headers = ByteBuffer.allocate(m.batches.size() * io.croupier.proto.BatchHeader.SIZE);
    List<ByteBuffer> payloads = new ArrayList<>(m.batches.size() + 1);
    payloads.add(headers);
    for (OutBatch b : m.batches) {
      headers.put(b.header());
      payloads.add(b.data());
    }
    headers.flip();
    ClientOptions o = shuffle.client().options();
    shuffle.client().rpc().send(loc.primary().pushUrl(), Rpc.PUSH_PORT, MsgType.PUSH, body, payloads, shuffle.key(),
        o.requestTimeout()).whenComplete((reply, err) -> done.add(new Result(m, reply,
            err == null ? null : Rpc.unwrap(err instanceof java.util.concurrent.CompletionException c ? c.getCause() : err,
                loc.primary().pushUrl(), o.requestTimeout()))));
  }

  private void waitOne() {
    if (delayed.isEmpty() && inFlight.values().stream().allMatch(n -> n == 0)) {
      throw new CroupierException(ErrorCode.INTERNAL, "pusher stalled: " + unacked + " batches unacked, nothing in flight");
    }
    long waitMs = shuffle.client().options().requestTimeout().toMillis() * 2 + 10_000;
    if (!delayed.isEmpty()) {
      waitMs = Math.max(0, (delayed.peek().dueNanos - System.nanoTime()) / 1_000_000);
    }
    try {
      Result r = done.poll(waitMs, TimeUnit.MILLISECONDS);
      if (r != null) {
        settle(r);
      } else if (delayed.isEmpty()) {
        throw new CroupierException(ErrorCode.TIMEOUT, "no push reply in time (" + unacked + " batches unacked)");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new CroupierException(ErrorCode.UNAVAILABLE, "interrupted while pushing", e);
    }
    settleReady();
  }

  private void settleReady() {
    Result r;
    while ((r = done.poll()) != null) {
      settle(r);
    }
    long now = System.nanoTime();
    while (!delayed.isEmpty() && delayed.peek().dueNanos <= now) {
      transmit(delayed.poll());
    }
  }

  private void settle(Result r) {
    if (aborted) {
      return;
    }
    Message m = r.message();
    CroupierException err = r.error() != null ? r.error() : r.reply().ok() ? null : Errors.of(r.reply());
    if (err != null && err.code() == ErrorCode.CONGESTED) {
      congested(m, err);
      return;
    }
    inFlight.merge(m.worker(), -1, Integer::sum);
    if (err == null) {
      unacked -= m.batches.size();
      soft.offer(r.reply().body().path("soft_split"), m.worker());
      return;
    }
    switch (err.code()) {
      case STALE_LOCATION, TIMEOUT, UNAVAILABLE, HARD_SPLIT -> relocate(m, err);
      default -> throw err;
    }
  }

  private void congested(Message m, CroupierException err) {
    long now = System.nanoTime();
    if (m.congestedSince < 0) {
      m.congestedSince = now;
    } else if ((now - m.congestedSince) / 1_000_000 > CONGESTION_LIMIT_MS) {
      throw new CroupierException(ErrorCode.CONGESTED, "worker " + m.worker() + " stayed congested for "
          + (now - m.congestedSince) / 1_000_000_000 + " s", err.details());
    }
    m.backoffMs = Math.min(BACKOFF_MAX_MS, Math.max(BACKOFF_MIN_MS, m.backoffMs * 2));
    m.dueNanos = now + m.backoffMs * 1_000_000;
    delayed.add(m);
  }

  private void relocate(Message m, CroupierException err) {
    boolean split = err.code() == ErrorCode.HARD_SPLIT;
    List<String> blamed = blame(m.location, err);
    Map<Integer, Integer> epochOf = new LinkedHashMap<>();
    for (int i = 0; i < m.batches.size(); i++) {
      epochOf.merge(m.batches.get(i).partition(), m.epochs.get(i), Math::max);
    }
    Set<Integer> named = split ? named(err) : null;
    for (Map.Entry<Integer, Integer> e : epochOf.entrySet()) {
      int p = e.getKey();
      if (named != null && !named.isEmpty() && !named.contains(p)) {
        continue; // a HARD_SPLIT names the refused locations: the others are resent where they were
      }
      if (!split) {
        Set<String> f = failedWorkers.computeIfAbsent(p, k -> new TreeSet<>());
        f.add(m.location.primary().workerId());
        if (m.location.replica() != null) {
          f.add(m.location.replica().workerId());
        }
      }
      if (shuffle.routing().current(p).epoch() <= e.getValue()) {
        revive(p, e.getValue(), err, blamed, split);
      }
    }
    for (OutBatch b : m.batches) {
      stage(b);
    }
  }

  private void revive(int p, int epoch, CroupierException err, List<String> blamed, boolean split) {
    Map<Integer, Integer> counts = split ? splitRevives : revives;
    int limit = split ? MAX_SPLIT_REVIVES : maxRevives;
    int n = counts.merge(p, 1, Integer::sum);
    if (n > limit) {
      ObjectNode d = Json.object().put("partition", p).put("last_error", err.code().name());
      failedWorkers.getOrDefault(p, Set.of()).forEach(d.putArray("workers")::add);
      throw new CroupierException(ErrorCode.UNAVAILABLE, "shuffle " + shuffle.appId() + "/" + shuffle.id()
          + " partition " + p + ": pushes failed after " + limit + " revives; last error: " + err.getMessage(), d);
    }
    Location loc = reviver.revive(p, epoch, err.getMessage(), blamed);
    if (loc.epoch() <= epoch) {
      throw new CroupierException(ErrorCode.UNAVAILABLE, "revive of partition " + p + " returned epoch "
          + loc.epoch() + ", not past " + epoch);
    }
  }

  /** The partitions a HARD_SPLIT names ({@code details.partitions}: [[partition, epoch], ...]). */
  private static Set<Integer> named(CroupierException err) {
    Set<Integer> out = new TreeSet<>();
    for (JsonNode pe : err.details().path("partitions")) {
      out.add(pe.isArray() ? pe.path(0).asInt() : pe.asInt());
    }
    return out;
  }

  /** The workers to leave out of the new location. */
  private static List<String> blame(Location loc, CroupierException err) {
    String named = err.details().path("failed_worker").asText("");
    if (!named.isEmpty()) {
      return List.of(named);
    }
    if (err.code() == ErrorCode.TIMEOUT || err.code() == ErrorCode.UNAVAILABLE) {
      return List.of(loc.primary().workerId());
    }
    return List.of();
  }
}
