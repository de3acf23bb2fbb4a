package io.croupier.spark;

import org.apache.spark.SparkConf;
import org.apache.spark.shuffle.BlockingShuffleManager;

/** {@link CroupierShuffleManager} for Spark 4.3 and later, which requires a {@code BlockingShuffleManager}. */
public class CroupierBlockingShuffleManager extends CroupierShuffleManager implements BlockingShuffleManager {
  public CroupierBlockingShuffleManager(SparkConf conf, boolean isDriver) {
    super(conf, isDriver);
  }
}
