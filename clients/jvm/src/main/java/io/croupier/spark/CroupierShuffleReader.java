package io.croupier.spark;

import io.croupier.client.Batch;
import io.croupier.client.BatchReader;
import io.croupier.client.DataLostException;
import io.croupier.client.Shuffle;
import java.io.ByteArrayInputStream;
import java.io.InputStream;
import org.apache.spark.InterruptibleIterator;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.serializer.SerializerManager;
import org.apache.spark.shuffle.FetchFailedException;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.storage.ShuffleBlockId;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.collection.ExternalSorter;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.Product2;
import scala.Tuple2;
import scala.collection.AbstractIterator;
import scala.collection.Iterator;
import scala.collection.Iterator$;

/**
 * Reads maps {@code [startMap, endMap)} x partitions {@code [startPartition, endPartition)} of a
 * Croupier shuffle, as AQE asks (skew splits read a map range, coalescing a partition range).
 * The client proves completeness over exactly that map range. Each batch is one serialized
 * stream; records are then aggregated and sorted as Spark's own {@code BlockStoreShuffleReader}
 * does. On {@code DATA_LOST} the reader asks the driver to reopen the lost maps, then throws
 * {@link FetchFailedException} (no block manager, no map index: Spark drops nothing itself).
 */
final class CroupierShuffleReader<K, C> implements ShuffleReader<K, C> {
  private static final Logger LOG = LoggerFactory.getLogger(CroupierShuffleReader.class);

  private final CroupierShuffleHandle<K, ?, C> handle;
  private final int startMap;
  private final int endMap;
  private final int startPartition;
  private final int endPartition;
  private final TaskContext context;
  private final ShuffleReadMetricsReporter metrics;
  private final ExecutorContext executor;

  CroupierShuffleReader(
      CroupierShuffleHandle<K, ?, C> handle,
      int startMap,
      int endMap,
      int startPartition,
      int endPartition,
      TaskContext context,
      ShuffleReadMetricsReporter metrics,
      ExecutorContext executor) {
    this.handle = handle;
    this.startMap = Math.max(0, startMap);
    this.endMap = Math.min(endMap, handle.numMappers());
    this.startPartition = startPartition;
    this.endPartition = Math.min(endPartition, handle.numPartitions());
    this.context = context;
    this.metrics = metrics;
    this.executor = executor;
  }

  @Override
  @SuppressWarnings({"unchecked", "rawtypes"})
  public Iterator<Product2<K, C>> read() {
    ShuffleDependency<K, ?, C> dep = handle.dependency();
    Iterator<Tuple2<Object, Object>> records;
    if (handle.numMappers() == 0 || startMap >= endMap || startPartition >= endPartition) {
      records = Iterator$.MODULE$.empty();
    } else {
      records = new Records(executor.readerShuffle(handle, context), dep.serializer().newInstance());
    }
    Iterator<Product2<K, C>> it = new InterruptibleIterator(context, records);
    if (dep.aggregator().isDefined()) {
      it = dep.mapSideCombine()
          ? (Iterator) dep.aggregator().get().combineCombinersByKey((Iterator) it, context)
          : (Iterator) dep.aggregator().get().combineValuesByKey((Iterator) it, context);
    }
    if (dep.keyOrdering().isDefined()) {
      ExternalSorter sorter = SparkCompat.sorter(
          context, Option.empty(), Option.empty(), dep.keyOrdering(), dep.serializer());
      sorter.insertAll(it);
      context.taskMetrics().incMemoryBytesSpilled(sorter.memoryBytesSpilled());
      context.taskMetrics().incDiskBytesSpilled(sorter.diskBytesSpilled());
      context.taskMetrics().incPeakExecutionMemory(sorter.peakMemoryUsedBytes());
      context.addTaskCompletionListener((TaskCompletionListener) ctx -> sorter.stop());
      it = new Completing(sorter.iterator(), sorter::stop);
    }
    return it instanceof InterruptibleIterator ? it : new InterruptibleIterator(context, it);
  }

  /** The records of every batch read, one batch's stream at a time, with read metrics. */
  private final class Records extends AbstractIterator<Tuple2<Object, Object>> {
    private final Shuffle shuffle;
    private final SerializerInstance serializer;
    private final SerializerManager serializers = SparkEnv.get().serializerManager();
    private final ShuffleBlockId blockId;
    private BatchReader batches;
    private Iterator<Tuple2<Object, Object>> current = Iterator$.MODULE$.empty();
    private boolean done;

    Records(Shuffle shuffle, SerializerInstance serializer) {
      this.shuffle = shuffle;
      this.serializer = serializer;
      this.blockId = new ShuffleBlockId(handle.shuffleId(), 0L, startPartition);
    }

    @Override
    public boolean hasNext() {
      while (!current.hasNext()) {
        if (done) {
          return false;
        }
        Batch b = nextBatch();
        if (b == null) {
          done = true;
          batches.close();
          context.taskMetrics().mergeShuffleReadMetrics();
          return false;
        }
        metrics.incRemoteBlocksFetched(1);
        metrics.incRemoteBytesRead(b.data().length);
        try {
          InputStream in = serializers.wrapStream(blockId, new ByteArrayInputStream(b.data()));
          current = serializer.deserializeStream(in).asKeyValueIterator();
        } catch (RuntimeException e) {
          throw new IllegalStateException("Croupier: batch of map " + b.mapId() + " partition "
              + b.partition() + " of shuffle " + handle.shuffleId() + " cannot be read", e);
        }
      }
      return true;
    }

    @Override
    public Tuple2<Object, Object> next() {
      if (!hasNext()) {
        throw new java.util.NoSuchElementException();
      }
      metrics.incRecordsRead(1);
      return current.next();
    }

    private Batch nextBatch() {
      long t0 = System.nanoTime();
      try {
        if (batches == null) {
          batches = shuffle.reader(startMap, endMap, startPartition, endPartition);
          BatchReader opened = batches;
          context.addTaskCompletionListener((TaskCompletionListener) ctx -> opened.close());
        }
        return batches.hasNext() ? batches.next() : null;
      } catch (DataLostException e) {
        throw fetchFailed(e);
      } finally {
        metrics.incFetchWaitTime((System.nanoTime() - t0) / 1_000_000);
      }
    }

    private RuntimeException fetchFailed(DataLostException e) {
      String done;
      try {
        done = executor.reportLost(handle.shuffleId(), shuffle.id());
      } catch (RuntimeException ask) {
        done = "the driver could not be told: " + ask;
      }
      String msg = "Croupier shuffle " + shuffle.id() + " (Spark shuffle " + handle.shuffleId() + ") lost data: "
          + e.getMessage() + "; driver: " + done;
      LOG.warn(msg);
      throw SparkCompat.sneakyThrow(
          new FetchFailedException(null, handle.shuffleId(), -1L, -1, startPartition, msg, e));
    }
  }

  /** Runs {@code onEnd} once the wrapped iterator is exhausted (as Spark's CompletionIterator). */
  private static final class Completing<T> extends AbstractIterator<T> {
    private final Iterator<T> inner;
    private final Runnable onEnd;
    private boolean ended;

    Completing(Iterator<T> inner, Runnable onEnd) {
      this.inner = inner;
      this.onEnd = onEnd;
    }

    @Override
    public boolean hasNext() {
      boolean more = inner.hasNext();
      if (!more && !ended) {
        ended = true;
        onEnd.run();
      }
      return more;
    }

    @Override
    public T next() {
      return inner.next();
    }
  }

}
