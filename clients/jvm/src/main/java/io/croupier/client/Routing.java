package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.HashMap;
import java.util.Map;

/**
 * A shuffle's current location of every partition (PROTOCOL §4 shuffle summary): epoch 0 on
 * {@code pairs[p % len(pairs)]}, and the newest location of each revived partition. Shared by a
 * shuffle's writers, so a revive seen by one helps the others. Thread-safe.
 */
final class Routing {
  private final String[][] pairs;
  private final Map<String, WorkerAddress> workers = new HashMap<>();
  private final Map<Integer, Location> revived = new HashMap<>();

  /** From a REGISTER_SHUFFLE or GET_SHUFFLE reply (with {@code workers} and {@code revived}). */
  Routing(JsonNode summary) {
    JsonNode ps = summary.path("pairs");
    pairs = new String[ps.size()][];
    for (int i = 0; i < ps.size(); i++) {
      JsonNode r = ps.get(i).path(1);
      pairs[i] = new String[] {ps.get(i).path(0).asText(), r.isNull() || r.isMissingNode() ? null : r.asText()};
    }
    summary.path("workers").properties().forEach(e -> workers.put(e.getKey(), WorkerAddress.parse(e.getValue())));
    for (JsonNode r : summary.path("revived")) {
      JsonNode rep = r.path(3);
      revived.put(r.path(0).asInt(), Location.of(r.path(1).asInt(), r.path(2).asText(),
          rep.isNull() ? null : rep.asText(), workers));
    }
    if (pairs.length == 0) {
      throw new io.croupier.proto.CroupierException(io.croupier.proto.ErrorCode.INTERNAL, "a shuffle summary without pairs");
    }
  }

  /** The newest location this process knows for {@code partition}. */
  synchronized Location current(int partition) {
    Location loc = revived.get(partition);
    if (loc != null) {
      return loc;
    }
    String[] pair = pairs[partition % pairs.length];
    return Location.of(0, pair[0], pair[1], workers);
  }

  /** Records a newer location; returns the newest known. */
  synchronized Location update(int partition, Location loc) {
    Location old = revived.get(partition);
    if (old != null && old.epoch() >= loc.epoch()) {
      return old;
    }
    if (loc.epoch() == 0 && old == null) {
      return current(partition);
    }
    revived.put(partition, loc);
    workers.put(loc.primary().workerId(), loc.primary());
    if (loc.replica() != null) {
      workers.put(loc.replica().workerId(), loc.replica());
    }
    return loc;
  }
}
