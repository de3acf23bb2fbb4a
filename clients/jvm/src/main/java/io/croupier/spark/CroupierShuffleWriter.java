package io.croupier.spark;

import io.croupier.client.MapWriter;
import io.croupier.client.Shuffle;
import java.io.IOException;
import org.apache.spark.Partitioner;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.scheduler.MapStatus;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.shuffle.ShuffleWriter;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.Product2;
import scala.collection.Iterator;

/**
 * Writes one map task's output to Croupier: map id = the task's partition, attempt id =
 * {@code (stageAttemptNumber << 16) | attemptNumber} (unique across stage retries and
 * speculation). Records are combined on the map side when the dependency asks for it, serialized
 * with the dependency's serializer and pushed in self-contained compressed batches ({@link
 * PartitionBuffers}). {@code MAPPER_END} is sent at the end of {@link #write}; a losing attempt
 * (another attempt of the map won, or the shuffle was committed without it) is a success:
 * readers read the winner. {@link #stop stop(false)} aborts: no {@code MAPPER_END}.
 */
final class CroupierShuffleWriter<K, V, C> extends ShuffleWriter<K, V> {
  private static final Logger LOG = LoggerFactory.getLogger(CroupierShuffleWriter.class);

  private final CroupierShuffleHandle<K, V, C> handle;
  private final long mapTaskId;
  private final TaskContext context;
  private final ShuffleWriteMetricsReporter metrics;
  private final ExecutorContext executor;
  private final int batchSize;
  private MapWriter writer;
  private PartitionBuffers buffers;
  private MapStatus status;
  private long[] lengths = new long[0];

  CroupierShuffleWriter(
      CroupierShuffleHandle<K, V, C> handle,
      long mapTaskId,
      TaskContext context,
      ShuffleWriteMetricsReporter metrics,
      ExecutorContext executor,
      int batchSize) {
    this.handle = handle;
    this.mapTaskId = mapTaskId;
    this.context = context;
    this.metrics = metrics;
    this.executor = executor;
    this.batchSize = batchSize;
  }

  @Override
  @SuppressWarnings({"unchecked", "rawtypes"})
  public void write(Iterator<Product2<K, V>> records) throws IOException {
    ShuffleDependency<K, V, C> dep = handle.dependency();
    Shuffle shuffle = executor.writerShuffle(handle, context);
    int mapId = context.partitionId();
    int attempt = (context.stageAttemptNumber() << 16) | context.attemptNumber();
    long t0 = System.nanoTime();
    writer = shuffle.writer(mapId, attempt);
    metrics.incWriteTime(System.nanoTime() - t0);
    Partitioner partitioner = dep.partitioner();
    int n = partitioner.numPartitions();
    buffers = new PartitionBuffers(context.taskMemoryManager(), dep.serializer().newInstance(),
        SparkEnv.get().serializerManager(), handle.shuffleId(), mapTaskId, n, writer, batchSize, metrics);
    Iterator<? extends Product2<K, ?>> input = records;
    if (dep.mapSideCombine()) {
      if (dep.aggregator().isEmpty()) {
        throw new IllegalStateException("map-side combine without an aggregator");
      }
      input = (Iterator) dep.aggregator().get().combineValuesByKey((Iterator) records, context);
    }
    long count = 0;
    while (input.hasNext()) {
      Product2<K, ?> r = input.next();
      buffers.write(n == 1 ? 0 : partitioner.getPartition(r._1()), r._1(), r._2());
      count++;
      if ((count & 1023) == 0) {
        metrics.incRecordsWritten(1024);
      }
    }
    metrics.incRecordsWritten(count & 1023);
    buffers.flush();
    long t1 = System.nanoTime();
    boolean won = writer.commit();
    metrics.incWriteTime(System.nanoTime() - t1);
    lengths = buffers.sizes().clone();
    buffers.free();
    if (!won) {
      LOG.info("Croupier: map {} attempt {} of shuffle {} lost to another attempt (readers read the winner)",
          mapId, attempt, handle.shuffleId());
    }
    status = SparkCompat.mapStatus(lengths, mapTaskId);
  }

  @Override
  public Option<MapStatus> stop(boolean success) {
    if (writer != null) {
      writer.close(); // aborts (no MAPPER_END) unless write() committed
    }
    if (buffers != null) {
      buffers.free();
    }
    return success && status != null ? Option.apply(status) : Option.empty();
  }

  @Override
  public long[] getPartitionLengths() {
    return lengths;
  }
}
