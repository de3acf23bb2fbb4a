package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import io.croupier.proto.CroupierException;
import io.croupier.proto.ErrorCode;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

/**
 * {@code DATA_LOST}: every copy of some data is gone (PROTOCOL §3, §5.3). {@link #pairs()} names
 * the (map, partition) pairs whose data is missing, {@link #mapIds()} the maps to rerun.
 */
public final class DataLostException extends CroupierException {
  private static final long serialVersionUID = 1L;
  private final int[][] pairs;
  private final List<String> workers;

  /** A loss of {@code pairs} ({@code [map, partition]}) on {@code workers}. */
  public DataLostException(String message, int[][] pairs, List<String> workers, JsonNode details) {
    super(ErrorCode.DATA_LOST, message, details);
    this.pairs = pairs;
    this.workers = List.copyOf(workers);
  }

  /** A {@code DATA_LOST} reply of a server, its pairs read from {@code details.maps}. */
  public static DataLostException fromReply(String message, JsonNode details) {
    List<int[]> pairs = new ArrayList<>();
    for (JsonNode p : details.path("maps")) {
      pairs.add(new int[] {p.path(0).asInt(), p.path(1).asInt()});
    }
    List<String> workers = new ArrayList<>();
    for (JsonNode w : details.path("workers")) {
      workers.add(w.asText());
    }
    return new DataLostException(message, pairs.toArray(new int[0][]), workers, details);
  }

  /** The {@code [map, partition]} pairs whose data is missing (may be empty when unknown). */
  public int[][] pairs() {
    return pairs.clone();
  }

  /** The maps named in {@link #pairs()}, sorted, once each. */
  public int[] mapIds() {
    TreeSet<Integer> ids = new TreeSet<>();
    for (int[] p : pairs) {
      ids.add(p[0]);
    }
    return ids.stream().mapToInt(Integer::intValue).toArray();
  }

  /** The partitions named in {@link #pairs()}, sorted, once each. */
  public int[] partitions() {
    TreeSet<Integer> ids = new TreeSet<>();
    for (int[] p : pairs) {
      ids.add(p[1]);
    }
    return ids.stream().mapToInt(Integer::intValue).toArray();
  }

  /** The workers whose copies failed. */
  public List<String> workers() {
    return workers;
  }
}
