package io.croupier.client;

/**
 * A registered shuffle: makes writers and readers. Thread-safe; its writers share one view of
 * the partitions' locations.
 */
public final class Shuffle {
  Shuffle() {}

  /** The shuffle id. */
  public long id() {
    throw new UnsupportedOperationException("not yet");
  }

  /** The app id. */
  public String appId() {
    throw new UnsupportedOperationException("not yet");
  }

  /**
   * The string another process opens this shuffle with: {@code
   * croupier-shuffle-v1:<app_id>:<shuffle_id>:<key>}. A credential.
   */
  public String handle() {
    throw new UnsupportedOperationException("not yet");
  }

  /** The map count. */
  public int numMappers() {
    throw new UnsupportedOperationException("not yet");
  }

  /** The partition count. */
  public int numPartitions() {
    throw new UnsupportedOperationException("not yet");
  }

  /** A writer for one attempt of map {@code mapId} (attempt ids: any of 0..2^31-1). */
  public MapWriter writer(int mapId, int attemptId) {
    throw new UnsupportedOperationException("not yet");
  }

  /**
   * Batches of the winning attempts of maps [startMap, endMap) for partitions [startPartition,
   * endPartition): each batch exactly once, in no guaranteed order; completeness proven over
   * exactly that map range; waits for the commit; throws {@link DataLostException} naming the
   * (map, partition) pairs when something is gone from every copy. {@code endMap} may exceed
   * {@link #numMappers()} (Spark passes {@code Int.MaxValue}).
   */
  public BatchReader reader(int startMap, int endMap, int startPartition, int endPartition) {
    throw new UnsupportedOperationException("not yet");
  }

  /** {@code GET_LOST_MAPS}. */
  public LostMaps lostMaps() {
    throw new UnsupportedOperationException("not yet");
  }

  /**
   * {@code RERUN_MAPS}: reopens the committed shuffle for new attempts of exactly {@code
   * mapIds}; returns whether the rerun started (false for a repeat while they still run).
   */
  public boolean rerunMaps(int[] mapIds) {
    throw new UnsupportedOperationException("not yet");
  }

  /** Unregisters the shuffle; returns whether it existed. */
  public boolean unregister() {
    throw new UnsupportedOperationException("not yet");
  }
}
