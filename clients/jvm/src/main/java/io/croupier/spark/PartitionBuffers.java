package io.croupier.spark;

import io.croupier.client.MapWriter;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import org.apache.spark.memory.MemoryConsumer;
import org.apache.spark.memory.MemoryMode;
import org.apache.spark.memory.TaskMemoryManager;
import org.apache.spark.serializer.SerializationStream;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.serializer.SerializerManager;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.storage.ShuffleBlockId;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * One map task's per-partition buffers, bounded through Spark's memory manager.
 *
 * <p>Each partition buffers the <em>uncompressed</em> output of its own serialization stream.
 * When it reaches the batch size, or when memory runs short, the stream is closed, the bytes are
 * compressed as Spark is configured ({@code SerializerManager.wrapStream}: compression and I/O
 * encryption), and the result is pushed as one batch. Every batch is therefore a complete,
 * self-contained serialized stream: never two streams concatenated, which Java serialization
 * would not read back. Spilling is pushing: when another consumer of the task needs memory
 * ({@link #spill}), every buffer is pushed and its memory released.
 */
final class PartitionBuffers extends MemoryConsumer {
  private static final ClassTag<Object> ANY = ClassTag$.MODULE$.Any();
  /** Memory is asked from Spark in steps of this size. */
  private static final long STEP = 1L << 20;
  /** Counted per open serialization stream (the serializer's own buffers). */
  private static final long STREAM_OVERHEAD = 8L << 10;

  private final SerializerInstance serializer;
  private final SerializerManager serializers;
  private final int shuffleId;
  private final long mapTaskId;
  private final MapWriter writer;
  private final int batchSize;
  private final ShuffleWriteMetricsReporter metrics;
  private final Buffer[] buffers;
  private final long[] sizes;
  private final ByteArrayOutputStream compressed = new ByteArrayOutputStream(64 << 10);
  private long accounted;
  private long granted;
  private boolean writing;

  /** A partition's uncompressed bytes and the stream writing them. */
  private static final class Buffer extends ByteArrayOutputStream {
    SerializationStream stream;

    Buffer() {
      super(4 << 10);
    }

    byte[] bytes() {
      return buf;
    }

    long footprint() {
      return buf.length + (stream == null ? 0 : STREAM_OVERHEAD);
    }
  }

  PartitionBuffers(
      TaskMemoryManager memory,
      SerializerInstance serializer,
      SerializerManager serializers,
      int shuffleId,
      long mapTaskId,
      int numPartitions,
      MapWriter writer,
      int batchSize,
      ShuffleWriteMetricsReporter metrics) {
    super(memory, MemoryMode.ON_HEAP);
    this.serializer = serializer;
    this.serializers = serializers;
    this.shuffleId = shuffleId;
    this.mapTaskId = mapTaskId;
    this.writer = writer;
    this.batchSize = batchSize;
    this.metrics = metrics;
    this.buffers = new Buffer[numPartitions];
    this.sizes = new long[numPartitions];
  }

  /** Serializes one record into {@code partition}'s buffer; pushes it once full. */
  void write(int partition, Object key, Object value) throws IOException {
    Buffer b = buffers[partition];
    if (b == null) {
      b = buffers[partition] = new Buffer();
    }
    long before = b.footprint();
    if (b.stream == null) {
      b.stream = serializer.serializeStream(b);
    }
    writing = true;
    try {
      b.stream.writeKey(key, ANY);
      b.stream.writeValue(value, ANY);
    } finally {
      writing = false;
    }
    accounted += b.footprint() - before;
    if (b.size() >= batchSize) {
      push(partition);
    }
    if (accounted > granted) {
      reserve();
    }
  }

  /** Asks Spark for memory; when refused, pushes the largest buffers until within the grant. */
  private void reserve() throws IOException {
    granted += acquireMemory(Math.max(accounted - granted, STEP));
    while (accounted > granted) {
      int largest = -1;
      for (int p = 0; p < buffers.length; p++) {
        if (buffers[p] != null && (largest < 0 || buffers[p].footprint() > buffers[largest].footprint())) {
          largest = p;
        }
      }
      if (largest < 0) {
        break;
      }
      drop(largest);
    }
  }

  /** Pushes {@code partition}'s buffer and forgets it. */
  private void drop(int partition) throws IOException {
    push(partition);
    Buffer b = buffers[partition];
    if (b != null) {
      accounted -= b.footprint();
      buffers[partition] = null;
    }
  }

  /** Closes {@code partition}'s stream, compresses its bytes and pushes them as one batch. */
  private void push(int partition) throws IOException {
    Buffer b = buffers[partition];
    if (b == null || b.stream == null) {
      return;
    }
    long before = b.footprint();
    b.stream.close();
    b.stream = null;
    compressed.reset();
    try (OutputStream out = serializers.wrapStream(new ShuffleBlockId(shuffleId, mapTaskId, partition), compressed)) {
      out.write(b.bytes(), 0, b.size());
    }
    byte[] data = compressed.toByteArray();
    long t0 = System.nanoTime();
    writer.pushBatch(partition, data, 0, data.length);
    metrics.incWriteTime(System.nanoTime() - t0);
    metrics.incBytesWritten(data.length);
    sizes[partition] += data.length;
    b.reset();
    accounted += b.footprint() - before;
    if (b.bytes().length > 2 * batchSize) {
      accounted -= b.footprint();
      buffers[partition] = null;
    }
  }

  private void release(long bytes) {
    long give = Math.min(bytes, granted);
    if (give > 0) {
      freeMemory(give);
      granted -= give;
    }
  }

  /** Pushes every buffer (the end of the map output). */
  void flush() throws IOException {
    for (int p = 0; p < buffers.length; p++) {
      push(p);
    }
  }

  /** Compressed bytes pushed per partition (what the MapStatus reports). */
  long[] sizes() {
    return sizes;
  }

  /** Releases every buffer and all the memory held. */
  void free() {
    for (int p = 0; p < buffers.length; p++) {
      buffers[p] = null;
    }
    accounted = 0;
    release(granted);
  }

  /**
   * Another consumer of this task needs memory: push every buffer and release it. A request of
   * this consumer itself ({@code trigger == this}) is handled by {@link #reserve} instead, and
   * nothing is pushed while a record is being serialized.
   */
  @Override
  public long spill(long size, MemoryConsumer trigger) throws IOException {
    if (trigger == this || writing) {
      return 0;
    }
    for (int p = 0; p < buffers.length; p++) {
      drop(p);
    }
    long freed = granted;
    release(granted);
    return freed;
  }
}
