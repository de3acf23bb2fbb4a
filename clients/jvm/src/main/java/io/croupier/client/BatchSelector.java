package io.croupier.client;

import io.croupier.proto.BatchHeader;
import io.croupier.proto.WinnerRuns;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * Which batches of one partition a reader keeps, and the completeness proof (PROTOCOL §5.3)
 * restricted to a map range {@code [startMap, endMap)}: a batch is kept only when its map is in
 * the range, its attempt is the map's winner, and {@code (map, attempt, batch)} was not kept
 * before. Seals of winners are remembered. Batches of other attempts and of maps outside the
 * range are dropped without a digest check.
 */
final class BatchSelector {
  private final WinnerRuns winners;
  private final int startMap;
  private final int endMap;
  private final Map<Integer, BitSet> seen = new HashMap<>();
  private final Map<Integer, TreeSet<Integer>> seals = new HashMap<>();

  BatchSelector(WinnerRuns winners, int startMap, int endMap) {
    this.winners = winners;
    this.startMap = startMap;
    this.endMap = endMap;
  }

  /** Whether the batch or seal belongs to a winning attempt of a map in the range. */
  boolean wanted(BatchHeader h) {
    int m = h.mapId();
    return m >= startMap && m < endMap && h.attemptId() >= 0 && winners.winner(m) == h.attemptId();
  }

  /** Whether {@link #offer} would keep this data batch. */
  boolean isNew(BatchHeader h) {
    if (h.seal() || !wanted(h)) {
      return false;
    }
    BitSet s = seen.get(h.mapId());
    return s == null || !s.get(h.batchId());
  }

  /** Accounts for one verified batch or seal; true when a data batch is kept (first time). */
  boolean offer(BatchHeader h) {
    if (!wanted(h)) {
      return false;
    }
    if (h.seal()) {
      seals.computeIfAbsent(h.mapId(), k -> new TreeSet<>()).add(h.batchId());
      return false;
    }
    BitSet s = seen.computeIfAbsent(h.mapId(), k -> new BitSet());
    if (s.get(h.batchId())) {
      return false;
    }
    s.set(h.batchId());
    return true;
  }

  /**
   * What is missing: one line per problem, {@code [map, reason]}; empty when complete.
   *
   * @param declared the maps whose winner declared the partition ({@code [lo, hi)} ranges), or
   *     null when the master did not say (then only the maps seen are checked)
   */
  List<Missing> verdict(List<int[]> declared) {
    TreeSet<Integer> maps = new TreeSet<>(seen.keySet());
    maps.addAll(seals.keySet());
    TreeSet<Integer> decl = null;
    if (declared != null) {
      decl = new TreeSet<>();
      for (int[] r : declared) {
        for (int m = Math.max(r[0], startMap); m < Math.min(r[1], endMap); m++) {
          decl.add(m);
        }
      }
      maps.addAll(decl);
    }
    List<Missing> out = new ArrayList<>();
    for (int m : maps) {
      String why = decl != null && !decl.contains(m) ? "sent data but did not declare the partition" : check(m);
      if (why != null) {
        out.add(new Missing(m, why));
      }
    }
    return out;
  }

  private String check(int m) {
    int w = winners.winner(m);
    if (w < 0) {
      return "no winning attempt";
    }
    BitSet ids = seen.getOrDefault(m, new BitSet());
    TreeSet<Integer> counts = seals.get(m);
    if (counts == null || counts.isEmpty()) {
      return "attempt " + w + ": " + ids.cardinality() + " batches but no seal";
    }
    if (counts.size() > 1) {
      return "attempt " + w + ": sealed with " + counts.first() + " and " + counts.higher(counts.first()) + " batches";
    }
    int n = counts.first();
    int have = ids.get(0, n).cardinality();
    if (have < n) {
      return "attempt " + w + ": " + (n - have) + " of " + n + " batches missing (first " + ids.nextClearBit(0) + ")";
    }
    if (ids.length() > n) {
      return "attempt " + w + ": batch " + ids.nextSetBit(n) + " beyond its seal of " + n;
    }
    return null;
  }

  /**
   * One map whose data for the partition is incomplete.
   *
   * @param mapId the map
   * @param reason why
   */
  record Missing(int mapId, String reason) {}
}
