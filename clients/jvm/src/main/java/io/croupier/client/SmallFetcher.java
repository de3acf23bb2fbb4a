package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import io.croupier.proto.MsgType;
import io.croupier.proto.Reply;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * {@code FETCH_SMALL} (PROTOCOL §5.2): the first copy of every location of a group of partitions,
 * asked of each worker in requests of up to 256 locations. A small committed copy comes whole;
 * others come back {@code skipped} and are read with OPEN_STREAM as usual. Results are looked up
 * by copy with {@link #result}.
 */
final class SmallFetcher {
  private static final int MAX_LOCATIONS = 256;

  /** The outcome for one copy: {@code data} when OK; else absent, failed, or null (read it the usual way). */
  record Result(byte[] data, boolean absent, String error) {}

  private record Wanted(int partition, Location.Copy copy) {}

  private record Request(List<Wanted> copies, CompletableFuture<Reply> reply) {}

  private final Shuffle shuffle;
  private final Map<String, Result> results = new HashMap<>();

  SmallFetcher(Shuffle shuffle) {
    this.shuffle = shuffle;
  }

  static String key(int partition, Location.Copy c) {
    return partition + "/" + c.location().epoch() + "/" + c.role() + "/" + c.address().workerId() + "/"
        + c.address().incarnation();
  }

  /** What FETCH_SMALL said of this copy, or null when it was not asked or was skipped. */
  Result result(int partition, Location.Copy c) {
    return results.remove(key(partition, c));
  }

  /** Asks for the first readable copy of every location of {@code entries}, and waits for the replies. */
  void fetch(List<PartitionEntry> entries) throws InterruptedException {
    Map<String, List<Wanted>> byWorker = new LinkedHashMap<>();
    for (PartitionEntry e : entries) {
      for (Location loc : e.locations()) {
        for (Location.Copy c : loc.copies()) {
          if (c.address().known() && !c.address().lost() && !e.failedAtCommit(c)) {
            byWorker.computeIfAbsent(c.address().fetchUrl() + "|" + c.address().incarnation(), k -> new ArrayList<>())
                .add(new Wanted(e.partition(), c));
            break;
          }
        }
      }
    }
    List<Request> pending = new ArrayList<>();
    for (List<Wanted> copies : byWorker.values()) {
      for (int i = 0; i < copies.size(); i += MAX_LOCATIONS) {
        List<Wanted> part = copies.subList(i, Math.min(copies.size(), i + MAX_LOCATIONS));
        pending.add(new Request(part, send(part)));
      }
    }
    for (Request p : pending) {
      settle(p.copies(), p.reply());
    }
  }

  private CompletableFuture<Reply> send(List<Wanted> copies) {
    Location.Copy first = copies.get(0).copy();
    ObjectNode body = shuffle.body().put("incarnation", first.address().incarnation());
    ArrayNode locs = body.putArray("locations");
    for (Wanted w : copies) {
      locs.addArray().add(w.partition()).add(w.copy().location().epoch()).add(w.copy().role());
    }
    Duration timeout = shuffle.client().options().fetchTimeout();
    return shuffle.client().rpc().send(first.address().fetchUrl(), Rpc.SMALL_PORT, MsgType.FETCH_SMALL, body,
        List.of(), shuffle.key(), timeout);
  }

  private void settle(List<Wanted> copies, CompletableFuture<Reply> f) throws InterruptedException {
    Reply r;
    try {
      r = Rpc.await(f, "FETCH_SMALL", shuffle.client().options().fetchTimeout());
    } catch (CroupierException e) {
      if (Thread.interrupted()) {
        throw new InterruptedException();
      }
      if (e.code() == ErrorCode.TIMEOUT) { // an unreachable copy; other errors: read the usual way
        copies.forEach(w -> results.put(key(w.partition(), w.copy()), new Result(null, false, e.getMessage())));
      }
      return;
    }
    if (!r.ok()) {
      return; // an older worker, STALE_LOCATION...: read every copy the usual way
    }
    JsonNode entries = r.body().path("locations");
    int payload = 0;
    for (int i = 0; i < copies.size() && i < entries.size(); i++) {
      JsonNode e = entries.get(i);
      String status = e.path("status").asText();
      String k = key(copies.get(i).partition(), copies.get(i).copy());
      if ("ok".equals(status) && payload < r.payloads().size()) {
        results.put(k, new Result(r.payloads().get(payload++), false, null));
      } else if ("UNKNOWN_SHUFFLE".equals(status) || "NOT_COMMITTED".equals(status)) {
        results.put(k, new Result(null, true, status + ": " + e.path("message").asText()));
      }
    }
  }
}
