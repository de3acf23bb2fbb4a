package io.croupier.spark;

import java.lang.reflect.Array;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import org.apache.spark.TaskContext;
import org.apache.spark.scheduler.MapStatus;
import org.apache.spark.serializer.Serializer;
import org.apache.spark.storage.BlockManagerId;
import org.apache.spark.util.collection.ExternalSorter;
import scala.Option;

/**
 * What differs between Spark 4.0 and 4.3, resolved once by reflection, and a few helpers.
 *
 * <ul>
 *   <li>{@code MapStatus.apply} took 3 arguments before 4.1 and 4 since (SPARK-51756: a checksum).
 *   <li>{@code ExternalSorter}'s constructor gained row-based checksums in 4.3.
 * </ul>
 */
final class SparkCompat {
  /**
   * The location of every map output of Croupier shuffles: one fixed, fictitious block manager.
   * Spark then never drops a Croupier output because an executor died (only {@code
   * MapOutputTrackerMaster.unregisterMapOutput(shuffle, map, LOCATION)}, from the driver's
   * recovery endpoint, does), reducers get no locality preference for a live host (no locality
   * wait), and the recovery endpoint can unregister exactly one map by naming this location.
   */
  static final BlockManagerId LOCATION =
      BlockManagerId.apply("croupier", "croupier.invalid", 7337, Option.empty());

  private static final Method MAP_STATUS = findMapStatus();
  private static final Constructor<?> SORTER = findSorter();

  private SparkCompat() {}

  private static Method findMapStatus() {
    for (Method m : MapStatus.class.getMethods()) {
      if (m.getName().equals("apply") && m.getParameterCount() == 4
          && m.getParameterTypes()[0] == BlockManagerId.class) {
        return m;
      }
    }
    for (Method m : MapStatus.class.getMethods()) {
      if (m.getName().equals("apply") && m.getParameterCount() == 3
          && m.getParameterTypes()[0] == BlockManagerId.class) {
        return m;
      }
    }
    throw new IllegalStateException("this Spark has no MapStatus.apply(BlockManagerId, long[], long[, long])");
  }

  private static Constructor<?> findSorter() {
    Constructor<?> best = null;
    for (Constructor<?> c : ExternalSorter.class.getConstructors()) {
      Class<?>[] p = c.getParameterTypes();
      if (p.length >= 5 && p[0] == TaskContext.class && p[4] == Serializer.class
          && (best == null || p.length < best.getParameterCount())) {
        best = c;
      }
    }
    if (best == null) {
      throw new IllegalStateException("this Spark's ExternalSorter has no known constructor");
    }
    return best;
  }

  /** {@code MapStatus.apply(LOCATION, sizes, mapTaskId[, checksum 0])}. */
  static MapStatus mapStatus(long[] sizes, long mapTaskId) {
    try {
      if (MAP_STATUS.getParameterCount() == 4) {
        return (MapStatus) MAP_STATUS.invoke(null, LOCATION, sizes, mapTaskId, 0L);
      }
      return (MapStatus) MAP_STATUS.invoke(null, LOCATION, sizes, mapTaskId);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("MapStatus.apply failed", e);
    }
  }

  /** {@code new ExternalSorter(context, aggregator, partitioner, ordering, serializer[, no checksums])}. */
  @SuppressWarnings({"rawtypes"})
  static ExternalSorter sorter(
      TaskContext context, Option aggregator, Option partitioner, Option ordering, Serializer ser) {
    Class<?>[] types = SORTER.getParameterTypes();
    Object[] args = new Object[types.length];
    args[0] = context;
    args[1] = aggregator;
    args[2] = partitioner;
    args[3] = ordering;
    args[4] = ser;
    for (int i = 5; i < types.length; i++) {
      args[i] = types[i].isArray() ? Array.newInstance(types[i].getComponentType(), 0) : null;
    }
    try {
      return (ExternalSorter) SORTER.newInstance(args);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("new ExternalSorter failed", e);
    }
  }

  /** Throws a checked exception (FetchFailedException) from a method that cannot declare it. */
  @SuppressWarnings("unchecked")
  static <E extends Throwable> RuntimeException sneakyThrow(Throwable t) throws E {
    throw (E) t;
  }
}
