package io.croupier.spark;

import org.apache.spark.ShuffleDependency;
import org.apache.spark.shuffle.BaseShuffleHandle;

/**
 * The handle Spark ships to every map and reduce task of a shuffle: the master URL, the app's
 * handle (its id and key: a credential, so run shared clusters with {@code spark.authenticate})
 * and the Croupier shuffle of the current generation.
 *
 * <p>A shuffle starts at generation 0 (Croupier shuffle id = Spark shuffle id). A full rerun of
 * an indeterminate map stage moves it to a new Croupier shuffle; the driver's recovery endpoint
 * then updates {@link #shuffleHandle()} of the driver's copy, which every task binary serialized
 * afterwards carries; tasks also ask the endpoint, so a stage attempt never mixes generations.
 */
public final class CroupierShuffleHandle<K, V, C> extends BaseShuffleHandle<K, V, C> {
  private static final long serialVersionUID = 1L;

  private final String masterUrl;
  private final String appHandle;
  private final int numMappers;
  private final int numPartitions;
  private volatile String shuffleHandle;

  CroupierShuffleHandle(
      int shuffleId,
      ShuffleDependency<K, V, C> dependency,
      String masterUrl,
      String appHandle,
      String shuffleHandle,
      int numMappers,
      int numPartitions) {
    super(shuffleId, dependency);
    this.masterUrl = masterUrl;
    this.appHandle = appHandle;
    this.shuffleHandle = shuffleHandle;
    this.numMappers = numMappers;
    this.numPartitions = numPartitions;
  }

  /** The master URL. */
  public String masterUrl() {
    return masterUrl;
  }

  /** The app's handle, {@code croupier-app-v1:<app_id>:<key>}. */
  public String appHandle() {
    return appHandle;
  }

  /** The current generation's Croupier shuffle handle; null when the map side has no partition. */
  public String shuffleHandle() {
    return shuffleHandle;
  }

  void shuffleHandle(String handle) {
    this.shuffleHandle = handle;
  }

  /** The number of map tasks (the map side RDD's partitions). */
  public int numMappers() {
    return numMappers;
  }

  /** The number of reduce partitions. */
  public int numPartitions() {
    return numPartitions;
  }

  @Override
  public String toString() {
    return "CroupierShuffleHandle(" + shuffleId() + ", " + numMappers + "x" + numPartitions + ")";
  }
}
