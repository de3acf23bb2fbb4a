package io.croupier.client;

import java.util.List;
import java.util.TreeSet;

/**
 * The master's view of a shuffle's lost data ({@code GET_LOST_MAPS}, PROTOCOL §4.2).
 *
 * @param numMappers the shuffle's map count
 * @param committed whether the shuffle is committed (false during a rerun)
 * @param lost {@code [partition, lo, hi]}: winning maps lo..hi-1 of partition are on no live copy
 * @param suspect the same for copies on workers that restarted since
 * @param rerunning {@code [lo, hi]} ranges of maps reopened and not ended again
 * @param rerun {@code [lo, hi]} ranges of every map ever rerun
 */
public record LostMaps(
    int numMappers,
    boolean committed,
    List<int[]> lost,
    List<int[]> suspect,
    List<int[]> rerunning,
    List<int[]> rerun) {

  /** The ids of the maps lost or suspect, sorted, once each: what {@code rerunMaps} accepts. */
  public int[] mapIds() {
    TreeSet<Integer> ids = new TreeSet<>();
    for (List<int[]> l : List.of(lost, suspect)) {
      for (int[] r : l) {
        for (int m = r[1]; m < r[2]; m++) {
          ids.add(m);
        }
      }
    }
    return ids.stream().mapToInt(Integer::intValue).toArray();
  }
}
