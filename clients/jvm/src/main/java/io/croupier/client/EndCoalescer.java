package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The {@code MAPPER_END}s of one executor's concurrent map tasks, sent together: a group commit
 * on the client's side, as the Python client's {@code EndCoalescer} does. The first caller sends
 * its end at once; callers that arrive while it is in flight queue, and when it returns the first
 * of them sends every queued end of its shuffle as one {@code MAPPER_END_BATCH} (at most 1,000
 * entries and about 256 KiB of bitmaps, PROTOCOL §4), then hands on to the next. One task alone
 * pays nothing extra; many pay one request per round trip instead of one each.
 *
 * <p>Each caller gets its own entry's reply or error; an error of the whole call (no leader in
 * time, the client closed) reaches every caller in it. A batch refused whole with {@code
 * BAD_REQUEST} (a master that predates type 43, or a malformed entry) is sent again one end at a
 * time. Thread-safe.
 */
final class EndCoalescer {
  static final int MAX_ENDS = 1000;
  static final int MAX_BYTES = 256 * 1024;
  private static final int ENTRY_BYTES = 48; // an entry's JSON beside its bitmap

  /** Sends one request to the master, signed with {@code key}, and returns its OK body. */
  interface Call {
    ObjectNode call(int msgType, ObjectNode body, byte[] key);
  }

  /** One task's end: the fields of a {@code MAPPER_END}. */
  record End(String appId, long shuffleId, byte[] key, int mapId, int attemptId, int touched, String partitions) {
    boolean sameShuffle(End o) {
      return appId.equals(o.appId) && shuffleId == o.shuffleId && Arrays.equals(key, o.key);
    }

    ObjectNode single() {
      return Json.object().put("app_id", appId).put("shuffle_id", shuffleId).put("map_id", mapId)
          .put("attempt_id", attemptId).put("touched", touched).put("partitions", partitions);
    }
  }

  private static final class Waiter {
    final End end;
    boolean done;
    boolean leads;
    ObjectNode reply;
    CroupierException error;

    Waiter(End end) {
      this.end = end;
    }
  }

  private final Call call;
  private final boolean batching;
  private final int maxEnds;
  private final int maxBytes;
  private final List<Waiter> pending = new ArrayList<>();
  private boolean busy; // a caller is sending: the others queue behind it
  private long requests;

  EndCoalescer(Call call, boolean batching) {
    this(call, batching, MAX_ENDS, MAX_BYTES);
  }

  EndCoalescer(Call call, int maxEnds, int maxBytes) {
    this(call, true, maxEnds, maxBytes);
  }

  /** {@code batching} false: every end is sent alone, at once, by its caller. */
  EndCoalescer(Call call, boolean batching, int maxEnds, int maxBytes) {
    this.call = call;
    this.batching = batching;
    this.maxEnds = maxEnds;
    this.maxBytes = maxBytes;
  }

  /** Ends queued behind the one in flight. */
  synchronized int queued() {
    return pending.size();
  }

  /** Requests sent so far: one per turn ({@code MAPPER_END} or {@code MAPPER_END_BATCH}; the one-by-one resends after a refused batch are not counted). */
  synchronized long requests() {
    return requests;
  }

  /**
   * Sends {@code end} (with whatever else is queued) and returns its {@code MAPPER_END} reply
   * body: {@code {"winner", "won", "all_ended"}}.
   *
   * @throws CroupierException the master refused this entry, or the call failed as a whole
   */
  ObjectNode end(End end) {
    if (!batching) {
      synchronized (this) {
        requests++;
      }
      return call.call(MsgType.MAPPER_END, end.single(), end.key());
    }
    Waiter me = new Waiter(end);
    boolean interrupted = false;
    synchronized (this) {
      pending.add(me);
      boolean leads = !busy;
      busy = true;
      while (!leads && !me.done && !me.leads) {
        try {
          wait();
        } catch (InterruptedException e) {
          interrupted = true;
          if (!me.leads && pending.remove(me)) { // still queued: nobody sends it, so the task may stop
            Thread.currentThread().interrupt();
            throw new CroupierException(ErrorCode.UNAVAILABLE, "interrupted waiting to send MAPPER_END", e);
          }
          // taken into a batch in flight, or about to lead: its outcome is awaited, as a
          // single request's would be (the interrupt is kept for the caller)
        }
      }
    }
    if (!me.done) {
      sendNext();
    }
    if (interrupted) { // kept until now: a leader's send must not fail its batch for it
      Thread.currentThread().interrupt();
    }
    if (me.error != null) {
      throw me.error;
    }
    return me.reply;
  }

  private void sendNext() {
    List<Waiter> batch;
    synchronized (this) {
      batch = take();
      requests++;
    }
    try {
      send(batch);
    } catch (CroupierException e) {
      for (Waiter w : batch) {
        w.error = e;
      }
    } catch (RuntimeException | Error e) {
      CroupierException lost = new CroupierException(ErrorCode.INTERNAL, "MAPPER_END not sent: " + e, e);
      for (Waiter w : batch) {
        w.error = lost;
      }
      throw e;
    } finally {
      synchronized (this) {
        for (Waiter w : batch) {
          w.done = true;
        }
        if (pending.isEmpty()) {
          busy = false;
        } else {
          pending.get(0).leads = true;
        }
        notifyAll();
      }
    }
  }

  /** The first queued end and the next ones of its shuffle, within the caps (lock held). */
  private List<Waiter> take() {
    End first = pending.get(0).end;
    List<Waiter> batch = new ArrayList<>();
    List<Waiter> rest = new ArrayList<>();
    int size = 0;
    for (Waiter w : pending) {
      int cost = w.end.partitions().length() + ENTRY_BYTES;
      boolean fits = batch.isEmpty() || (batch.size() < maxEnds && size + cost <= maxBytes);
      if (fits && w.end.sameShuffle(first)) {
        batch.add(w);
        size += cost;
      } else {
        rest.add(w);
      }
    }
    pending.clear();
    pending.addAll(rest);
    return batch;
  }

  private void send(List<Waiter> batch) {
    End first = batch.get(0).end;
    if (batch.size() == 1) {
      batch.get(0).reply = call.call(MsgType.MAPPER_END, first.single(), first.key());
      return;
    }
    ObjectNode body = Json.object().put("app_id", first.appId()).put("shuffle_id", first.shuffleId());
    ArrayNode ends = body.putArray("ends");
    for (Waiter w : batch) {
      End e = w.end;
      ends.addArray().add(e.mapId()).add(e.attemptId()).add(e.touched()).add(e.partitions());
    }
    ObjectNode reply;
    try {
      reply = call.call(MsgType.MAPPER_END_BATCH, body, first.key());
    } catch (CroupierException e) {
      if (e.code() != ErrorCode.BAD_REQUEST) {
        throw e;
      }
      // refused whole: a master that predates MAPPER_END_BATCH, or a malformed entry
      for (Waiter w : batch) {
        single(w);
      }
      return;
    }
    JsonNode results = reply.path("results");
    if (!results.isArray() || results.size() != batch.size()) {
      throw new CroupierException(ErrorCode.INTERNAL,
          "a MAPPER_END_BATCH reply without one result per entry (" + batch.size() + "): " + reply);
    }
    for (int i = 0; i < batch.size(); i++) {
      JsonNode r = results.get(i);
      JsonNode error = r.path("error");
      if (error.isObject()) {
        JsonNode details = error.path("details");
        batch.get(i).error = new CroupierException(ErrorCode.ofStatus(error.path("status").asInt(-1)),
            error.path("message").asText(""), details.isObject() ? details : null);
      } else if (r.isObject()) {
        batch.get(i).reply = (ObjectNode) r;
      } else {
        batch.get(i).error = new CroupierException(ErrorCode.INTERNAL, "a MAPPER_END_BATCH result that is not an object: " + r);
      }
    }
  }

  private void single(Waiter w) {
    try {
      w.reply = call.call(MsgType.MAPPER_END, w.end.single(), w.end.key());
    } catch (CroupierException e) {
      w.error = e;
    }
  }
}
