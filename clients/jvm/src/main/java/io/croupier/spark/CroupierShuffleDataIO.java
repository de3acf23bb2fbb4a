package io.croupier.spark;

import java.util.Collections;
import java.util.Map;
import org.apache.spark.SparkConf;
import org.apache.spark.shuffle.api.ShuffleDataIO;
import org.apache.spark.shuffle.api.ShuffleDriverComponents;
import org.apache.spark.shuffle.api.ShuffleExecutorComponents;
import org.apache.spark.shuffle.sort.io.LocalDiskShuffleDataIO;

/**
 * {@code spark.shuffle.sort.io.plugin.class}: tells Spark that shuffle data is stored reliably
 * outside the executors. Then dynamic allocation runs without an external shuffle service or
 * shuffle tracking, and a lost executor's map outputs are kept (no map rerun). Executor
 * components are Spark's local-disk ones (Croupier shuffles never use them).
 */
public class CroupierShuffleDataIO implements ShuffleDataIO {
  private final SparkConf conf;

  public CroupierShuffleDataIO(SparkConf conf) {
    this.conf = conf;
  }

  @Override
  public ShuffleExecutorComponents executor() {
    return new LocalDiskShuffleDataIO(conf).executor();
  }

  @Override
  public ShuffleDriverComponents driver() {
    return new ShuffleDriverComponents() {
      @Override
      public Map<String, String> initializeApplication() {
        return Collections.emptyMap();
      }

      @Override
      public void cleanupApplication() {}

      @Override
      public boolean supportsReliableStorage() {
        return true;
      }
    };
  }
}
