package io.croupier.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.croupier.proto.Handles;
import io.croupier.proto.Json;
import io.croupier.proto.MsgType;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

/**
 * A registered shuffle: makes writers and readers. Thread-safe; its writers share one view of
 * the partitions' locations.
 */
public final class Shuffle {
  private final CroupierClient client;
  private final String appId;
  private final long shuffleId;
  private final byte[] key;
  private final int numMappers;
  private final int numPartitions;
  private volatile Routing routing;

  Shuffle(CroupierClient client, JsonNode summary, byte[] key) {
    this.client = client;
    this.appId = summary.path("app_id").asText();
    this.shuffleId = summary.path("shuffle_id").asLong();
    this.numMappers = summary.path("num_mappers").asInt();
    this.numPartitions = summary.path("num_partitions").asInt();
    this.key = key;
    this.routing = new Routing(summary);
  }

  static Shuffle open(CroupierClient client, String appId, long shuffleId, byte[] key) {
    ObjectNode body = Json.object().put("app_id", appId).put("shuffle_id", shuffleId);
    return new Shuffle(client, client.master().call(MsgType.GET_SHUFFLE, body, key), key);
  }

  /** The shuffle id. */
  public long id() {
    return shuffleId;
  }

  /** The app id. */
  public String appId() {
    return appId;
  }

  /**
   * The string another process opens this shuffle with: {@code
   * croupier-shuffle-v1:<app_id>:<shuffle_id>:<key>}. A credential: never log it.
   */
  public String handle() {
    return Handles.shuffle(appId, shuffleId, key);
  }

  /** The map count. */
  public int numMappers() {
    return numMappers;
  }

  /** The partition count. */
  public int numPartitions() {
    return numPartitions;
  }

  /** A writer for one attempt of map {@code mapId} (attempt ids: any of 0..2^31-1). */
  public MapWriter writer(int mapId, int attemptId) {
    if (mapId < 0 || mapId >= numMappers) {
      throw new IllegalArgumentException("map_id " + mapId + " is out of range 0.." + (numMappers - 1));
    }
    if (attemptId < 0) {
      throw new IllegalArgumentException("attempt_id " + attemptId + " is negative");
    }
    return new MapWriter(this, mapId, attemptId);
  }

  /**
   * Batches of the winning attempts of maps [startMap, endMap) for partitions [startPartition,
   * endPartition): each batch exactly once, in no guaranteed order; completeness proven over
   * exactly that map range; waits for the commit; throws {@link DataLostException} naming the
   * (map, partition) pairs when something is gone from every copy. {@code endMap} may exceed
   * {@link #numMappers()} (Spark passes {@code Int.MaxValue}). Close it when done.
   */
  public BatchReader reader(int startMap, int endMap, int startPartition, int endPartition) {
    if (startPartition < 0 || endPartition > numPartitions || startPartition > endPartition) {
      throw new IllegalArgumentException("partitions [" + startPartition + ", " + endPartition
          + ") are not within 0.." + numPartitions);
    }
    if (startMap < 0 || startMap > endMap) {
      throw new IllegalArgumentException("maps [" + startMap + ", " + endMap + ") are not a range");
    }
    return new RangeReader(this, Math.min(startMap, numMappers), Math.min(endMap, numMappers),
        startPartition, endPartition);
  }

  /** {@code GET_LOST_MAPS}. */
  public LostMaps lostMaps() {
    ObjectNode r = master(MsgType.GET_LOST_MAPS, body());
    return new LostMaps(r.path("num_mappers").asInt(), r.path("committed").asBoolean(), ranges(r.path("lost")),
        ranges(r.path("suspect")), ranges(r.path("rerunning")), ranges(r.path("rerun")));
  }

  private static List<int[]> ranges(JsonNode arr) {
    List<int[]> out = new ArrayList<>();
    for (JsonNode r : arr) {
      int[] v = new int[r.size()];
      for (int i = 0; i < v.length; i++) {
        v[i] = r.get(i).asInt();
      }
      out.add(v);
    }
    return out;
  }

  /**
   * {@code RERUN_MAPS}: reopens the committed shuffle for new attempts of exactly {@code
   * mapIds}; returns whether the rerun started (false for a repeat while they still run). Write
   * each map again with a new attempt id.
   */
  public boolean rerunMaps(int[] mapIds) {
    ArrayNode maps = Json.array();
    new TreeSet<Integer>(java.util.Arrays.stream(mapIds).boxed().toList()).forEach(maps::add);
    ObjectNode body = body();
    body.set("maps", maps);
    ObjectNode r = master(MsgType.RERUN_MAPS, body);
    refreshRouting();
    return r.path("started").asBoolean();
  }

  /** Unregisters the shuffle; returns whether it existed. */
  public boolean unregister() {
    return master(MsgType.UNREGISTER_SHUFFLE, body()).path("changed").asBoolean();
  }

  /** The master's summary of the shuffle ({@code GET_SHUFFLE}), as JSON. */
  public JsonNode summary() {
    return master(MsgType.GET_SHUFFLE, body());
  }

  /** Reloads the locations from the master (after a rerun: the new epochs). */
  void refreshRouting() {
    routing = new Routing(summary());
  }

  ObjectNode body() {
    return Json.object().put("app_id", appId).put("shuffle_id", shuffleId);
  }

  ObjectNode master(int type, ObjectNode body) {
    return client.master().call(type, body, key);
  }

  CroupierClient client() {
    return client;
  }

  Routing routing() {
    return routing;
  }

  byte[] key() {
    return key;
  }
}
