package io.croupier.spark;

import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleHandle;
import org.apache.spark.shuffle.ShuffleManager;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.shuffle.ShuffleWriter;
import org.apache.spark.shuffle.sort.SortShuffleManager;

/**
 * A Spark {@code ShuffleManager} that shuffles through Croupier, for Spark 4.0 to 4.2. Spark 4.3
 * takes only a {@code BlockingShuffleManager}: use {@link CroupierBlockingShuffleManager} there
 * ({@code croupier spark conf} picks the right one).
 *
 * <p>Settings: {@value #MASTER_KEY} (the master's URL, required), {@value #TENANT_TOKEN_KEY},
 * {@value #BATCH_KEY} (the uncompressed bytes of one pushed batch, default 256k),
 * {@value #END_BATCHING_KEY} (tasks ending together share a MAPPER_END_BATCH, default true).
 */
public class CroupierShuffleManager implements ShuffleManager {
  /** The Croupier master's URL. */
  public static final String MASTER_KEY = "spark.croupier.master";
  /** The tenant's token, when the master has a tenants file. */
  public static final String TENANT_TOKEN_KEY = "spark.croupier.tenantToken";
  /** Uncompressed bytes buffered per partition before a batch is pushed. */
  public static final String BATCH_KEY = "spark.croupier.push.batchSize";
  /** Whether an executor's tasks that end together send one MAPPER_END_BATCH (default true). */
  public static final String END_BATCHING_KEY = "spark.croupier.mapperEnd.batching";

  private final SparkConf conf;
  private final boolean isDriver;
  private final DriverContext driver;
  private volatile SortShuffleManager sort;

  public CroupierShuffleManager(SparkConf conf, boolean isDriver) {
    this.conf = conf;
    this.isDriver = isDriver;
    this.driver = isDriver ? new DriverContext(conf) : null;
    if (conf.get(MASTER_KEY, "").isEmpty()) {
      throw new IllegalArgumentException(
          MASTER_KEY + " is not set: give the Croupier master's URL (croupier spark conf --master URL)");
    }
  }

  @Override
  public <K, V, C> ShuffleHandle registerShuffle(int shuffleId, ShuffleDependency<K, V, C> dependency) {
    if (driver == null) {
      throw new IllegalStateException("registerShuffle on an executor");
    }
    return driver.register(shuffleId, dependency);
  }

  @Override
  @SuppressWarnings("unchecked")
  public <K, V> ShuffleWriter<K, V> getWriter(
      ShuffleHandle handle, long mapId, TaskContext context, ShuffleWriteMetricsReporter metrics) {
    int batch = (int) Math.min(conf.getSizeAsBytes(BATCH_KEY, "256k"), 64L << 20);
    return new CroupierShuffleWriter<>(
        (CroupierShuffleHandle<K, V, Object>) handle, mapId, context, metrics, ExecutorContext.get(conf), batch);
  }

  @Override
  @SuppressWarnings("unchecked")
  public <K, C> ShuffleReader<K, C> getReader(
      ShuffleHandle handle,
      int startMapIndex,
      int endMapIndex,
      int startPartition,
      int endPartition,
      TaskContext context,
      ShuffleReadMetricsReporter metrics) {
    return new CroupierShuffleReader<>((CroupierShuffleHandle<K, ?, C>) handle, startMapIndex, endMapIndex,
        startPartition, endPartition, context, metrics, ExecutorContext.get(conf));
  }

  @Override
  public boolean unregisterShuffle(int shuffleId) {
    if (driver != null) {
      driver.unregister(shuffleId);
    }
    SortShuffleManager s = sort;
    if (s != null) {
      s.unregisterShuffle(shuffleId);
    }
    return true;
  }

  /**
   * Spark's block manager still asks for a resolver (4.0-4.2: part of {@code ShuffleManager};
   * 4.3: of {@code BlockingShuffleManager}); Croupier shuffles have no local blocks, so a lazily
   * created {@code SortShuffleManager}'s resolver answers.
   */
  public ShuffleBlockResolver shuffleBlockResolver() {
    SortShuffleManager s = sort;
    if (s == null) {
      synchronized (this) {
        if (sort == null) {
          sort = new SortShuffleManager(conf);
        }
        s = sort;
      }
    }
    return s.shuffleBlockResolver();
  }

  @Override
  public void stop() {
    if (driver != null) {
      driver.stop();
    }
    ExecutorContext.close();
    SortShuffleManager s = sort;
    if (s != null) {
      s.stop();
    }
  }

  boolean isDriver() {
    return isDriver;
  }
}
