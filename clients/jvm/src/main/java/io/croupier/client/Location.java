package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * One epoch of a partition: its primary and its replica (null without replication).
 *
 * @param epoch the epoch
 * @param primary the primary's address
 * @param replica the replica's address, or null
 */
record Location(int epoch, WorkerAddress primary, WorkerAddress replica) {

  /** Parses a locations reply entry {@code {"epoch", "primary", "replica"}}. */
  static Location parse(JsonNode loc) {
    JsonNode r = loc.path("replica");
    return new Location(loc.path("epoch").asInt(), WorkerAddress.parse(loc.path("primary")),
        r.isObject() ? WorkerAddress.parse(r) : null);
  }

  /** From ids resolved through a summary's {@code workers}. */
  static Location of(int epoch, String primary, String replica, Map<String, WorkerAddress> workers) {
    WorkerAddress p = workers.getOrDefault(primary, WorkerAddress.unknown(primary));
    WorkerAddress r = replica == null ? null : workers.getOrDefault(replica, WorkerAddress.unknown(replica));
    return new Location(epoch, p, r);
  }

  /** The copies in read order: the primary, then the replica. */
  List<Copy> copies() {
    List<Copy> out = new ArrayList<>(2);
    out.add(new Copy(this, "primary", primary));
    if (replica != null) {
      out.add(new Copy(this, "replica", replica));
    }
    return out;
  }

  /** The push target: same primary and replica (ids and incarnations) share a PUSH. */
  String target() {
    return primary.workerId() + "/" + primary.incarnation() + "|"
        + (replica == null ? "-" : replica.workerId() + "/" + replica.incarnation());
  }

  /**
   * One copy of a location.
   *
   * @param location the location
   * @param role {@code primary} or {@code replica}
   * @param address its worker
   */
  record Copy(Location location, String role, WorkerAddress address) {}
}
