package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import io.croupier.proto.WinnerRuns;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * What a reader needs of one partition from a committed locations reply (PROTOCOL §4): every
 * epoch's location, the copies the commit failed, the maps that declared it, and the winners.
 *
 * @param partition the partition
 * @param locations every epoch, oldest first
 * @param failedCopies {@code "epoch/worker_id"} of the copies the commit found unusable
 * @param maps the {@code [lo, hi)} ranges of the maps whose winner declared it, or null
 * @param lost the commit's hint that some declared seal is in no surviving copy
 * @param winners the winning attempt of each ended map
 */
record PartitionEntry(int partition, List<Location> locations, Set<String> failedCopies, List<int[]> maps,
    boolean lost, WinnerRuns winners) {

  /** Parses an entry of a GET_LOCATIONS_BATCH reply (or a GET_LOCATIONS reply), with the shared winners. */
  static PartitionEntry parse(JsonNode entry, WinnerRuns winners) {
    List<Location> locs = new ArrayList<>();
    for (JsonNode l : entry.path("locations")) {
      locs.add(Location.parse(l));
    }
    Set<String> failed = new HashSet<>();
    for (JsonNode f : entry.path("failed_copies")) {
      failed.add(f.path(0).asInt() + "/" + f.path(1).asText());
    }
    List<int[]> maps = null;
    JsonNode m = entry.path("maps");
    if (m.isArray()) {
      maps = new ArrayList<>();
      for (JsonNode r : m) {
        maps.add(new int[] {r.path(0).asInt(), r.path(1).asInt()});
      }
    }
    return new PartitionEntry(entry.path("partition").asInt(), locs, failed, maps, entry.path("lost").asBoolean(), winners);
  }

  /** Whether the commit found this copy unusable. */
  boolean failedAtCommit(Location.Copy c) {
    return failedCopies.contains(c.location().epoch() + "/" + c.address().workerId());
  }

  /** Whether some map of {@code [startMap, endMap)} declared the partition (true when unknown). */
  boolean declaresAny(int startMap, int endMap) {
    if (maps == null) {
      return true;
    }
    for (int[] r : maps) {
      if (Math.max(r[0], startMap) < Math.min(r[1], endMap)) {
        return true;
      }
    }
    return false;
  }
}
